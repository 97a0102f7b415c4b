"""A running OpenAI-compatible server as a `Backend`: replay a scenario against it, measure as clients do."""

from __future__ import annotations

from dataclasses import replace

from ...scenarios import Scenario
from ..base import RunObserver
from ..config import ResolvedConfig, ServingConfig
from ..result import RunResult
from .identity import CAPABILITIES, NAME
from .loadgen import LoadOptions, check_endpoint, run_scenario
from .profiling import ProfileSession, Profiling, with_measured_timeline


class LiveBackend:
    """Sends each scenario's requests to the server at `endpoint` on their schedule.

    The server runs whatever config it was started with (`pipedeck serve`
    starts it from one); the config given to `run` is recorded with the run,
    not applied (None: the model name and engine the server reports). A live
    server has a per-rank timeline only when `profiling` says where its
    profiler writes (profiling.py): each run is then profiled.
    """

    name = NAME

    def __init__(self, endpoint: str, options: LoadOptions = LoadOptions(), profiling: Profiling | None = None):
        self.endpoint, self.options, self.profiling = endpoint.rstrip("/"), options, profiling
        self.capabilities = replace(CAPABILITIES, timeline=profiling is not None)

    def check(self) -> None:
        """ServerUnreachable (one line) unless the server answers at its endpoint."""
        check_endpoint(self.endpoint)

    def close(self) -> None:
        """Nothing to release: each run opens and closes its own connections."""

    def run(
        self,
        scenario: Scenario,
        config: ServingConfig | ResolvedConfig | None,
        rate: float | None = None,
        seed: int = 0,
        num_requests: int | None = None,
        observer: RunObserver | None = None,
        timeline: bool = True,
    ) -> RunResult:
        """Replay `scenario` against the server and return what the clients and /metrics saw (and, profiling, the
        per-rank timeline its profiler measured: spans only with `timeline`)."""
        profile = None if self.profiling is None else ProfileSession(self.profiling)
        result = run_scenario(
            scenario,
            self.endpoint,
            rate=rate,
            seed=seed,
            num_requests=num_requests,
            options=self.options,
            config=None if config is None else config.to_dict(),
            observer=observer,
            profile=profile,
        )
        if profile is None:
            return result
        assert result.live is not None and result.live.started_at is not None, "run_scenario records both"
        pipeline_ranks = result.config.get("pp")  # the recorded config's, when there is one
        traces = profile.traces(pipeline_ranks if isinstance(pipeline_ranks, int) else None)
        return with_measured_timeline(result, traces, result.live.started_at, spans=timeline)
