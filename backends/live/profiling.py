"""Profile one live run with the engine's own profiler and read back its measured per-rank timeline.

The server must have been started with a profiler directory (vLLM: `--profiler-config` with
`torch_profiler_dir`, which `pipedeck serve --profile-dir` passes), on this host or a folder it shares.
`POST /start_profile` just before the run's clock starts and `POST /stop_profile` once its last request
ended (also when it fails or is cancelled, so the server is not left profiling); each worker then writes its
trace, which takes a while after the stop returns (seconds to minutes: the workers compress it). The traces
of this run are the ones that were not in the directory when it started, with vLLM's API-server trace
(`*.async_llm.*`, no steps) left out; they are taken once a poll finds the same files with the same sizes
as the poll before, all readable, from as many pipeline ranks as the run's config has (when it says).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import ConfigError, ServerError
from ..result import RunResult
from .rank_timeline import measured_timeline
from .rank_trace import RankTrace, TraceFileError, read_rank_trace

if TYPE_CHECKING:
    import httpx

PROFILE_WAIT_S = 300.0  # how long the traces may take to appear after /stop_profile
POLL_S = 1.0
TRACE_PATTERNS = ("**/*.pt.trace.json.gz", "**/*.pt.trace.json", "**/ASCEND_PROFILER_OUTPUT/trace_view.json")
FRONTEND = ".async_llm."  # vLLM's API-server trace: its own process, no steps


class ProfileError(ServerError):
    """The server could not be profiled, or its traces did not come; one line naming the endpoint or folder."""


@dataclass(frozen=True)
class Profiling:
    """Where a server's profiler writes its traces (on this host, or a folder it shares), and how long they may
    take to come after a run."""

    folder: Path
    wait_s: float = PROFILE_WAIT_S

    def __post_init__(self) -> None:
        if not (isinstance(self.wait_s, int | float) and self.wait_s > 0):
            raise ConfigError(f"profile_wait_s: a positive number of seconds, got {self.wait_s!r}")


@dataclass
class ProfileSession:
    """One profiled run: the traces there before it, the start and stop calls, and the wait for its traces."""

    profiling: Profiling
    before: frozenset[Path] = field(default_factory=frozenset)

    @property
    def folder(self) -> Path:
        return self.profiling.folder

    @property
    def wait_s(self) -> float:
        return self.profiling.wait_s

    def trace_files(self) -> set[Path]:
        """Every rank trace file in the folder now (the API server's left out)."""
        return {p for pattern in TRACE_PATTERNS for p in self.folder.glob(pattern) if FRONTEND not in p.name}

    async def start(self, client: httpx.AsyncClient) -> None:
        """Note the traces already there and start the server's profiler; ProfileError if it has none."""
        self.before = frozenset(self.trace_files())
        await self._post(client, "/start_profile")

    async def stop(self, client: httpx.AsyncClient) -> None:
        """Stop the server's profiler (it then writes the traces)."""
        await self._post(client, "/stop_profile")

    async def _post(self, client: httpx.AsyncClient, path: str) -> None:
        import httpx  # here: the backend's declaration reads PROFILE_WAIT_S without loading the HTTP stack

        url = str(client.base_url.join(path))
        try:
            response = await client.post(path, timeout=self.wait_s)
        except httpx.HTTPError as err:
            raise ProfileError(f"profile: POST {url} failed ({type(err).__name__}: {err})") from None
        if response.status_code == 404:
            raise ProfileError(
                f"profile: the server has no profiler (POST {url} answered 404); start it with one writing to "
                f"{self.folder} (pipedeck serve --profile-dir, or vLLM's --profiler-config torch_profiler_dir)"
            )
        if response.status_code != 200:
            raise ProfileError(f"profile: POST {url} answered HTTP {response.status_code}: {response.text[:160]}")

    def traces(
        self,
        pipeline_ranks: int | None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> list[RankTrace]:
        """The run's rank traces, once written (`pipeline_ranks` of them when known); ProfileError after `wait_s`."""
        deadline = clock() + self.wait_s
        seen: dict[Path, int] | None = None
        problem = f"no new trace came to {self.folder}"
        while True:
            sizes = {p: p.stat().st_size for p in sorted(self.trace_files() - self.before)}
            if sizes and sizes == seen:  # unchanged since the last poll: written, unless a rank is still to come
                try:
                    traces = [read_rank_trace(p) for p in sizes]
                except TraceFileError as err:
                    problem = str(err).removeprefix("profile: ")
                else:
                    found = len({t.rank for t in traces})
                    if pipeline_ranks is None or found >= pipeline_ranks:
                        return traces
                    problem = f"traces of {found} of the {pipeline_ranks} pipeline ranks came to {self.folder}"
            if clock() > deadline:
                raise ProfileError(f"profile: {problem} within {self.wait_s:g} s of /stop_profile")
            seen = sizes
            sleep(POLL_S)


def with_measured_timeline(
    result: RunResult, traces: list[RankTrace], started_at: float, *, spans: bool = True
) -> RunResult:
    """`result` with the per-rank time split, step counts and (with `spans`) the spans of its profiler traces,
    over the run from `started_at` (wall-clock seconds) to its makespan."""
    start_us = started_at * 1e6
    measured = measured_timeline(traces, start_us, start_us + result.makespan_s * 1e6)
    return replace(
        result,
        ranks=measured.ranks,
        spans=measured.spans if spans else [],
        steps=measured.steps,
        chunks=measured.chunks,
        stage_executions=measured.stage_executions,
    )
