"""Typed messages the console's thread workers post to its views."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from textual.message import Message

from ...backends import RunResult, ServingConfig
from ...store import ConfigRow, RunRow, StudyRow, TrialRow
from ...tuner import Progress, TuneOutcome
from ..plots.table import Cell
from .pacing import Frame


@dataclass
class RunStarted(Message):
    """A Live run's config resolved and its backend started."""

    scenario: str
    ranks: int
    total: int  # requests in the workload


@dataclass
class RunProgress(Message):
    """A Live run reported progress."""

    frame: Frame


@dataclass
class RunFinished(Message):
    """A Live run finished and was stored as `run_id`."""

    result: RunResult
    run_id: int


@dataclass
class RunStopped(Message):
    """A Live run was cancelled at simulated time `at_s`; nothing was stored."""

    at_s: float


@dataclass
class RunFailed(Message):
    """A Live run could not start, run or be stored."""

    error: str


@dataclass
class TrialsUpdated(Message):
    """A study made progress; `trials` are its finished trials as the store holds them."""

    progress: Progress
    trials: list[TrialRow]


@dataclass
class TuneEnded(Message):
    """A study stopped: done, paused (outcome.interrupted) or stopped and finalised."""

    outcome: TuneOutcome


@dataclass
class TuneFailed(Message):
    """A study could not start or failed."""

    error: str


@dataclass
class Exported(Message):
    """The best config was exported to these files; where the launch is not what was predicted."""

    paths: list[Path]
    warnings: list[str]


@dataclass
class StoreListed(Message):
    """What the store holds, for the Runs view and the config pickers."""

    runs: list[RunRow]
    studies: list[StudyRow]
    configs: list[ConfigRow]


@dataclass
class Compared(Message):
    """Stored runs were compared: their names and the heads they start with, the metric rows, per run its cells,
    the report written, and the warnings (settings that make them incomparable) and notes (how they were chosen)
    the report opens with."""

    names: list[str]
    heads: list[str]
    rows: list[str]
    cells: list[list[Cell]]
    path: Path
    warnings: list[str]
    notes: list[str]


@dataclass
class WorkFailed(Message):
    """A background read, write or export failed; the view shows it as an error."""

    error: str


@dataclass
class ConfigChosen(Message):
    """The Config view's config is to be run (target "live") or tuned around (target "tune")."""

    config: ServingConfig
    target: str


@dataclass
class ConfigLoaded(Message):
    """A named config or a stored run's config was read, to fill the form."""

    config: ServingConfig


@dataclass
class ConfigSaved(Message):
    """The form's config was saved under `name`."""

    name: str
