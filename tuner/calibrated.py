"""The calibrated hardware profile: the fitted constants with their sources, and the [calibration] record."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from ..backends import HardwareProfile, ResolvedConfig
from .calibrate import Fit, Measured, Row, Variant


@dataclass(frozen=True)
class Provenance:
    """Where and when a calibration measured: the server's engine and version, its URL, the date."""

    engine: str  # "<engine> <version>" as the server reported it
    endpoint: str
    date: str  # ISO 8601


def calibrated_profile(fit: Fit, config: ResolvedConfig, name: str, provenance: Provenance) -> HardwareProfile:
    """The starting profile named `name`, with the fitted values and a source for every one of them."""
    start = fit.start
    fitted_runs = [r for r in fit.rows if not r.point.held_out]
    held_ttft, held_tpot = fit.worst(held_out=True)
    shape, scheduling = config.parallelism, config.scheduling
    setting = (
        f"{config.model_profile.name} at tp {shape.tp} pp {shape.pp}, chunk {scheduling.chunk}, "
        f"{scheduling.max_running} running, KV {config.memory.kv_capacity} tokens"
    )
    sources = {
        f.name: start.sources.get(f.name) or f"the HardwareProfile default; {config.hardware} does not set it"
        for f in fields(HardwareProfile)
        if f.name not in ("name", "sources")
    }
    for constant in fit.spread:
        pinned = pinning(fit, constant)
        sources[constant] = (
            f"fitted by pipedeck calibrate on {provenance.engine} at {provenance.endpoint}, {provenance.date}: "
            f"P50 TTFT and P50 TPOT of {len(fitted_runs)} live runs ({', '.join(r.point.name for r in fitted_runs)}) "
            f"of {setting}; least squares in log space from {config.hardware}'s {getattr(start, constant):.4g}; "
            f"{pinned}; held-out runs' worst errors TTFT {held_ttft:.1%}, TPOT {held_tpot:.1%} (see [calibration])"
        )
    return replace(fit.hardware, name=name, sources=sources)


def pinning(fit: Fit, constant: str) -> str:
    """How well the runs pin a fitted constant, in words."""
    if constant in fit.at_bound:
        return f"at the {fit.at_bound[constant]} bound of the search, where these runs push it"
    spread = fit.spread[constant]
    return "not pinned by these runs" if spread == float("inf") else f"within a factor {spread:.3g} at one sigma"


def calibration_record(
    fit: Fit, measured: list[Measured], variants: list[Variant], provenance: Provenance, passes: int, seed: int
) -> dict[str, object]:
    """The [calibration] table: how the constants were fitted, on which configs, and every run measured against
    simulated. `variants[0]` is the calibrated config."""
    config = variants[0].config
    held_ttft, held_tpot = fit.worst(held_out=True)
    held_bubble = fit.worst_bubble(held_out=True)
    seeds = {m.point.name: [run for run, _ in m.passes] for m in measured}
    profiled = {m.point.name: m.profiled[0] for m in measured if m.profiled is not None}
    return {
        "tool": "pipedeck calibrate",
        "engine": provenance.engine,
        "endpoint": provenance.endpoint,
        "date": provenance.date,
        "start": config.hardware,
        "model": config.model,
        "config": _config(config),
        "variants": [
            {"changes": v.label, "set": "held-out" if v.held_out else "fit", **_config(v.config)} for v in variants[1:]
        ],
        "fitted": {name: _constant(fit, name) for name in fit.spread},
        "passes": passes,
        "seed": seed,
        "evaluations": fit.evaluations,
        "stopped": fit.message,
        "held_out_worst_ttft_error": round(held_ttft, 4),
        "held_out_worst_tpot_error": round(held_tpot, 4),
        **({} if held_bubble is None else {"held_out_worst_bubble_error": round(held_bubble, 4)}),
        "runs": [_run(row, seeds[row.point.name], profiled.get(row.point.name)) for row in fit.rows],
    }


def _config(config: ResolvedConfig) -> dict[str, object]:
    """What the record says of a config measured."""
    return {
        "tp": config.parallelism.tp,
        "pp": config.parallelism.pp,
        "layer_split": list(config.parallelism.layer_split),
        "mode": config.mode,
        "chunk": config.scheduling.chunk,
        "max_running": config.scheduling.max_running,
        "kv_capacity": config.memory.kv_capacity,
    }


def _constant(fit: Fit, name: str) -> dict[str, object]:
    """One fitted constant of the record: start, value, how well pinned (and the one-sigma factor when finite)."""
    spread = fit.spread[name]
    finite = {"spread": _figure(spread)} if math.isfinite(spread) and name not in fit.at_bound else {}
    return {
        "start": getattr(fit.start, name),
        "value": getattr(fit.hardware, name),
        "pinned": pinning(fit, name),
        **finite,
    }


def _run(row: Row, seeds: list[int], profiled_seed: int | None) -> dict[str, object]:
    """One run of the record: its workload, then measured and simulated P50s (ms), the relative errors and the
    run-to-run spreads; for a profiled run, its seed and the measured and simulated bubble shares."""
    p = row.point
    load = (
        {"concurrency": p.concurrency}
        if p.concurrency
        else {"rate": _figure(row.rate or 0.0), "load": p.load, "reference": p.reference}
    )
    return {
        "name": p.name,
        "set": "held-out" if p.held_out else "fit",
        "prompt_tokens": p.prompt,
        "output_tokens": p.output,
        **load,
        "seeds": seeds,
        "served": row.served,
        "failed": row.failed,
        "measured_ttft_p50_ms": _figure(row.ttft * 1e3),
        "simulated_ttft_p50_ms": _figure(row.sim_ttft * 1e3),
        "ttft_error": round(row.ttft_error, 4),
        "measured_tpot_p50_ms": _figure(row.tpot * 1e3),
        "simulated_tpot_p50_ms": _figure(row.sim_tpot * 1e3),
        "tpot_error": round(row.tpot_error, 4),
        "ttft_spread": round(row.ttft_spread, 4),
        "tpot_spread": round(row.tpot_spread, 4),
        **_bubble(row, profiled_seed),
    }


def _bubble(row: Row, seed: int | None) -> dict[str, object]:
    """A profiled run's seed, and its bubble shares measured and simulated (nothing for a run not profiled)."""
    if seed is None or row.bubble is None or row.sim_bubble is None:
        return {}
    error = {} if row.bubble_error is None else {"bubble_error": round(row.bubble_error, 4)}
    return {
        "profiled_seed": seed,
        "bubble": round(row.bubble, 4),
        "simulated_bubble": round(row.sim_bubble, 4),
        **error,
    }


def _figure(value: float) -> float:
    """Four significant digits."""
    return float(f"{value:.4g}")
