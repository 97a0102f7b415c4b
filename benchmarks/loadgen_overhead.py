"""How many requests per second the live load generator sustains on one core.

Starts the mock server (`pipedeck.backends.live.mock_server`; instant, or
`--token-s` between tokens) in a subprocess pinned to another core, pins
this process to core 0, and replays
open-loop Poisson workloads of `--seconds` each at rates growing by
`--factor`. A rate is sustained when every request is served, the 99th
percentile of how late the scheduler sent requests stays under
`--max-lag-ms`, and requests complete at 95% of the offered rate or better.
Prints one row per rate (CPU seconds of the load generator beside wall time),
the highest sustained rate, and the CPU time per request at that rate; on a
busy machine the wall-time figures share the core with other work, the CPU
figures much less so.

    python benchmarks/loadgen_overhead.py [--prompt 128] [--output 16] [--token-s 0]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from pipedeck.backends.live import LoadOptions, replay
from pipedeck.scenarios import Scenario
from pipedeck.scenarios.arrivals import Poisson
from pipedeck.scenarios.lengths import Fixed


def start_mock(core: int | None, token_s: float) -> tuple[subprocess.Popen, str]:
    """The mock server in a subprocess (on `core` when given) and its URL."""
    pin = (lambda: os.sched_setaffinity(0, {core})) if core is not None else None
    command = [sys.executable, "-m", "pipedeck.backends.live.mock_server", "--token-s", str(token_s)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, preexec_fn=pin)
    assert proc.stdout is not None
    return proc, proc.stdout.readline().strip()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process `pid` so far (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def step(url: str, server_pid: int, rate: float, seconds: float, prompt: int, output: int) -> dict[str, float]:
    """Replay `seconds` of Poisson traffic at `rate` and measure the load generator (and the server's CPU)."""
    n = max(1, round(rate * seconds))
    scenario = Scenario(
        "overhead", "instant mock", "benchmark", "fixed lengths", Fixed(prompt), Fixed(output), Poisson(), n, rate
    )
    options = LoadOptions(
        model="mock", token_ids=(100, 1000), metrics_interval_s=None, stall_s=10.0, max_duration_s=seconds * 10 + 30
    )
    server_cpu, before = cpu_seconds(server_pid), os.times()
    live = asyncio.run(replay(scenario.workload(seed=0), url, options))
    server_cpu, after = cpu_seconds(server_pid) - server_cpu, os.times()
    wall = max(r.end_s for r in live.requests)
    lags = np.array([r.send_s - r.scheduled_s for r in live.requests])
    ttfts = np.array([r.first_token_s - r.send_s for r in live.requests if r.first_token_s is not None])
    return {
        "rate": rate,
        "n": n,
        "failed": len(live.failed()) + live.unsent,
        "served_rps": n / wall,
        "tok_s": n * output / wall,
        "lag_p99_ms": 1e3 * np.percentile(lags, 99),
        "lag_max_ms": 1e3 * lags.max(),
        "ttft_p50_ms": 1e3 * np.median(ttfts) if ttfts.size else float("nan"),
        "wall_s": wall,
        "cpu_s": live.loadgen_cpu_s,
        "sys_share": (after.system - before.system) / (after.user + after.system - before.user - before.system),
        "server_cpu_s": server_cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", type=int, default=128, help="prompt tokens per request")
    parser.add_argument("--output", type=int, default=16, help="output tokens (SSE events) per request")
    parser.add_argument(
        "--token-s",
        type=float,
        default=0.0,
        help="the mock's delay between tokens (0: instant, events share reads; >0: one read per event)",
    )
    parser.add_argument("--seconds", type=float, default=4.0, help="length of each rate's run")
    parser.add_argument("--start", type=float, default=50.0, help="first rate (req/s)")
    parser.add_argument("--factor", type=float, default=1.5, help="each next rate is this times the last")
    parser.add_argument("--max-lag-ms", type=float, default=25.0, help="largest p99 send lag that counts as on time")
    args = parser.parse_args()
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) > 1:
        os.sched_setaffinity(0, {cores[0]})
    proc, url = start_mock(cores[1] if len(cores) > 1 else None, args.token_s)
    console = Console(width=160)
    table = Table(
        title=f"load generator on core {cores[0]}, mock server on "
        f"{'core ' + str(cores[1]) if len(cores) > 1 else 'the same core'}; prompt {args.prompt}, "
        f"output {args.output} tokens {args.token_s * 1e3:g} ms apart, Poisson, "
        f"{args.seconds:g} s per rate",
        title_justify="left",
    )
    for col in (
        "offered req/s",
        "requests",
        "failed",
        "served req/s",
        "output tok/s",
        "send lag p99 ms",
        "send lag max ms",
        "TTFT p50 ms",
        "wall s",
        "loadgen CPU s",
        "CPU / wall",
        "of it kernel",
        "server CPU s",
        "sustained",
    ):
        table.add_column(col, justify="right")
    best = None
    try:
        step(url, proc.pid, args.start, 1.0, args.prompt, args.output)  # warm up: imports, connections
        rate = args.start
        while True:
            row = step(url, proc.pid, rate, args.seconds, args.prompt, args.output)
            ok = row["failed"] == 0 and row["lag_p99_ms"] <= args.max_lag_ms and row["served_rps"] >= 0.95 * rate
            table.add_row(
                f"{rate:g}",
                str(row["n"]),
                str(row["failed"]),
                f"{row['served_rps']:.0f}",
                f"{row['tok_s']:.0f}",
                f"{row['lag_p99_ms']:.1f}",
                f"{row['lag_max_ms']:.1f}",
                f"{row['ttft_p50_ms']:.2f}",
                f"{row['wall_s']:.2f}",
                f"{row['cpu_s']:.2f}",
                f"{row['cpu_s'] / row['wall_s']:.2f}",
                f"{row['sys_share']:.0%}",
                f"{row['server_cpu_s']:.2f}",
                "yes" if ok else "no",
            )
            if not ok:
                break
            best = row
            rate = round(rate * args.factor)
    finally:
        proc.terminate()
        proc.wait()
    console.print(table)
    console.print(
        "load average (1, 5, 15 min) at the end: "
        + ", ".join(f"{x:.1f}" for x in os.getloadavg())
        + f" on {os.cpu_count()} cores"
    )
    if best is None:
        console.print(f"not even {args.start:g} req/s was sustained")
    else:
        per_request = best["cpu_s"] / best["n"]
        console.print(
            f"highest sustained rate: {best['rate']:g} req/s ({best['tok_s']:.0f} output tok/s), "
            f"loadgen CPU {best['cpu_s']:.2f} s in {best['wall_s']:.2f} s wall; "
            f"{1e3 * per_request:.2f} ms CPU per request ({args.output} token events)"
        )


if __name__ == "__main__":
    main()
