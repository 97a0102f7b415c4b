"""What every installed backend must do, checked on each one (like Optuna's storage test suite).

Each backend the registry discovers has a factory here (the live one runs
against the mock streaming server in a process of its own); one installed
without a factory fails `test_every_installed_backend_is_checked`.
"""

from __future__ import annotations

import pytest

from pipedeck.backends import (
    Backend,
    ConfigError,
    RunCancelled,
    RunObserver,
    RunResult,
    ServerError,
    ServingConfig,
    backend_entry,
    backends,
    make_backend,
)
from pipedeck.scenarios import load_scenario
from pipedeck.store import RunStore

CONFIG = ServingConfig.of(model="qwen2.5-14b", hardware="a100-40g-pcie", tp=2, pp=2, chunk=2048)
REQUESTS = 12
RATE = 20.0
CHECKED = {  # each backend's test options: name -> (pytest request -> keyword options)
    "sim": lambda request: {},
    "live": lambda request: {"endpoint": request.getfixturevalue("mock_server"), "metrics_interval_s": 0.1},
}
CLOCK_SLACK_S = 1e-6  # an event loop may wake a timer this much before its time


def test_every_installed_backend_is_checked():
    assert set(backends()) <= set(CHECKED)


@pytest.fixture(params=list(backends()))
def backend(request) -> Backend:
    made = make_backend(request.param, **CHECKED[request.param](request))
    made.check()
    yield made
    made.close()


def run(backend: Backend, observer: RunObserver | None = None, timeline: bool = True) -> RunResult:
    return backend.run(
        load_scenario("azure-conv"),
        CONFIG,
        rate=RATE,
        seed=3,
        num_requests=REQUESTS,
        observer=observer,
        timeline=timeline,
    )


def test_it_is_installed_under_its_name_with_the_capabilities_it_declares(backend):
    declared = backend_entry(backend.name)
    assert declared.name == backend.name and declared.capabilities == backend.capabilities
    assert declared.title and "\n" not in declared.title
    assert CONFIG.mode in backend.capabilities.modes


def test_check_passes_and_close_is_harmless_twice_and_before_a_run(backend):
    backend.check()
    backend.close()
    backend.close()
    result = run(backend)  # closed, it still runs (a launching backend starts a fresh server)
    assert isinstance(result, RunResult) and len(result.records) == REQUESTS


def test_its_result_has_the_shape_of_a_run(backend):
    result = run(backend)
    assert isinstance(result.config, dict) and result.makespan_s > 0
    assert all(isinstance(value, int | None) for value in (result.steps, result.chunks, result.preemptions))
    assert bool(result.ranks) == backend.capabilities.timeline  # what it cannot measure is absent, not zero
    assert (result.live is None) == backend.capabilities.simulated


def test_a_backend_that_cannot_run_says_so_in_one_line(tmp_path):
    """check() is where a dead endpoint or a missing engine program is found, before any work."""
    with pytest.raises(ServerError, match=r"^endpoint: http://127.0.0.1:9/v1/models lists no model \("):
        make_backend("live", endpoint="http://127.0.0.1:9").check()
    program = tmp_path / "llama-server"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o755)
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    launching = make_backend(
        "live", launch="llama-server", model_path=str(tmp_path / "m.gguf"), program=str(program), log_dir=str(tmp_path)
    )
    program.unlink()
    with pytest.raises(ConfigError, match=r"^program: '.*llama-server' not found"):
        launching.check()


def test_every_request_of_the_workload_comes_back_once_in_time_order(backend):
    result = run(backend)
    asked = load_scenario("azure-conv").workload(seed=3, rate=RATE, num_requests=REQUESTS).requests
    assert sorted(r.id for r in result.records) == [q.id for q in asked]
    by_id = sorted(result.records, key=lambda r: r.id)
    assert [r.arrival_s for r in by_id] == sorted(r.arrival_s for r in by_id)  # they arrive in the workload's order
    for record, request in zip(by_id, asked):
        # never before the workload says; how late a live send may be is the machine's load, not the backend's
        # contract (tests/live/test_loadgen.py checks the live sends against their schedule)
        assert record.arrival_s >= request.arrival_s - CLOCK_SLACK_S
        assert record.arrival_s < record.first_token_s <= record.finish_s <= result.makespan_s
    assert (result.backend, result.scenario, result.seed, result.rate) == (backend.name, "azure-conv", 3, RATE)


def test_it_draws_a_timeline_exactly_when_it_says_it_can(backend):
    result = run(backend)
    assert bool(result.spans) == backend.capabilities.timeline
    assert not run(backend, timeline=False).spans


def test_the_observer_sees_each_request_finish_once(backend):
    class Counting(RunObserver):
        def __init__(self) -> None:
            self.done: list[int] = []

        def request_done(self, record) -> None:
            self.done.append(record.id)

    observer = Counting()
    result = run(backend, observer)
    assert sorted(observer.done) == sorted(r.id for r in result.records)


def test_an_observer_can_stop_the_run(backend):
    class Stopping(RunObserver):
        def should_stop(self) -> bool:
            return True

    with pytest.raises(RunCancelled):
        run(backend, Stopping())


def test_its_result_is_stored_and_read_back_unchanged(backend, tmp_path):
    result = run(backend)
    with RunStore.open(tmp_path / "runs.duckdb") as store:
        stored = store.get_run(store.save_run(result)).result
    assert stored.records == result.records and stored.spans == result.spans and stored.live == result.live
    assert stored.summary() == result.summary() and stored.steps == result.steps
