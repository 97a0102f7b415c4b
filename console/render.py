"""Rich tables for runs on the terminal."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ..backends.result import RunResult
from ..backends.tokens import format_tokens
from .output import output_console


def config_line(config: dict[str, object]) -> str:
    """One line naming a config's model, cluster and knobs."""
    split = ",".join(map(str, config.get("layer_split") or []))
    return (f"{config['model']} on {config['hardware']}  tp={config['tp']} pp={config['pp']}  "
            f"mode={config['mode']}  chunk={format_tokens(int(config['chunk']))}  split={split}")


def print_run(result: RunResult, console: Console | None = None) -> None:
    """Latency, throughput and the per-rank time breakdown of one run."""
    console = console or output_console()
    s = result.summary()
    recorded = "  (the config recorded with it; the server runs its own)" if result.live is not None else ""
    console.print(f"[bold]{result.scenario}[/] on {result.backend}  {config_line(result.config)}{recorded}")
    lat = Table(title="latency (s)", title_justify="left")
    for col in ("metric", "mean", "p50", "p90", "p99"):
        lat.add_column(col, justify="right")
    for key in ("ttft_s", "tpot_s"):
        row = s[key]  # None: not one request has it (TPOT of one-token outputs)
        lat.add_row(key.split("_")[0].upper(), *(f"{row[k]:.4g}" if row else "n/a" for k in ("mean", "p50", "p90", "p99")))
    console.print(lat)
    counts = "".join(f"  {name} {s[name]}" for name in ("steps", "chunks") if s[name] is not None)
    console.print(
        f"requests {s['requests']}  makespan {s['makespan_s']:.3f} s  throughput {s['throughput_tok_s']:.0f} tok/s "
        f"(output {s['output_throughput_tok_s']:.0f} tok/s){counts}"
        + (f"  preemptions {s['preemptions']}" if s["preemptions"] else "")
    )
    if result.live is not None:
        _print_live(s["live"], console)
    if not result.ranks:  # a live server has no per-rank view
        return
    piped = len(result.ranks) > 1  # a bubble is waiting on other ranks: one rank has none
    ranks = Table(title="time per rank (s)", title_justify="left")
    for col in ("rank", "compute", "exposed comm", "bubble", "idle"):
        ranks.add_column(col, justify="right")
    for r in result.ranks:
        ranks.add_row(str(r.rank), f"{r.compute:.3f}", f"{r.exposed_comm:.3f}", f"{r.bubble:.3f}" if piped else "n/a",
                      f"{r.idle:.3f}")
    b = s["breakdown_s"]
    ranks.add_row("mean", f"{b['compute']:.3f}", f"{b['exposed_comm']:.3f}", f"{b['bubble']:.3f}" if piped else "n/a",
                  f"{b['idle']:.3f}", style="bold")
    console.print(ranks)
    console.print(f"bubble ratio {s['bubble_ratio']:.1%}" if piped else "bubble ratio n/a (one rank: no pipeline)")


def _print_live(live: dict[str, object], console: Console) -> None:
    """What the load generator saw beyond the records: failures, and what the server's /metrics said."""
    line = f"live: sent {live['sent']}, failed {live['failed']}, unsent {live['unsent']}"
    if live["first_error"]:
        line += f" (first error: {live['first_error']})"
    console.print(line)
    console.print(f"server: {live['engine_version'] or 'version not reported'}")
    if live["engine"] is not None or live["server_missing"] is not None:
        missing = ", ".join(live["server_missing"] or []) or "none"
        console.print(f"server metrics: {live['engine'] or 'unknown engine'}; missing: {missing}")
