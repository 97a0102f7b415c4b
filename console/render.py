"""A run's report: its config line, latencies and per-rank time, for people or for a pipe."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..backends import RunResult, format_tokens
from .output import PlainReport, RichReport, output_report

if TYPE_CHECKING:
    from ..backends import LiveSummary

QUANTILES = ("mean", "p50", "p90", "p99")


def config_line(config: dict[str, object]) -> str:
    """One line naming a config's model, cluster and knobs (a live server's own: what it said of itself)."""
    if "hardware" not in config:
        return (
            f"{config.get('model') or 'model not reported'} on {config.get('engine') or 'an unknown engine'}"
            "  (its own config: hardware and parallelism not known)"
        )
    chunk, split = config["chunk"], config.get("layer_split") or []
    assert isinstance(chunk, int) and isinstance(split, list), "a resolved config's chunk and layer split"
    return (
        f"{config['model']} on {config['hardware']}  tp={config['tp']} pp={config['pp']}  "
        f"mode={config['mode']}  chunk={format_tokens(chunk)}  split={','.join(map(str, split))}"
    )


def print_run(result: RunResult, out: PlainReport | RichReport | None = None) -> None:
    """Latency, throughput and the per-rank time breakdown of one run."""
    out = out or output_report()
    s = result.summary()
    recorded = "  (the config recorded with it; the server runs its own)" if result.live is not None else ""
    out.line(f"{result.scenario} on {result.backend}  {config_line(result.config)}{recorded}", bold=True)
    latency = [
        [name, *(f"{quantiles[k]:.4g}" if quantiles else "n/a" for k in QUANTILES)]
        for name, quantiles in (("TTFT", s["ttft_s"]), ("TPOT", s["tpot_s"]))
    ]  # quantiles None: not one request has it (TPOT of one-token outputs)
    out.table("latency (s)", ("metric", *QUANTILES), latency)
    counts = "".join(f"  {name} {s[name]}" for name in ("steps", "chunks") if s[name] is not None)
    out.line(
        f"requests {s['requests']}  makespan {s['makespan_s']:.3f} s  throughput {s['throughput_tok_s']:.0f} tok/s "
        f"(output {s['output_throughput_tok_s']:.0f} tok/s){counts}"
        + (f"  preemptions {s['preemptions']}" if s["preemptions"] else "")
    )
    if result.live is not None:
        _print_live(s["live"], out)
    if not result.ranks:  # a live server has a per-rank view only when its profiler was read
        return
    piped = len(result.ranks) > 1  # a bubble is waiting on other ranks: one rank has none
    terms = [(str(r.rank), r.compute, r.exposed_comm, r.bubble, r.idle) for r in result.ranks]
    b = result.breakdown()  # the summary's breakdown_s, which is None only without ranks
    terms.append(("mean", b["compute"], b["exposed_comm"], b["bubble"], b["idle"]))
    rows = [
        [rank, f"{compute:.3f}", f"{comm:.3f}", f"{bubble:.3f}" if piped else "n/a", f"{idle:.3f}"]
        for rank, compute, comm, bubble, idle in terms
    ]
    title = "time per rank (s), measured by the engine's profiler" if result.live is not None else "time per rank (s)"
    out.table(title, ("rank", "compute", "exposed comm", "bubble", "idle"), rows, bold_last=True)
    out.line(f"bubble ratio {s['bubble_ratio']:.1%}" if piped else "bubble ratio n/a (one rank: no pipeline)")


def _print_live(live: LiveSummary, out: PlainReport | RichReport) -> None:
    """What the load generator saw beyond the records: failures, and what the server's /metrics said."""
    kinds = ", ".join(f"{n} {kind}" for kind, n in live["errors"].items())
    failed = f"{live['failed']} ({kinds})" if kinds else str(live["failed"])
    line = f"live: sent {live['sent']}, failed {failed}, unsent {live['unsent']}"
    if live["first_error"]:
        line += f"; first error: {live['first_error']}"
    out.line(line)
    out.line(f"server: {live['engine_version'] or 'version not reported'}")
    hit_rate = live.get("prefix_cache_hit_rate")  # absent from runs stored before it was measured
    out.line(
        "prefix cache: n/a (the server reports no cached prompt tokens)"
        if hit_rate is None
        else f"prefix cache: hit rate {hit_rate:.1%} (from {live['prefix_cache_from']})"
    )
    if live["engine"] is not None or live["server_missing"] is not None:
        missing = ", ".join(live["server_missing"] or []) or "none"
        out.line(f"server metrics: {live['engine'] or 'unknown engine'}; missing: {missing}")
