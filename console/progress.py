"""Progress for people and for pipes: rich's bar on a terminal, plain timestamped lines anywhere else.

rich draws nothing until the end when stderr is not a terminal (a log file,
`| tee`, CI), so a 40 s tune looks hung. `--progress plain` (the default
there) prints one line per step of progress instead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, TypedDict

import click
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

if TYPE_CHECKING:
    from click.decorators import FC  # what click.option decorates: a function or a command

PROGRESS_MODES = ("auto", "bar", "plain", "off")
QUIET_S = 5.0  # a plain line for a description-only change (no step done) at most this often


class ProgressOptions(TypedDict):
    """What `progress_mode` reads: the value `progress_option` adds, and the command's --json."""

    progress_mode: str
    as_json: bool


def progress_option(fn: FC) -> FC:
    """--progress auto|bar|plain|off."""
    return click.option(
        "--progress",
        "progress_mode",
        type=click.Choice(PROGRESS_MODES),
        default="auto",
        show_default=True,
        help="Progress on stderr: a bar on a terminal, plain lines otherwise (auto), or off.",
    )(fn)


@dataclass
class _Task:
    description: str
    total: float | None
    completed: float = 0.0
    printed_at: float = 0.0


class PlainProgress:
    """rich.progress.Progress's add/update/remove API, writing a line per completed step (and per slow change).

    Nothing is printed for a task until it makes a step (or its description changes after QUIET_S), so a
    command that fails at once prints its one error line alone.
    """

    def __init__(self, console: Console):
        self.console = console
        self.started = time.monotonic()
        self.tasks: dict[TaskID, _Task] = {}

    def __enter__(self) -> PlainProgress:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        return None

    def add_task(self, description: str, total: float | None = None, **_: object) -> TaskID:
        task_id = TaskID(len(self.tasks))
        self.tasks[task_id] = _Task(description, total, printed_at=time.monotonic())  # its first step prints
        return task_id

    def update(
        self,
        task_id: TaskID,
        *,
        completed: float | None = None,
        advance: float | None = None,
        description: str | None = None,
        total: float | None = None,
        **_: object,
    ) -> None:
        task = self.tasks[task_id]
        before = (task.completed, task.description)
        if total is not None:
            task.total = total
        if completed is not None:
            task.completed = completed
        if advance is not None:
            task.completed += advance
        if description is not None:
            task.description = description
        stepped = task.completed != before[0]
        if stepped or (task.description != before[1] and time.monotonic() - task.printed_at >= QUIET_S):
            self._line(task)

    def remove_task(self, task_id: TaskID) -> None:
        self.tasks.pop(task_id, None)

    def _line(self, task: _Task) -> None:
        elapsed = time.monotonic() - self.started
        count = "" if task.total is None else f"[{task.completed:g}/{task.total:g}] "
        self.console.print(f"{elapsed:7.1f}s {count}{task.description}", highlight=False, markup=False, soft_wrap=True)
        task.printed_at = time.monotonic()


def progress_mode(opts: ProgressOptions) -> str:
    """--progress as given; with --json and no explicit choice, none (the JSON is the whole answer)."""
    mode = opts["progress_mode"]
    return "off" if mode == "auto" and opts["as_json"] else mode


def make_progress(mode: str, console: Console, counted: bool = True) -> Progress | PlainProgress:
    """The progress display `mode` asks for on `console` (counted: a bar with n/total; else a spinner)."""
    if mode == "auto":
        mode = "bar" if console.is_terminal else "plain"
    if mode == "plain":
        return PlainProgress(console)
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        *((BarColumn(), MofNCompleteColumn()) if counted else ()),
        TimeElapsedColumn(),
    )
    return Progress(*columns, console=console, transient=True, disable=mode == "off")
