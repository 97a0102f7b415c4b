"""The tune result's 'why': each knob the winner moved, with what putting it back alone costs."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape

from ..backends import format_tokens, knob_named, setting_text
from ..tuner import KnobEffect, TuneOutcome, TuneSpec


def _counts_tokens(knob: str) -> bool:
    """Whether `--fix` name `knob` is a token count: the KV capacity, or a knob declared of kind tokens."""
    declared = knob_named(knob.replace("-", "_"))
    return knob == "kv-capacity" or (declared is not None and declared.kind == "tokens")


def knob_text(knob: str, value: object) -> str:
    """A knob's value as the command line writes it: 7k, 16x1, 31,30, on/off."""
    if knob == "parallelism" and isinstance(value, tuple):
        return "x".join(map(str, value))
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    if _counts_tokens(knob) and isinstance(value, int) and not isinstance(value, bool):
        return format_tokens(value)
    return setting_text(value)


def print_effects(spec: TuneSpec, outcome: TuneOutcome, effects: list[KnobEffect], console: Console) -> None:
    """Why the best wins, largest effect first; effects inside the search's precision are called so."""
    best = outcome.best
    assert best is not None, "effects are measured only when a trial won"
    if not effects:
        console.print(f"why: trial {best.number} is the default config; nothing was moved")
        return
    console.print(
        f"why trial {best.number} wins: each knob it moved, put back alone to the "
        f"{spec.engine} default on the same traffic:"
    )
    for e in effects:
        moved = f"{e.knob} {knob_text(e.knob, e.winner)} (default {knob_text(e.knob, e.baseline)})"
        if e.gain is None:
            console.print(f"  {escape(moved)}: not measured, {escape(e.note)}")
            continue
        size = spec.objective.better_by(1 + e.gain, percent=True) + (f", {e.note}" if e.note else "")
        if abs(e.gain) < spec.precision:
            size += f"; within the search's {spec.precision:.0%} precision: alone, it moves nothing measurable"
        console.print(f"  {escape(moved)}: {escape(size)}")
