"""What a live run holds per request, estimated before it starts (backends/footprint.py checks it).

The load generator builds every request's body before the clock starts (its
prompt as JSON token ids, about 5 B a token) and keeps every request as the
client saw it (a gap of 32 B per output token: a float and its slot), beside
the workload's entry and the record (about 550 B in all), as
benchmarks/live_memory.py measures. Prompt and output lengths are the means
of a sample of the workload.
"""

from __future__ import annotations

from ...scenarios import Scenario
from ..base import Footprint
from ..config import ResolvedConfig
from ..footprint import SAMPLE

REQUEST_BYTES = 550  # workload entry, LiveRequest and record; measured by benchmarks/live_memory.py (548-971 B)
PROMPT_TOKEN_BYTES = 5  # a prompt id in the request body: three digits, a comma and a space
OUTPUT_TOKEN_BYTES = 32  # an inter-token gap kept with the request: a float and its tuple slot


def estimate(
    scenario: Scenario,
    config: ResolvedConfig | None,
    num_requests: int,
    seed: int = 0,
    rate: float | None = None,
    timeline: bool = True,
) -> Footprint:
    """Bytes a live run of `num_requests` holds at its end (the config and timeline do not matter)."""
    sample = scenario.workload(seed=seed, rate=rate, num_requests=min(num_requests, SAMPLE)).requests
    per_request = REQUEST_BYTES + sum(
        PROMPT_TOKEN_BYTES * r.prompt_tokens + OUTPUT_TOKEN_BYTES * r.output_tokens for r in sample
    ) / len(sample)
    return Footprint(
        int(num_requests * per_request),
        f"to replay ({REQUEST_BYTES} B a request, {PROMPT_TOKEN_BYTES} B a prompt token, "
        f"{OUTPUT_TOKEN_BYTES} B an output token, measured by benchmarks/live_memory.py)",
    )
