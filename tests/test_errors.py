"""One error base: every input error pipedeck raises is a PipedeckError carrying the field it names."""

import pytest

from pipedeck.backends import ConfigError, ExportError, ServingConfig, load_hardware
from pipedeck.backends.live.client import http_error_line
from pipedeck.backends.profiles import ProfileError
from pipedeck.console.tunespec import TuneInputError, TuneInputs, build_spec
from pipedeck.scenarios import PipedeckError, ScenarioError, load_scenario
from pipedeck.store import StoreError
from pipedeck.tuner import SLOError, parse_slo


@pytest.mark.parametrize(
    "kind", [ConfigError, ProfileError, ScenarioError, SLOError, StoreError, ExportError, TuneInputError]
)
def test_every_input_error_shares_the_base(kind):
    assert issubclass(kind, PipedeckError)


@pytest.mark.parametrize(
    "fail, field",
    [
        (lambda: ServingConfig(tp=3).resolve(), "tp"),
        (lambda: load_hardware("no-such-card"), "hardware"),
        (lambda: load_scenario("azure-conv").workload(rate=-1.0), "rate"),
        (lambda: parse_slo("ttft=fast"), "slo"),
        (lambda: build_spec(TuneInputs(), "x.duckdb"), "slo"),
    ],
)
def test_the_error_names_its_field(fail, field):
    with pytest.raises(PipedeckError) as err:
        fail()
    assert err.value.field == field and "\n" not in str(err.value)


def test_a_long_http_error_is_cut_at_a_word_with_an_ellipsis():
    page = (
        "<html><body><h1>502 Bad Gateway</h1><p>The upstream engine did not answer; "
        + "raise the proxy timeout or lower --max-num-seqs, " * 6
        + "then retry.</p></body></html>"
    )
    line = http_error_line(502, page, "Bad Gateway")
    assert line.startswith("http 502: <html><body><h1>502 Bad Gateway") and line.endswith(" ...")
    assert len(line) <= len("http 502: ") + 200 and "\n" not in line
    assert not line[10:-4].endswith(("proxy timeo", "--max-num-se")), "cut between words"
    message = "The engine ran out of KV cache blocks; " + "raise --gpu-memory-utilization, " * 8
    assert http_error_line(500, f'{{"error": {{"message": "{message}"}}}}', "x") == f"http 500: {message}", (
        "an error object's message is whole"
    )
    assert http_error_line(503, "", "Service Unavailable") == "http 503: Service Unavailable"
    assert http_error_line(500, "x" * 300, "x") == "http 500: " + "x" * 196 + " ...", "one long word is still cut"
