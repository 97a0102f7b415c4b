"""A backend declared outside pipedeck, as a third party's package would: every request served at a fixed pace.

tests/backends/test_registry.py installs it through a stand-in for the `pipedeck.backends` entry points.
"""

from __future__ import annotations

from pipedeck.backends import MODES, ConfigError, RequestRecord, RunCancelled, RunObserver, RunResult, ServingConfig
from pipedeck.backends.base import BackendDeclaration, Capabilities
from pipedeck.scenarios import Scenario

FIRST_TOKEN_S, TOKEN_S = 0.05, 0.01


class FixedPaceBackend:
    """Serves each request `FIRST_TOKEN_S` after it arrives, then a token every `TOKEN_S`."""

    name = "fixed-pace"
    capabilities = Capabilities(modes=tuple(MODES), timeline=False, reconfigurable=True, paced=False)

    def __init__(self) -> None:
        self.closed = 0

    def check(self) -> None:
        """Nothing to check."""

    def close(self) -> None:
        self.closed += 1

    def run(
        self,
        scenario: Scenario,
        config: ServingConfig,
        rate: float | None = None,
        seed: int = 0,
        num_requests: int | None = None,
        observer: RunObserver | None = None,
        timeline: bool = True,
    ) -> RunResult:
        records = []
        for request in scenario.workload(seed=seed, rate=rate, num_requests=num_requests).requests:
            if observer is not None and observer.should_stop():
                raise RunCancelled("stopped")
            first = request.arrival_s + FIRST_TOKEN_S
            record = RequestRecord(
                request.id,
                request.arrival_s,
                request.prompt_tokens,
                request.output_tokens,
                first,
                first + TOKEN_S * (request.output_tokens - 1),
            )
            records.append(record)
            if observer is not None:
                observer.request_done(record)
        return RunResult(
            config=config.resolve().to_dict(),
            scenario=scenario.name,
            backend=self.name,
            seed=seed,
            rate=rate,
            records=records,
            ranks=[],
            makespan_s=max((r.finish_s for r in records), default=0.0),
            steps=None,
            chunks=None,
            stage_executions=None,
            preemptions=None,
        )


def make(**options: object) -> FixedPaceBackend:
    if options:
        raise ConfigError(f"backend: fixed-pace takes no options, got {', '.join(sorted(options))}")
    return FixedPaceBackend()


FIXED_PACE = BackendDeclaration(
    name=FixedPaceBackend.name,
    title="every request at a fixed pace (a test's third-party backend)",
    capabilities=FixedPaceBackend.capabilities,
    make=make,
)
