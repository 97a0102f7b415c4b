"""`pipedeck report --study NAME`: a tuning study as one self-contained HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Unpack

import click
import optuna

from ..store import RunStore, StudyRow, TrialRow
from ..tuner import (
    FREE_KNOBS,
    Objective,
    Slo,
    Verdict,
    interval_text,
    objective_named,
    open_storage,
    pull_study,
    shown,
    stored_interval,
    stored_verdict,
    win_text,
)
from .db import READ_LOCK_WAIT_S, DbOptions, db_option, db_path, local_time
from .options import check_writable
from .plots import (
    Section,
    best_vs_default,
    chunk_vs_objective,
    history_from_trials,
    optuna_history,
    optuna_importances,
    page,
)
from .plots.study import completed
from .storage import check_existing_storage


class ReportOptions(DbOptions):
    """`pipedeck report`'s options beside the study's name."""

    out: str
    storage: str | None


@click.command()
@click.option("--study", "name", required=True, help="The study's name (see `pipedeck tune`).")
@click.option("--out", required=True, type=click.Path(dir_okay=False), help="The HTML file to write.")
@click.option(
    "--storage",
    default=None,
    help="The study's Optuna storage (as tune's --storage): its trials, from every host, are copied into "
    "this host's run store first.",
)
@db_option
def report(name: str, **opts: Unpack[ReportOptions]) -> None:
    """Report a tuning study: history, parameter importances, chunk against objective, best against default."""
    out = Path(opts["out"])
    check_writable(str(out), "--out")
    pulled = None
    storage = opts["storage"]
    if storage:
        check_existing_storage(storage)
        pulled = pull_study(storage, name, db_path(opts))
    with RunStore.open(db_path(opts), read_only=True, lock_timeout_s=READ_LOCK_WAIT_S) as store:
        row = store.get_study(name)
        trials = store.trials(name)
    objective = objective_named(row.objective)  # the store keeps its name
    study, storage_note = (pulled, f"Optuna storage: {shown(str(storage))}") if pulled else load_optuna(row)
    out.write_text(
        page(
            f"pipedeck report: study {name}",
            _meta(row, trials, storage_note, objective=objective),
            report_sections(row, trials, stored_verdict(row, trials), study, objective=objective),
        ),
        encoding="utf-8",
    )
    click.echo(f"wrote {out}")


def load_optuna(row: StudyRow) -> tuple[optuna.Study | None, str]:
    """The study from its Optuna storage when that still exists, and a line saying which source the page uses."""
    storage = row.storage or ""
    local = storage.removeprefix("sqlite:///")  # an SQLite file is checked like a journal file
    if not storage or ("://" not in local and not Path(local).is_file()):
        return None, f"Optuna storage {storage or '(none)'} is gone: the history is built from the run store"
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    try:
        study = optuna.load_study(study_name=row.name, storage=open_storage(storage))
        return study, f"Optuna storage: {shown(storage)}"
    except Exception as err:  # noqa: BLE001 - any storage failure falls back to the run store's copy of the trials
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        return None, (
            f"Optuna storage {shown(storage)} could not be read ({reason}): the history is built from the run store"
        )


def _meta(row: StudyRow, trials: list[TrialRow], storage_note: str, *, objective: Objective) -> list[str]:
    s = row.settings or {}
    states = {state: sum(t.state == state for t in trials) for state in ("COMPLETE", "PRUNED", "FAIL")}
    return [
        f"{row.scenario} on {s.get('model')}, {s.get('devices')} × {s.get('hardware')}; objective {objective.name} "
        f"({objective.direction_name})" + (f"; SLO {Slo.from_dict(row.slo).text()}" if row.slo else ""),
        f"{len(trials)} trials: {states['COMPLETE']} completed, {states['PRUNED']} pruned, {states['FAIL']} failed; "
        f"created {local_time(row.created_at)}",
        storage_note,
    ]


def default_trial(trials: list[TrialRow]) -> TrialRow | None:
    """The engine-default trial: `pipedeck tune` enqueues it as trial 0 (a retry repeats its parameters)."""
    first = next((t for t in trials if t.number == 0), None)
    if first is None:
        return None
    return next((t for t in completed(trials) if t.params == first.params), None)


def report_sections(
    row: StudyRow, trials: list[TrialRow], verdict: Verdict | None, study: optuna.Study | None, *, objective: Objective
) -> list[Section]:
    """The page's sections: notes stand in for figures the study has no data for."""
    label = objective.label
    best = next((t for t in trials if verdict is not None and t.number == verdict.winner.number), None)
    if best is None or not completed(trials):
        return [
            Section(
                "No results yet",
                note=f"Study {row.name} has no completed trial: run pipedeck tune --study {row.name} to add some.",
            )
        ]
    history = optuna_history(study, label) if study is not None else history_from_trials(trials, objective, label)
    importances = (
        optuna_importances(study)
        if study is not None
        else "Parameter importances need the study's Optuna storage, which is gone."
    )
    if isinstance(importances, str):
        importance = Section("Parameter importances", note=importances)
    else:
        importance = Section("Parameter importances", importances, key="importances")
    default = default_trial(trials)
    return [
        Section(
            "Optimisation history",
            history,
            key="history",
            note="Completed trials only: a pruned trial stopped early (it could not beat the best so far, "
            "or its config could not run).",
        ),
        importance,
        Section(
            "Chunk size against the objective",
            chunk_vs_objective(trials, label, best),
            key="chunk",
            note="Each completed trial at its chunk size (the per-step token budget), one colour per pipeline "
            "mode; a pruned trial sits at the rate at which it already failed the SLO.",
        ),
        Section(
            "Best config",
            best_vs_default(best, default, objective),
            key="best",
            note=" ".join(
                filter(
                    None,
                    (
                        verdict_note(verdict),
                        confidence_note(best, default, objective=objective),
                        None if default is not None else "The engine-default trial (trial 0) has not completed.",
                    ),
                )
            ),
        ),
    ]


def verdict_note(verdict: Verdict | None) -> str:
    """How many configs tie with the best and which knobs are free within the tie set."""
    if verdict is None or len(verdict.ties) < 2:
        return ""
    free = ", ".join(verdict.free) or "none"
    return (
        f"{len(verdict.ties)} configs tie within the goodput search's precision (trials "
        f"{', '.join(str(t.number) for t in verdict.ties)}); trial {verdict.winner.number} is recommended for "
        f"its latency headroom, then for changing the fewest knobs from the default. {FREE_KNOBS[0].upper()}"
        f"{FREE_KNOBS[1:]}: {free}."
    )


def confidence_note(best: TrialRow | None, default: TrialRow | None, *, objective: Objective) -> str:
    """Each trial's goodput as a 95% interval over arrival traces, where `tune --repeats` measured one, and
    whether the best is a clear win on the paired seeds (the verdict `tune` prints)."""
    best_ci, default_ci = (stored_interval(t.metrics) if t is not None else None for t in (best, default))
    parts = [f"trial {t.number}: {interval_text(ci)}" for t, ci in ((best, best_ci), (default, default_ci)) if t and ci]
    if not parts:
        return ""
    verdict = win_text(best_ci, default_ci, objective)
    return (
        "Goodput over arrival traces (mean and 95% interval): "
        + "; ".join(parts)
        + "."
        + (f" Best against default: {verdict}." if verdict else "")
    )
