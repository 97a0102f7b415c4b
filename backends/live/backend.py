"""A running OpenAI-compatible server as a `Backend`: replay a scenario against it, measure as clients do."""

from __future__ import annotations

from ...scenarios import Scenario
from ..base import RunObserver
from ..config import ResolvedConfig, ServingConfig
from ..result import RunResult
from .identity import CAPABILITIES, NAME
from .loadgen import LoadOptions, check_endpoint, run_scenario


class LiveBackend:
    """Sends each scenario's requests to the server at `endpoint` on their schedule.

    The server runs whatever config it was started with (`pipedeck serve`
    starts it from one); the config given to `run` is recorded with the run,
    not applied (None: the model name and engine the server reports). A live
    server has no per-rank timeline.
    """

    name = NAME
    capabilities = CAPABILITIES

    def __init__(self, endpoint: str, options: LoadOptions = LoadOptions()):
        self.endpoint, self.options = endpoint.rstrip("/"), options

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
        """Replay `scenario` against the server and return what the clients and /metrics saw."""
        return run_scenario(
            scenario,
            self.endpoint,
            rate=rate,
            seed=seed,
            num_requests=num_requests,
            options=self.options,
            config=None if config is None else config.to_dict(),
            observer=observer,
        )
