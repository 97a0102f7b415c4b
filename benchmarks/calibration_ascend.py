"""Simulator against calibration.md section A (DeepSeek-V3.1, 16 Ascend 910C, TP8 + PP2).

Prints the 512K / 24K breakdown next to the paper's (last rank, see
docs/calibration.md), DCPP step counts, and CPP vs DCPP TTFT from 64K to 1M
with each scheme at its best chunk of the paper's sweep (8K/16K/24K/32K).

    python benchmarks/calibration_ascend.py
"""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from pipedeck.backends.config import ServingConfig
from pipedeck.backends.sim import SimBackend
from pipedeck.scenarios import load_scenario

K = 1024
PAPER = {
    "cpp": {"compute": 252.59, "bubble": 38.64, "exposed_comm": 16.67, "total": 307.90},
    "dcpp": {"compute": 279.07, "bubble": 20.47, "exposed_comm": 22.68, "total": 322.22},
}


def run(mode: str, scenario: str, chunk: int):
    config = ServingConfig.of(model="deepseek-v3.1", hardware="ascend-910c", tp=8, pp=2, mode=mode, chunk=chunk)
    return SimBackend().run(load_scenario(scenario), config, timeline=False)


def main() -> None:
    console = Console(width=120)
    table = Table(title="512K prompt, chunk 24K: last rank (s)", title_justify="left")
    for col in ("mode", "term", "paper", "pipedeck", "error"):
        table.add_column(col, justify="right")
    for mode, paper in PAPER.items():
        result = run(mode, "long-512k", 24 * K)
        last = result.ranks[-1]
        model = {
            "compute": last.compute,
            "bubble": last.bubble,
            "exposed_comm": last.exposed_comm,
            "total": result.makespan_s,
        }
        for term, value in paper.items():
            table.add_row(mode, term, f"{value:.2f}", f"{model[term]:.2f}", f"{model[term] / value - 1:+.1%}")
        table.add_row(mode, "steps", "22" if mode == "cpp" else "97", str(result.steps), "")
    console.print(table)

    steps = Table(title="128K prompt, chunk 16K: steps (paper: CPP 8, DCPP 17)", title_justify="left")
    steps.add_column("mode")
    steps.add_column("steps", justify="right")
    for mode in ("cpp", "dcpp"):
        steps.add_row(mode, str(run(mode, "long-128k", 16 * K).steps))
    console.print(steps)

    sweep = Table(
        title="TTFT (s), best chunk of 8K/16K/24K/32K per scheme (paper: DCPP 1.6-3.6% faster to 256K, 4.6% slower at 512K)",
        title_justify="left",
    )
    for col in ("prompt", "cpp", "best chunk", "dcpp", "best chunk", "dcpp vs cpp"):
        sweep.add_column(col, justify="right")
    for length in ("64k", "128k", "256k", "512k", "1m"):
        best = {}
        for mode in ("cpp", "dcpp"):
            best[mode] = min((run(mode, f"long-{length}", c * K).makespan_s, c) for c in (8, 16, 24, 32))
        sweep.add_row(
            length,
            f"{best['cpp'][0]:.2f}",
            f"{best['cpp'][1]}K",
            f"{best['dcpp'][0]:.2f}",
            f"{best['dcpp'][1]}K",
            f"{best['dcpp'][0] / best['cpp'][0] - 1:+.1%}",
        )
    console.print(sweep)


if __name__ == "__main__":
    main()
