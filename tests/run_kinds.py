"""Every kind of run a store can hold, the awkward ones included: for the tests that list, show and compare them."""

from __future__ import annotations

from pathlib import Path

from pipedeck.backends import RunResult, ServingConfig
from pipedeck.backends.live.loadgen import run_result
from pipedeck.backends.live_result import LiveRequest, LiveRun
from pipedeck.backends.sim import SimBackend
from pipedeck.scenarios import load_scenario
from pipedeck.store import RunStore

QWEN = ServingConfig.of(model="qwen2.5-14b", hardware="a100-40g-pcie", tp=2, pp=2)


def served(number: int, output_tokens: int = 5) -> LiveRequest:
    """A request a live server answered: first token at 0.1 s, done at 0.3 s."""
    return LiveRequest(number, 0.0, 0.0, 0.1, 0.3, 128, 5, output_tokens, "usage", ())


def failed(number: int, error: str) -> LiveRequest:
    """A request that got no token before `error`."""
    return LiveRequest(number, 0.0, 0.0, None, 0.2, 128, 5, 0, "events", (), error=error)


def live(requests: list[LiveRequest], unsent: int = 0) -> RunResult:
    """A live run of these requests, as the load generator turns them into pipedeck's RunResult."""
    return run_result(
        LiveRun(requests, unsent=unsent, loadgen_cpu_s=0.01), "short-4k", QWEN.resolve().to_dict(), seed=0, rate=None
    )


def awkward_runs() -> dict[str, RunResult]:
    """Label -> run: a plain simulated run, then every kind whose summary lacks a latency or a request."""
    simulate = SimBackend().run
    return {
        "simulated": simulate(load_scenario("short-4k"), QWEN, num_requests=4),
        "one-request": simulate(load_scenario("short-4k"), QWEN, num_requests=1),
        "all-failed": live([failed(i, "connect: [Errno 111] Connection refused") for i in range(3)]),
        "no-output": live([served(0, output_tokens=0), served(1, output_tokens=1)]),  # no TPOT anywhere
        "interrupted": live([served(0), failed(1, "run time limit: still streaming after 0 events")], unsent=2),
    }


def store_awkward_runs(db: Path) -> dict[str, int]:
    """Store `awkward_runs()` (labelled with their kind) in `db`; label -> run id."""
    with RunStore.open(db) as store:
        return {label: store.save_run(result, label=label) for label, result in awkward_runs().items()}
