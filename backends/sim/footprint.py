"""The simulator's memory footprint, estimated before a run and checked against the memory available.

Every request costs its records, its workload entry and its scheduler state;
with a timeline, every span the run keeps (and stores) costs more. The
bytes of each were measured by benchmarks/sim_memory.py (the largest over
its scenarios). Spans are counted from below: a prompt takes at least one
step per chunk, a decode step emits at most one token for each of
min(max running, closed-loop concurrency) requests, and each step leaves
one span per virtual stage and, with blocking transfers, a send and a
receive per hop. A run that would need more than the machine has is
refused before it starts, with the estimate.
"""

from __future__ import annotations

import os
from pathlib import Path

from ...scenarios import PipedeckError, Scenario
from ..config import ResolvedConfig

REQUEST_BYTES = 625  # per request, timeline off; measured by benchmarks/sim_memory.py (524-625 B)
SPAN_BYTES = 422  # per timeline span, kept and stored; measured by benchmarks/sim_memory.py (396-422 B)
SAMPLE = 1000  # requests drawn to count a workload's chunks and decodes
MEMINFO = Path("/proc/meminfo")


class FootprintError(PipedeckError):
    """A run needs more memory than the machine has available."""


def footprint(scenario: Scenario, config: ResolvedConfig | None, num_requests: int | None = None, seed: int = 0,
              rate: float | None = None, timeline: bool = True) -> int:
    """Estimated bytes a simulation of `num_requests` (default: the scenario's) needs at its peak.

    Without a timeline the config does not matter (None: any config, as before a tune).
    """
    n = scenario.num_requests if num_requests is None else num_requests
    total = n * REQUEST_BYTES
    if timeline and config is not None:
        total += n * _spans_per_request(scenario, config, min(n, SAMPLE), seed, rate) * SPAN_BYTES
    return int(total)


def _spans_per_request(scenario: Scenario, config: ResolvedConfig, sample: int, seed: int,
                       rate: float | None) -> float:
    """The fewest timeline spans a request of this workload leaves, on average, under this config."""
    workload = scenario.workload(seed=seed, rate=rate, num_requests=sample)
    batch = min(config.max_running, workload.concurrency or config.max_running)
    requests = workload.requests
    chunks = sum(-(-r.prompt_tokens // config.chunk) for r in requests) / len(requests)
    steps = chunks + sum(max(r.output_tokens - 1, 0) for r in requests) / len(requests) / batch
    ranks = config.stage_ranks
    hops = sum(a != b for a, b in zip(ranks, ranks[1:]))
    return float(steps * (len(ranks) + (2 * hops if config.mode_spec.sync_transfers else 0)))


def available_bytes() -> int | None:
    """Memory the machine can still give a process (MemAvailable), or None where that cannot be read."""
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def check_footprint(scenario: Scenario, config: ResolvedConfig | None, num_requests: int | None = None,
                    seed: int = 0, rate: float | None = None, timeline: bool = True) -> None:
    """Refuse, in one line with the estimate, a simulation that would need more memory than is available."""
    available = available_bytes()
    if available is None:
        return
    n = scenario.num_requests if num_requests is None else num_requests
    needed = footprint(scenario, config, n, seed, rate, timeline)
    if needed > available:
        spans = f", {SPAN_BYTES} B a timeline span" if timeline else ""
        raise FootprintError(
            f"requests: {n} requests need about {_gb(needed)} or more to simulate ({REQUEST_BYTES} B a request"
            f"{spans}, measured by benchmarks/sim_memory.py), more than the {_gb(available)} available; "
            "use fewer --requests")


def _gb(value: float) -> str:
    return f"{value / 1e9:.1f} GB" if value >= 1e8 else f"{value / 1e6:.0f} MB"
