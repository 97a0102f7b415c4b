"""The tuning options' texts (--slo, --objective) parsed once, by their callbacks; a finished tune's runs line."""

from __future__ import annotations

import click

from ..tuner import Objective, Slo, objective_named, parse_slo


def slo_option(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Slo | None:
    """--slo's callback: the SLO parsed (a one-line SLOError naming `slo` when it cannot be), None when not given."""
    return parse_slo(value) if value else None


def objective_option(_ctx: click.Context, _param: click.Parameter, value: str | None) -> Objective | None:
    """--objective's callback: the objective by its name, None when not given."""
    return None if value is None else objective_named(value)


def stored_runs_text(best: int | None, default: int | None) -> str:
    """Which stored runs a finished study left: "runs best 3, default 1", or the one run when the default won."""
    if best is not None and best == default:
        return f"run {best}: the default is the best"
    named = [f"{label} {run}" for label, run in (("best", best), ("default", default)) if run is not None]
    return f"runs {', '.join(named)}" if named else ""
