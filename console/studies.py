"""`pipedeck studies`: the tuning studies in the run store (or an Optuna storage), so no name is copied by hand."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypedDict, Unpack

import click
import optuna
from optuna.trial import TrialState

from ..store import RunStore, StudyRow
from ..tuner import OBJECTIVES, Objective, open_storage, recommended_trial, shown, stored_verdict
from .db import READ_LOCK_WAIT_S, DbOptions, db_option, db_path
from .storage import check_existing_storage

_EPOCH = datetime.min.replace(tzinfo=UTC)


@dataclass(frozen=True)
class StudyLine:
    """One study as listed: where it is, how far it got and what it found."""

    name: str
    storage: str
    objective: str | None
    finished: int  # trials that completed or were pruned
    trials: int  # every trial, running and failed ones included
    best_trial: int | None
    best_value: float | None
    created_at: datetime | None  # UTC, timezone-aware
    updated_at: datetime | None  # the last trial's completion

    @property
    def known_objective(self) -> Objective | None:
        """The objective the study names, where pipedeck knows it (None: none named, or one it does not know)."""
        return None if self.objective is None else OBJECTIVES.get(self.objective)


class StudyJson(TypedDict):
    """One study as `studies --json` prints it: a StudyLine with its direction, times in ISO 8601."""

    name: str
    storage: str
    objective: str | None
    direction: str | None  # maximize or minimize; None for an objective pipedeck does not know
    finished: int
    trials: int
    best_trial: int | None
    best_value: float | None
    created_at: str | None
    updated_at: str | None


class StudiesOptions(DbOptions):
    """`pipedeck studies`' options."""

    storage: str | None
    as_json: bool


@click.command()
@db_option
@click.option(
    "--storage",
    default=None,
    help="List the studies in this Optuna storage (a journal file or a database URL) instead of the run store.",
)
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of a table.")
def studies(**opts: Unpack[StudiesOptions]) -> None:
    """List tuning studies: name, storage, trials, best result and when, oldest first."""
    storage = opts["storage"]
    if storage:
        check_existing_storage(storage)  # listing never creates a journal
        source = shown(storage)
        lines = optuna_lines(storage)
    else:
        path = db_path(opts)
        source = str(path)
        with RunStore.open(path, read_only=True, lock_timeout_s=READ_LOCK_WAIT_S) as store:
            lines = [store_line(row, store) for row in store.list_studies()]
    if opts["as_json"]:
        click.echo(json.dumps([line_json(line) for line in lines], indent=2))
    elif not lines:
        click.echo(f"no studies in {source}")
    else:
        print_studies(lines, source)


def store_line(row: StudyRow, store: RunStore) -> StudyLine:
    """A study as the run store holds it; its best is the tuner's recommendation (ties broken as `tune` does)."""
    trials = store.trials(row.name)
    verdict = stored_verdict(row, trials)
    done = [t.completed_at for t in trials if t.completed_at is not None]
    return StudyLine(
        name=row.name,
        storage=row.storage or "",
        objective=row.objective,
        finished=sum(t.state in ("COMPLETE", "PRUNED") for t in trials),
        trials=len(trials),
        best_trial=verdict.winner.number if verdict else None,
        best_value=verdict.winner.value if verdict else None,
        created_at=row.created_at,
        updated_at=max(done) if done else None,
    )


def optuna_lines(url: str) -> list[StudyLine]:
    """The studies in an Optuna storage, as every host's workers left them (best: the trial `tune` recommends)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(url)
    lines = []
    for summary in optuna.get_all_study_summaries(storage, include_best_trial=False):
        study = optuna.load_study(study_name=summary.study_name, storage=storage)
        trials = study.get_trials(deepcopy=False)
        finished = [t for t in trials if t.state in (TrialState.COMPLETE, TrialState.PRUNED)]
        best = recommended_trial(study)
        done = [t.datetime_complete for t in finished if t.datetime_complete is not None]
        lines.append(
            StudyLine(
                name=summary.study_name,
                storage=shown(url),
                objective=summary.user_attrs.get("pipedeck", {}).get("objective"),
                finished=len(finished),
                trials=len(trials),
                best_trial=best.number if best else None,
                best_value=best.value if best else None,
                created_at=_aware(summary.datetime_start),
                updated_at=_aware(max(done) if done else None),
            )
        )
    return sorted(lines, key=lambda line: (line.created_at is None, line.created_at or _EPOCH, line.name))


def _aware(value: datetime | None) -> datetime | None:
    """Optuna's local naive datetimes as aware ones."""
    return None if value is None else value.astimezone()


def line_json(line: StudyLine) -> StudyJson:
    """One listed study as a JSON object, times in ISO 8601 with their zone."""
    objective = line.known_objective
    return {
        "name": line.name,
        "storage": line.storage,
        "objective": line.objective,
        "direction": objective.direction_name if objective is not None else None,
        "finished": line.finished,
        "trials": line.trials,
        "best_trial": line.best_trial,
        "best_value": line.best_value,
        "created_at": line.created_at.isoformat() if line.created_at else None,
        "updated_at": line.updated_at.isoformat() if line.updated_at else None,
    }


def print_studies(lines: list[StudyLine], source: str) -> None:
    """Each study's name whole on a line of its own (it is what `--study` takes), its figures indented below."""
    click.echo(f"studies in {source}")
    for line in lines:
        click.echo(line.name)
        click.echo(
            f"    {_trials_cell(line)} trials · best {_best_cell(line)} · updated {_when(line)} · {shown(line.storage)}"
        )


def _trials_cell(line: StudyLine) -> str:
    return str(line.finished) if line.finished == line.trials else f"{line.finished}/{line.trials}"


def _best_cell(line: StudyLine) -> str:
    objective = line.known_objective
    if line.best_value is None or objective is None:
        return "-"
    return f"{objective.value_text(line.best_value)} (trial {line.best_trial})"


def _when(line: StudyLine) -> str:
    moment = line.updated_at or line.created_at
    return moment.astimezone().strftime("%m-%d %H:%M") if moment else "-"
