"""Per-rank timelines as Chrome trace JSON (opens in Perfetto or chrome://tracing)."""

from __future__ import annotations

import json
from pathlib import Path

from .result import RunResult


def chrome_trace(result: RunResult) -> dict[str, object]:
    """One trace process, one thread per rank, one complete event per span (microseconds)."""
    events: list[dict[str, object]] = [
        {"ph": "M", "name": "process_name", "pid": 0, "args": {"name": f"pipedeck {result.scenario}"}},
    ]
    for rank in range(len(result.ranks)):
        events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": rank, "args": {"name": f"rank {rank}"}})
    for s in result.spans:
        if s.request >= 0:
            label = f"s{s.stage} r{s.request} c{s.chunk}"
        else:  # a measured step or transfer names no request; a simulated one without is a decode-only batch's
            label = f"s{s.stage} {s.kind} b{s.batch}" if result.measured_timeline else f"s{s.stage} decode"
        events.append(
            {
                "ph": "X",
                "pid": 0,
                "tid": s.rank,
                "name": label,
                "cat": s.kind,
                "ts": s.start * 1e6,
                "dur": (s.end - s.start) * 1e6,
                "args": {"stage": s.stage, "batch": s.batch, "request": s.request, "chunk": s.chunk, "kind": s.kind},
            }
        )
    return {"traceEvents": events, "displayTimeUnit": "ms"}


def write_chrome_trace(result: RunResult, path: str | Path) -> Path:
    """Write the run's timeline to `path` as Chrome trace JSON."""
    path = Path(path)
    path.write_text(json.dumps(chrome_trace(result)))
    return path
