"""What a live run holds per request: the constants of its footprint check (backends/live/footprint.py).

For each scenario, traces (tracemalloc) what the load generator keeps for a
run of 2000 requests: the workload, every request body built before the
clock starts, and every request as the client saw it (distinct timings, a
gap per output token). What is left after 5 B a prompt token and 32 B an
output token is the per-request rest; footprint.py uses the smallest, so
its estimate stays a floor ("or more").

    python benchmarks/live_memory.py
"""

from __future__ import annotations

import random
import tracemalloc

from pipedeck.backends.live.footprint import OUTPUT_TOKEN_BYTES, PROMPT_TOKEN_BYTES
from pipedeck.backends.live.loadgen import _body
from pipedeck.backends.live_result import LiveRequest
from pipedeck.scenarios import load_scenario

SCENARIOS = ("sharegpt", "azure-conv", "cnn", "short-4k")
REQUESTS = 2000


def held_per_request(name: str) -> tuple[float, float, float]:
    """Peak traced bytes a request, mean prompt and output tokens."""
    scenario = load_scenario(name)
    rate = scenario.rate or (1.0 if scenario.requires_rate else None)
    tracemalloc.start()
    requests = scenario.workload(seed=0, rate=rate, num_requests=REQUESTS).requests
    bodies = [_body(r, "mock", (100, 1000), 0, None) for r in requests]
    seen = [
        LiveRequest(
            r.id,
            random.random(),
            random.random(),
            random.random(),
            random.random(),
            r.prompt_tokens,
            r.output_tokens,
            r.output_tokens,
            "usage",
            tuple(random.random() for _ in range(r.output_tokens - 1)),
        )
        for r in requests
    ]
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del bodies, seen
    return (
        peak / REQUESTS,
        sum(r.prompt_tokens for r in requests) / REQUESTS,
        sum(r.output_tokens for r in requests) / REQUESTS,
    )


def main() -> None:
    print("scenario      B/request  prompt  output  rest B")
    for name in SCENARIOS:
        held, prompt, output = held_per_request(name)
        rest = held - PROMPT_TOKEN_BYTES * prompt - OUTPUT_TOKEN_BYTES * output
        print(f"{name:12} {held:10.0f} {prompt:7.0f} {output:7.0f} {rest:7.0f}")


if __name__ == "__main__":
    main()
