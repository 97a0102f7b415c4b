"""The calibrated hardware profile: the fitted constants with their sources, and the [calibration] record."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

from ..backends import HardwareProfile, ResolvedConfig
from .calibrate import Fit, Measured, Row


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
    fit: Fit, measured: list[Measured], config: ResolvedConfig, provenance: Provenance, passes: int, seed: int
) -> dict[str, object]:
    """The [calibration] table: how the constants were fitted, and every run measured against simulated."""
    held_ttft, held_tpot = fit.worst(held_out=True)
    seeds = {m.point.name: [run for run, _ in m.passes] for m in measured}
    return {
        "tool": "pipedeck calibrate",
        "engine": provenance.engine,
        "endpoint": provenance.endpoint,
        "date": provenance.date,
        "start": config.hardware,
        "model": config.model,
        "config": {
            "tp": config.parallelism.tp,
            "pp": config.parallelism.pp,
            "mode": config.mode,
            "chunk": config.scheduling.chunk,
            "max_running": config.scheduling.max_running,
            "kv_capacity": config.memory.kv_capacity,
        },
        "fitted": {name: _constant(fit, name) for name in fit.spread},
        "passes": passes,
        "seed": seed,
        "evaluations": fit.evaluations,
        "stopped": fit.message,
        "held_out_worst_ttft_error": round(held_ttft, 4),
        "held_out_worst_tpot_error": round(held_tpot, 4),
        "runs": [_run(row, seeds[row.point.name]) for row in fit.rows],
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


def _run(row: Row, seeds: list[int]) -> dict[str, object]:
    """One run of the record: its workload, then measured and simulated P50s (ms) and the relative errors."""
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
    }


def _figure(value: float) -> float:
    """Four significant digits."""
    return float(f"{value:.4g}")
