"""What every registered backend must do, checked on each one (like Optuna's storage test suite).

Each registered backend has a factory here (the live one runs against the
mock streaming server in a process of its own); one registered without a
factory fails `test_every_registered_backend_is_checked`.
"""

from __future__ import annotations

import pytest

from pipedeck.backends import BACKENDS, Backend, RunCancelled, RunObserver, RunResult, ServingConfig, make_backend
from pipedeck.scenarios import load_scenario
from pipedeck.store import RunStore

CONFIG = ServingConfig(model="qwen2.5-14b", hardware="a100-40g-pcie", tp=2, pp=2, chunk=2048)
REQUESTS = 12
RATE = 20.0
CHECKED = ("sim", "live")


def test_every_registered_backend_is_checked():
    assert set(BACKENDS) <= set(CHECKED)


@pytest.fixture(params=CHECKED)
def backend(request) -> Backend:
    if request.param == "live":
        return make_backend("live", endpoint=request.getfixturevalue("mock_server"), metrics_interval_s=0.1)
    return make_backend(request.param)


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


def test_it_is_registered_under_its_name_with_its_capabilities(backend):
    assert BACKENDS[backend.name].capabilities == backend.capabilities
    assert CONFIG.mode in backend.capabilities.modes


def test_every_request_of_the_workload_comes_back_once_in_time_order(backend):
    result = run(backend)
    asked = load_scenario("azure-conv").workload(seed=3, rate=RATE, num_requests=REQUESTS).requests
    assert sorted(r.id for r in result.records) == [q.id for q in asked]
    for record, request in zip(sorted(result.records, key=lambda r: r.id), asked):
        assert record.arrival_s == pytest.approx(request.arrival_s, abs=0.05)
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
