"""One error base: every input error pipedeck raises is a PipedeckError carrying the field it names."""

import pytest

from pipedeck.backends.config import ServingConfig
from pipedeck.backends.errors import ConfigError
from pipedeck.backends.launch import ExportError
from pipedeck.backends.profiles import ProfileError, load_hardware
from pipedeck.console.tunespec import TuneInputError, TuneInputs, build_spec
from pipedeck.scenarios import PipedeckError, ScenarioError, load_scenario
from pipedeck.store import StoreError
from pipedeck.tuner.slo import SLOError, parse_slo


@pytest.mark.parametrize("kind", [ConfigError, ProfileError, ScenarioError, SLOError, StoreError, ExportError,
                                  TuneInputError])
def test_every_input_error_shares_the_base(kind):
    assert issubclass(kind, PipedeckError)


@pytest.mark.parametrize("fail, field", [
    (lambda: ServingConfig(tp=3).resolve(), "tp"),
    (lambda: load_hardware("no-such-card"), "hardware"),
    (lambda: load_scenario("azure-conv").workload(rate=-1.0), "rate"),
    (lambda: parse_slo("ttft=fast"), "slo"),
    (lambda: build_spec(TuneInputs(), "x.duckdb"), "slo"),
])
def test_the_error_names_its_field(fail, field):
    with pytest.raises(PipedeckError) as err:
        fail()
    assert err.value.field == field and "\n" not in str(err.value)
