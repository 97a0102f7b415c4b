"""What tells compared runs apart: legend names that carry the differing settings, and mismatch warnings."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...backends import RunResult, backend_tag, declared_knobs, setting_text
from .config_text import split_text, tokens_text

MAX_PARTS = 4  # differing settings named in a legend entry; more become "+N more"
DERIVED = ("virtual_stages", "kv_capacity")  # follow from mode, layer split, tp × pp and the profiles
_BOOLS = {knob.field for knob in declared_knobs() if knob.kind == "bool"}


def _config(key: str, show: Callable[[object], str] = str) -> Callable[[RunResult], str | None]:
    return lambda r: None if r.config.get(key) is None else show(r.config[key])


def _rate(r: RunResult) -> str:
    return "the scenario's rate" if r.rate is None else f"{r.rate:.3g} req/s"


def _knob(field: str) -> Callable[[RunResult], str | None]:
    flag = field.replace("_", "-")

    def show(value: object) -> str:
        return f"{flag} {setting_text(bool(value) if field in _BOOLS else value)}"

    return _config(field, show)


# Settings in the order a legend names them: what the run measured first, then the config.
SETTINGS: tuple[tuple[str, Callable[[RunResult], str | None]], ...] = (
    ("scenario", lambda r: r.scenario),
    ("model", _config("model")),
    ("hardware", _config("hardware")),
    ("rate", _rate),
    ("requests", lambda r: f"{len(r.records)} requests"),
    ("seed", lambda r: f"seed {r.seed}"),
    ("mode", _config("mode")),
    ("tp × pp", lambda r: f"{r.config.get('tp')}×{r.config.get('pp')}"),
    ("chunk", _config("chunk", lambda v: f"chunk {tokens_text(v)}")),
    ("layer split", _config("layer_split", lambda v: f"split {split_text(v)}")),
)
WARNED = ("scenario", "model", "hardware", "rate")  # a difference in these makes the latencies incomparable


def _settings(results: Sequence[RunResult]) -> list[tuple[str, Callable[[RunResult], str | None]]]:
    """SETTINGS, then every other config field the runs carry (knobs, in the order the config lists them)."""
    named = {"model", "hardware", "mode", "tp", "pp", "chunk", "layer_split", *DERIVED}
    rest = [key for key in dict.fromkeys(k for r in results for k in r.config) if key not in named]
    return [*SETTINGS, *((key.replace("_", "-"), _knob(key)) for key in rest)]


def differing(results: Sequence[RunResult]) -> list[tuple[str, list[str | None]]]:
    """The settings whose values are not the same for all runs, each with every run's value."""
    found = []
    for name, read in _settings(results):
        values = [read(r) for r in results]
        if len(set(values)) > 1:
            found.append((name, values))
    return found


LEGEND_SEPARATOR = " · "  # between a run's name and each setting that sets it apart


def legend_names(ids: Sequence[int], results: Sequence[RunResult], labels: Sequence[str | None]) -> list[str]:
    """`run <id> [<backend>] [<label>] · <setting> · ...`: each run with the settings that differ among them.

    The backend is named unless simulated; at most MAX_PARTS settings, then "+N more".
    """
    parts = differing(results)
    names = []
    for index, base in enumerate(run_heads(ids, results, labels)):
        mine = [values[index] or f"no {name}" for name, values in parts]
        if len(mine) > MAX_PARTS:
            mine = [*mine[:MAX_PARTS], f"+{len(mine) - MAX_PARTS} more"]
        names.append(LEGEND_SEPARATOR.join([base, *mine]))
    return names


def run_heads(ids: Sequence[int], results: Sequence[RunResult], labels: Sequence[str | None]) -> list[str]:
    """`run <id> [<backend>] [<label>]`: what a legend name starts with, and a table column's header."""
    return [
        " ".join(filter(None, (f"run {run_id}", backend_tag(result.backend), label)))
        for run_id, result, label in zip(ids, results, labels)
    ]


def mismatch_warnings(ids: Sequence[int], results: Sequence[RunResult]) -> list[str]:
    """One line per setting that makes the runs' latencies incomparable (scenario, model, hardware, rate).

    Different rates are fine when every run has another at its scenario and rate to be compared with.
    """
    traffic = [(r.scenario, r.rate) for r in results]
    paired = all(traffic.count(t) > 1 for t in traffic)
    lines = []
    for name, values in differing(results):
        if name not in WARNED or (name == "rate" and paired):
            continue
        each = "; ".join(f"run {run_id}: {value}" for run_id, value in zip(ids, values))
        why = (
            "latency grows with load, so their latencies are not like for like"
            if name == "rate"
            else "their latencies are not comparable"
        )
        lines.append(f"the runs differ in {name} ({each}): {why}")
    return lines
