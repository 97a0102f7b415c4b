"""Which finished trial a study recommends, which configs tie with it, and which knobs are free among the ties.

A goodput is known only to the search's precision: the true rate lies
between the highest rate that met the SLO and the lowest that failed, at
most `precision` apart. Configs whose objective is within that precision of
the best cannot be told apart, so they tie. Among ties the recommendation
is the one with the most latency headroom at its goodput rate (P90 TTFT and
TPOT over their SLO limits, summed), and among those (again within the
precision) the one that changes the fewest knobs from the baseline. A knob
whose value differs between tied configs is free within the tie set: given
the other knobs of each tie, any of those values gives a tied result. That
is not the same as not mattering: moved alone from the default it may still
change the result (tuner/explain.py measures that).

Configs are compared as they act (`in_force`): a setting that has no effect
(DCPP whose minimum chunk is its whole chunk) is not counted as a change.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..backends import ServingConfig
from ..store import StudyRow, TrialRow
from .objective import config_key, search_precision
from .objectives import Objective, objective_named
from .slo import Slo
from .space import dimensions

FREE_KNOBS = (
    "knobs free within the tie set (each of their values among the ties gives a tied result, given "
    "that tie's other knobs; not the same as not mattering)"
)  # how tune and the report name them
HEADROOM_METRICS = (("ttft", "ttft_p90_s"), ("tpot", "tpot_p90_s"))


@dataclass(frozen=True)
class Finished:
    """A completed trial as the verdict sees it."""

    number: int
    config: dict[str, Any]  # as ServingConfig.to_dict() gives it
    metrics: dict[str, Any]
    value: float


@dataclass(frozen=True)
class Verdict:
    """The recommended trial, every distinct config tied with the best (it included), and the knobs free among them."""

    winner: Finished
    ties: tuple[Finished, ...]
    free: tuple[str, ...]  # --fix names of the knobs whose value differs among the ties


def decide(
    trials: Sequence[Finished],
    objective: Objective,
    precision: float,
    limits: Mapping[str, float],
    baseline: Mapping[str, object] | None,
) -> Verdict | None:
    """The verdict over completed trials (None if there are none); `limits` maps ttft/tpot to SLO seconds."""
    if not trials:
        return None
    best = objective.best(t.value for t in trials)
    ties = _distinct([t for t in trials if _within(t.value, best, precision)])
    lowest = min(_load(t, limits) for t in ties)
    roomiest = [t for t in ties if _within(_load(t, limits), lowest, precision)]
    winner = min(roomiest, key=lambda t: (changes(t.config, baseline), _load(t, limits), t.number))
    return Verdict(winner, tuple(sorted(ties, key=lambda t: t.number)), free_knobs([t.config for t in ties]))


def in_force(config: Mapping[str, Any]) -> tuple[dict[str, Any], str]:
    """The config as it acts, and a one-line note when that differs from what it sets ("" otherwise).

    DCPP floors each chunk at min_chunk; with min_chunk >= chunk no chunk
    ever shrinks, so it runs exactly as cpp (the same goodput to the last
    digit) and its smooth factor does nothing either.
    """
    if config.get("mode") != "dcpp" or int(config["min_chunk"]) < int(config["chunk"]):
        return dict(config), ""
    default = ServingConfig()
    note = (
        f"mode cpp. It sets dcpp with min_chunk {config['min_chunk']} >= chunk {config['chunk']}, so it never "
        "shrinks a chunk and runs as cpp."
    )
    return {
        **config,
        "mode": "cpp",
        "smooth_factor": default.dcpp.smooth_factor,
        "min_chunk": default.dcpp.min_chunk,
    }, note


def changes(config: Mapping[str, object], baseline: Mapping[str, object] | None) -> int:
    """How many searched knobs `config` sets differently from `baseline` (0 without a baseline)."""
    if baseline is None:
        return 0
    acting, base = in_force(config)[0], in_force(baseline)[0]
    return sum(_knob(acting, dim.fields) != _knob(base, dim.fields) for dim in dimensions() if dim.searched)


def free_knobs(configs: Sequence[Mapping[str, object]]) -> tuple[str, ...]:
    """The knobs (by --fix name) that take more than one value among `configs`."""
    if len(configs) < 2:
        return ()
    acting = [in_force(c)[0] for c in configs]
    return tuple(dim.flag for dim in dimensions() if dim.searched and len({_knob(c, dim.fields) for c in acting}) > 1)


def _knob(config: Mapping[str, object], fields: tuple[str, ...]) -> str:
    return json.dumps([config.get(f) for f in fields])


def _within(value: float, best: float, precision: float) -> bool:
    """Whether `value` cannot be told from `best` at this relative precision (either direction)."""
    low, high = sorted((value, best))
    return high <= low * (1 + precision) if low > 0 else high == low


def _load(trial: Finished, limits: Mapping[str, float]) -> float:
    """P90 TTFT and TPOT at the trial's measured rate, each over its SLO limit (raw seconds without one)."""
    return sum(float(trial.metrics.get(key) or 0.0) / limits.get(metric, 1.0) for metric, key in HEADROOM_METRICS)


def _distinct(trials: Sequence[Finished]) -> list[Finished]:
    """One trial per config as it acts (the first measured), in trial order."""
    seen: dict[str, Finished] = {}
    for t in sorted(trials, key=lambda t: t.number):
        seen.setdefault(config_key(in_force(t.config)[0]), t)
    return list(seen.values())


def finished_rows(rows: Sequence[TrialRow]) -> list[Finished]:
    """The completed trials among stored trial rows."""
    return [
        Finished(r.number, r.config, r.metrics, r.objective)
        for r in rows
        if r.state == "COMPLETE" and r.config is not None and r.objective is not None and r.objective == r.objective
    ]


def stored_verdict(study: StudyRow, rows: Sequence[TrialRow]) -> Verdict | None:
    """The verdict on a stored study; its baseline is its first trial (the engine default is enqueued first).

    Its objective is read from the store's text (an unknown one is a one-line ObjectiveError).
    """
    baseline = min(rows, key=lambda r: r.number).config if rows else None
    limits = Slo.from_dict(study.slo).seconds() if study.slo else {}
    precision = search_precision(str((study.settings or {}).get("backend", "sim")))
    return decide(finished_rows(rows), objective_named(study.objective), precision, limits, baseline)
