"""The mock server's stand-in for vLLM's torch profiler: `/start_profile` and `/stop_profile`, then one trace per
worker of a two-stage pipeline, in the layout vLLM's CPU workers write (rank_trace.py reads it).

While profiling it notes when each completion arrived and when each of its tokens went out; at the stop it lays
out the steps that would have made them, one after another on each rank (a prefill step when a request
arrives, a decode step before each later token, an empty micro-batch after each prefill), rank 0 sending
each step's activations to rank 1, whose receive waits from when it was posted. The traces appear a while
after the stop (`write_delay_s`), as a real server's do, with the API server's own trace beside them.
"""

from __future__ import annotations

import asyncio
import gzip
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path

STEP_S = 0.0005  # each step's length on each rank
SEND_S = 0.00005
_SESSIONS = itertools.count(1)


@dataclass
class MockProfiler:
    """Profiling state and the traces it writes to `folder`."""

    folder: Path
    write_delay_s: float = 0.5
    active: bool = False
    work: list[tuple[float, str]] = field(default_factory=list)  # (wall-clock second, step annotation)
    writes: set[asyncio.Task[None]] = field(default_factory=set)

    def start(self) -> None:
        self.active, self.work = True, []

    def served(self, arrived: float, prompt_tokens: int, token_times: list[float]) -> None:
        """A completion that arrived at `arrived` and sent its tokens at `token_times` (wall-clock seconds)."""
        if not self.active:
            return
        self.work.append((arrived, f"execute_context_1({prompt_tokens})_generation_0(0)"))
        self.work.append((arrived, "execute_context_0(0)_generation_0(0)"))
        # each decode step ran just before its token went out, after the prefill (tokens may go out at once)
        self.work += [(max(arrived, t - 2 * STEP_S), "execute_context_0(0)_generation_1(1)") for t in token_times[1:]]

    def stop(self) -> None:
        """Stop profiling; the traces are written `write_delay_s` later."""
        self.active = False
        ordered = sorted(self.work, key=lambda item: item[0])  # stable: a request's prefill before its decodes
        task = asyncio.create_task(self._write_later(ordered, next(_SESSIONS)))
        self.writes.add(task)
        task.add_done_callback(self.writes.discard)

    async def _write_later(self, work: list[tuple[float, str]], session: int) -> None:
        await asyncio.sleep(self.write_delay_s)
        for rank, events in enumerate(_pipeline(work)):
            _write(self.folder / f"rank{rank}.{session}.pt.trace.json.gz", f"VLLM::Worker_PP{rank}", events)
        _write(self.folder / f"mock_0.async_llm.{session}.pt.trace.json.gz", "python", [])


def _pipeline(work: list[tuple[float, str]]) -> tuple[list[dict[str, object]], list[dict[str, object]]]:
    """Rank 0's and rank 1's events (microseconds) for steps wanted at the given times, each rank one at a time."""
    first: list[dict[str, object]] = []
    second: list[dict[str, object]] = []
    free = [0.0, 0.0]
    for at, name in work:
        start = max(at, free[0])
        first.append(_event(name, "user_annotation", start, STEP_S))
        free[0] = start + STEP_S
        if name.startswith("execute_context_0(0)_generation_0(0)"):
            continue  # an empty micro-batch moves nothing
        first.append(_event("_C::shm_send_tensor_list", "cpu_op", free[0], SEND_S))
        posted = max(free[1], start)
        arrived = free[0] + SEND_S
        second.append(_event("_C::shm_recv_tensor_list", "cpu_op", posted, max(arrived, posted) - posted + SEND_S))
        start = max(arrived, posted) + SEND_S
        second.append(_event(name, "user_annotation", start, STEP_S))
        free[1] = start + STEP_S
    return first, second


def _event(name: str, category: str, start_s: float, duration_s: float) -> dict[str, object]:
    return {"ph": "X", "cat": category, "name": name, "pid": 1, "tid": 1, "ts": start_s * 1e6, "dur": duration_s * 1e6}


def _write(path: Path, process: str, events: list[dict[str, object]]) -> None:
    """One trace as torch writes it: baseTimeNanoseconds 0, so `ts` is wall-clock microseconds."""
    title = {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": process}}
    with gzip.open(path, "wt") as out:
        json.dump({"baseTimeNanoseconds": 0, "traceEvents": [title, *events]}, out)
