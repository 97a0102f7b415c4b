"""Rich tables for runs on the terminal."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..backends.result import RunResult
from ..backends.tokens import format_tokens


def config_line(config: dict[str, object]) -> str:
    """One line naming a config's model, cluster and knobs."""
    split = ",".join(map(str, config.get("layer_split") or []))
    return (f"{config['model']} on {config['hardware']}  tp={config['tp']} pp={config['pp']}  "
            f"mode={config['mode']}  chunk={format_tokens(int(config['chunk']))}  split={split}")


def print_run(result: RunResult, console: Console | None = None) -> None:
    """Latency, throughput and the per-rank time breakdown of one run."""
    console = console or Console()
    s = result.summary()
    console.print(f"[bold]{result.scenario}[/]  {config_line(result.config)}")
    lat = Table(title="latency (s)", title_justify="left")
    for col in ("metric", "mean", "p50", "p90", "p99"):
        lat.add_column(col, justify="right")
    for key in ("ttft_s", "tpot_s"):
        row = s[key]
        lat.add_row(key.split("_")[0].upper(), *(f"{row[k]:.4g}" for k in ("mean", "p50", "p90", "p99")))
    console.print(lat)
    console.print(
        f"requests {s['requests']}  makespan {s['makespan_s']:.3f} s  throughput {s['throughput_tok_s']:.0f} tok/s "
        f"(output {s['output_throughput_tok_s']:.0f} tok/s)  steps {s['steps']}  chunks {s['chunks']}"
        + (f"  preemptions {s['preemptions']}" if s["preemptions"] else "")
    )
    ranks = Table(title="time per rank (s)", title_justify="left")
    for col in ("rank", "compute", "exposed comm", "bubble", "idle"):
        ranks.add_column(col, justify="right")
    for r in result.ranks:
        ranks.add_row(str(r.rank), f"{r.compute:.3f}", f"{r.exposed_comm:.3f}", f"{r.bubble:.3f}", f"{r.idle:.3f}")
    b = s["breakdown_s"]
    ranks.add_row("mean", f"{b['compute']:.3f}", f"{b['exposed_comm']:.3f}", f"{b['bubble']:.3f}", f"{b['idle']:.3f}", style="bold")
    console.print(ranks)
    console.print(f"bubble ratio {s['bubble_ratio']:.1%}")
