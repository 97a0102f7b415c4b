"""The simulator's memory footprint, estimated before a run (backends/footprint.py checks it).

Every request costs its records, its workload entry and its scheduler state;
with a timeline, every span the run keeps (and stores) costs more. The
bytes of each were measured by benchmarks/sim_memory.py (the largest over
its scenarios). Spans are counted from below: a prompt takes at least one
step per chunk, a decode step emits at most one token for each of
min(max running, closed-loop concurrency) requests, and each step leaves
one span per virtual stage and, with blocking transfers, a send and a
receive per hop. backends/footprint.py refuses a run that would need more
than the machine has, before it starts, with the estimate.
"""

from __future__ import annotations

import itertools

from ...scenarios import Scenario
from ..base import Footprint
from ..config import ResolvedConfig
from ..footprint import SAMPLE

REQUEST_BYTES = 625  # per request, timeline off; measured by benchmarks/sim_memory.py (524-625 B)
SPAN_BYTES = 422  # per timeline span, kept and stored; measured by benchmarks/sim_memory.py (396-422 B)


def footprint(
    scenario: Scenario,
    config: ResolvedConfig | None,
    num_requests: int | None = None,
    seed: int = 0,
    rate: float | None = None,
    timeline: bool = True,
) -> int:
    """Estimated bytes a simulation of `num_requests` (default: the scenario's) needs at its peak.

    Without a timeline the config does not matter (None: any config, as before a tune).
    """
    n = scenario.num_requests if num_requests is None else num_requests
    total: float = n * REQUEST_BYTES
    if timeline and config is not None:
        total += n * _spans_per_request(scenario, config, min(n, SAMPLE), seed, rate) * SPAN_BYTES
    return int(total)


def _spans_per_request(scenario: Scenario, config: ResolvedConfig, sample: int, seed: int, rate: float | None) -> float:
    """The fewest timeline spans a request of this workload leaves, on average, under this config."""
    workload = scenario.workload(seed=seed, rate=rate, num_requests=sample)
    batch = min(config.scheduling.max_running, workload.concurrency or config.scheduling.max_running)
    requests = workload.requests
    chunks = sum(-(-r.prompt_tokens // config.scheduling.chunk) for r in requests) / len(requests)
    steps = chunks + sum(max(r.output_tokens - 1, 0) for r in requests) / len(requests) / batch
    ranks = config.stage_ranks
    hops = sum(a != b for a, b in itertools.pairwise(ranks))
    return float(steps * (len(ranks) + (2 * hops if config.mode_spec.sync_transfers else 0)))


def estimate(
    scenario: Scenario,
    config: ResolvedConfig | None,
    num_requests: int,
    seed: int = 0,
    rate: float | None = None,
    timeline: bool = True,
) -> Footprint:
    """The simulator's `footprint`, with what it counts."""
    spans = f", {SPAN_BYTES} B a timeline span" if timeline and config is not None else ""
    return Footprint(
        footprint(scenario, config, num_requests, seed, rate, timeline),
        f"to simulate ({REQUEST_BYTES} B a request{spans}, measured by benchmarks/sim_memory.py)",
    )
