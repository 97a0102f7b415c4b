"""How much memory the simulator needs per request and per timeline span: the constants of its footprint check.

Each case runs in a fresh child process that imports everything first, then
simulates one scenario on the default config (DeepSeek-V3.1, ascend-910c,
TP8 PP2 cpp, chunk 8k) at two request counts, as `pipedeck simulate` does:
timeline off and nothing stored (as the tuner runs), or timeline on and the
run stored (the default). The growth of the peak RSS between the two counts,
divided by the growth in requests (timeline off) or in spans (timeline on,
less the requests' share), gives the bytes a request and a timeline span
cost. backends/sim/footprint.py uses the largest of each; the last columns
show its estimate beside the measured growth.

    python benchmarks/sim_memory.py
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

# scenario, the two request counts, rate (None: the scenario's), timeline and store
CASES = [("azure-conv", 10_000, 40_000, 30.0), ("mixed-gsm8k", 5_000, 20_000, None), ("long-128k", 500, 2_000, None)]


def child(scenario_name: str, requests: int, rate: float | None, timeline: bool) -> dict[str, float]:
    """Simulate in this process; its peak RSS growth over the imports, spans kept, and CPU seconds."""
    from pipedeck.backends.config import ServingConfig
    from pipedeck.backends.sim import SimBackend
    from pipedeck.backends.sim.footprint import footprint
    from pipedeck.scenarios import load_scenario
    from pipedeck.store import RunStore

    scenario, config = load_scenario(scenario_name), ServingConfig().resolve()
    estimate = footprint(scenario, config, requests, rate=rate, timeline=timeline)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    cpu = time.process_time()
    result = SimBackend().run(scenario, config, rate=rate, num_requests=requests, timeline=timeline)
    if timeline:
        with tempfile.TemporaryDirectory() as folder, RunStore.open(Path(folder) / "runs.duckdb") as store:
            store.save_run(result)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return {"grown": peak - base, "spans": len(result.spans), "cpu": time.process_time() - cpu, "estimate": estimate}


def measure(scenario: str, requests: int, rate: float | None, timeline: bool) -> dict[str, float]:
    """One child run, in a fresh process so that its peak is its own."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", scenario, str(requests), str(rate), str(int(timeline))],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(done.stdout)


def main() -> None:
    start, cpu = time.perf_counter(), time.process_time()
    rows, per_request, per_span = [], [], []
    for name, small, large, rate in CASES:
        off = [measure(name, n, rate, False) for n in (small, large)]
        per_request.append((off[1]["grown"] - off[0]["grown"]) / (large - small))
        rows.append((name, small, large, "off", off))
    request_bytes = max(per_request)
    for name, small, large, rate in CASES:
        on = [measure(name, n, rate, True) for n in (small, large)]
        spans = on[1]["spans"] - on[0]["spans"]
        per_span.append((on[1]["grown"] - on[0]["grown"] - request_bytes * (large - small)) / spans)
        rows.append((name, small, large, "on, stored", on))
    table = Table(title="simulator memory (peak RSS growth over the imports)")
    for col in ("scenario", "requests", "timeline", "spans", "grown MB", "estimate MB", "child CPU s"):
        table.add_column(col, justify="right")
    for name, small, large, timeline, pair in rows:
        for n, m in zip((small, large), pair):
            table.add_row(
                name,
                f"{n:,}",
                timeline,
                f"{m['spans']:,}",
                f"{m['grown'] / 1e6:,.0f}",
                f"{m['estimate'] / 1e6:,.0f}",
                f"{m['cpu']:.1f}",
            )
    console = Console(width=120)
    console.print(table)
    console.print(
        f"bytes a request (timeline off), per scenario: {', '.join(f'{b:.0f}' for b in per_request)}; "
        f"largest {request_bytes:.0f}"
    )
    console.print(
        f"bytes a timeline span (stored), per scenario: {', '.join(f'{b:.0f}' for b in per_span)}; "
        f"largest {max(per_span):.0f}"
    )
    console.print(
        f"wall {time.perf_counter() - start:.1f} s, this process's CPU {time.process_time() - cpu:.1f} s "
        "(the children's CPU is in the table)"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        name, requests, rate, timeline = sys.argv[2:6]
        print(json.dumps(child(name, int(requests), None if rate == "None" else float(rate), timeline == "1")))
    else:
        main()
