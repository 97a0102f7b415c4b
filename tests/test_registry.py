"""The backend registry: names to factories and capabilities, used by the CLI, the tuner and the console."""

import pytest

from pipedeck.backends import BACKENDS, ConfigError, backend_entry, make_backend
from pipedeck.backends.sim import SimBackend
from pipedeck.console.tunespec import TuneInputs, build_spec
from pipedeck.tuner.objective import Evaluator


def test_the_simulator_draws_timelines_and_runs_unpaced_the_live_backend_the_opposite():
    sim, live = BACKENDS["sim"].capabilities, BACKENDS["live"].capabilities
    assert isinstance(make_backend("sim"), SimBackend)
    assert (sim.timeline, sim.paced, sim.reconfigurable) == (True, False, True)
    assert (live.timeline, live.paced, live.reconfigurable) == (False, True, False)


def test_an_unknown_backend_is_one_line_naming_the_choices():
    with pytest.raises(ConfigError) as err:
        backend_entry("nope")
    assert str(err.value) == f"backend: unknown backend 'nope'; allowed: {', '.join(BACKENDS)}"
    with pytest.raises(ConfigError, match=r"^backend: the simulator takes no options, got endpoint$"):
        make_backend("sim", endpoint="http://127.0.0.1:1")


def test_tune_runs_trials_on_the_backend_it_names(tmp_path):
    spec = build_spec(TuneInputs(slo="ttft=2s,tpot=200ms", requests=20, backend="sim"), tmp_path / "x.duckdb")
    assert spec.backend == "sim" and spec.settings()["backend"] == "sim"
    assert isinstance(Evaluator(spec).backend, SimBackend)
