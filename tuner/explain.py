"""Why the winner wins: each knob it moved from the baseline, put back alone, and what that costs.

The winner differs from the engine default in a few knobs. Reverting one of
them (keeping the winner's other values) and measuring again gives that
knob's share of the win on the same traffic and seed; knobs whose revert
changes the objective by less than the search's precision did not matter.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

from ..backends import ConfigError, ServingConfig
from .objective import Evaluator
from .objectives import Objective
from .space import Dimension, dimensions
from .spec import TuneSpec

DEPENDENT = {"parallelism": ("layer_split",)}  # a split belongs to its pipeline depth: it goes back with it


@dataclass(frozen=True)
class KnobEffect:
    """One knob the winner moved: its two values and the objective with it put back."""

    knob: str  # the --fix name
    winner: object  # the winner's value (a tuple for several fields)
    baseline: object  # the baseline's
    reverted: float | None  # the objective with this knob (and its dependents) at the baseline's value
    gain: float | None  # the winner's objective relative to `reverted`, better > 0 whatever the direction
    note: str = ""  # why nothing was measured, or what went back with the knob


def knob_effects(
    spec: TuneSpec, winner: Mapping[str, object], winner_value: float, baseline: Mapping[str, object]
) -> list[KnobEffect]:
    """The effect of every searched knob the winner sets differently from `baseline`, largest first."""
    moved = [dim for dim in dimensions() if dim.searched and _value(winner, dim) != _value(baseline, dim)]
    carried = {f for dim in moved for f in DEPENDENT.get(dim.flag, ())}  # they go back with their knob
    evaluator = Evaluator(spec)
    effects = []
    try:
        for dim in moved:
            if not set(dim.fields) <= carried:
                effects.append(_effect(evaluator, spec.objective, dim, winner, winner_value, baseline))
    finally:
        evaluator.close()
    return sorted(effects, key=lambda e: -abs(e.gain) if e.gain is not None else 0.0)


def _effect(
    evaluator: Evaluator,
    objective: Objective,
    dim: Dimension,
    winner: Mapping[str, object],
    winner_value: float,
    baseline: Mapping[str, object],
) -> KnobEffect:
    fields = dim.fields + DEPENDENT.get(dim.flag, ())
    moved = [f for f in fields[len(dim.fields) :] if winner.get(f) != baseline.get(f)]
    note = f"with {', '.join(f.replace('_', '-') for f in moved)}" if moved else ""
    reverted = {**winner, **{f: baseline.get(f) for f in fields}}
    try:
        config = ServingConfig.from_dict(reverted).resolve()
    except ConfigError as err:
        return KnobEffect(
            dim.flag, _value(winner, dim), _value(baseline, dim), None, None, f"cannot go back alone: {err}"
        )
    value = evaluator.measure(config).value
    if not value:
        return KnobEffect(
            dim.flag,
            _value(winner, dim),
            _value(baseline, dim),
            value,
            None,
            note or "the reverted config meets the SLO at no rate",
        )
    gain = objective.ratio(winner_value, value) - 1
    return KnobEffect(dim.flag, _value(winner, dim), _value(baseline, dim), value, gain, note)


def _value(config: Mapping[str, object], dim: Dimension) -> object:
    values = [_plain(config.get(f)) for f in dim.fields]
    return values[0] if len(values) == 1 else tuple(values)


def _plain(value: object) -> object:
    """Lists (a stored config's tuples) as tuples, so stored and fresh configs compare equal."""
    return tuple(value) if isinstance(value, list) else value


def effects_json(effects: list[KnobEffect]) -> list[dict[str, object]]:
    """The effects as JSON-ready dicts."""
    return [
        json.loads(
            json.dumps(
                {
                    "knob": e.knob,
                    "winner": e.winner,
                    "baseline": e.baseline,
                    "reverted": e.reverted,
                    "gain": e.gain,
                    "note": e.note or None,
                }
            )
        )
        for e in effects
    ]
