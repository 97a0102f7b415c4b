"""How fast the simulator runs: stage executions and simulated requests per wall second.

Runs mixed-gsm8k (500 requests, 16 concurrent) and azure-conv (1000 requests
at a rate near saturation) under cpp, dcpp and vpp on DeepSeek-V3.1 / Ascend
910C TP8+PP2, timeline off (as the tuner runs it), and prints one row each.
Target: every run under 1 s and at least 200,000 stage executions per second
on one core.

    python benchmarks/sim_speed.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import time

from rich.console import Console
from rich.table import Table

from pipedeck.backends.config import ServingConfig
from pipedeck.backends.sim import SimBackend
from pipedeck.scenarios import load_scenario

CASES = [("mixed-gsm8k", None, None), ("azure-conv", 1000, 3.0)]
MODES = ("cpp", "dcpp", "vpp")


def measure(scenario_name: str, num_requests: int | None, rate: float | None, mode: str, repeat: int):
    """Best-of-`repeat` wall time of one simulation, with its result."""
    scenario = load_scenario(scenario_name)
    config = ServingConfig(mode=mode, chunk=16 * 1024).resolve()
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = SimBackend().run(scenario, config, rate=rate, num_requests=num_requests, timeline=False)
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per case; the fastest counts")
    args = parser.parse_args()
    table = Table(title="simulator speed (DeepSeek-V3.1, ascend-910c, TP8 PP2, chunk 16k)")
    for col in ("scenario", "mode", "requests", "stage execs", "wall s", "stage execs/s", "requests/wall s", "sim makespan s"):
        table.add_column(col, justify="right")
    for name, n, rate in CASES:
        for mode in MODES:
            wall, result = measure(name, n, rate, mode, args.repeat)
            table.add_row(name + (f" @{rate:g}/s" if rate else ""), mode, str(len(result.records)),
                          f"{result.stage_executions:,}", f"{wall:.3f}", f"{result.stage_executions / wall:,.0f}",
                          f"{len(result.records) / wall:,.0f}", f"{result.makespan_s:.1f}")
    Console(width=140).print(table)


if __name__ == "__main__":
    main()
