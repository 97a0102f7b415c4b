"""What every view shares: the session, the navigation bar, the footer and listing the store."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, TypeVar

from textual import work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.content import Content
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Select, Static

from ...backends import ServingConfig
from ...store import StoreError
from ...tuner import open_store
from .messages import StoreListed, WorkFailed

DEFAULT_SLO = "ttft=2s,tpot=200ms"
VIEWS = {
    "live": ("Live", "Run a scenario on a backend and watch it"),
    "tune": ("Tune", "Search configs for SLO goodput"),
    "runs": ("Runs", "Stored runs and studies; compare runs"),
    "config": ("Config", "Edit a serving config; save it, run it or tune from it"),
}


@dataclass
class Session:
    """What the views share: the run store, the Config form's config (its last valid state) and the backend the
    Live view runs it on, which chooses the knobs the form offers."""

    db: Path
    config: ServingConfig
    backend: str = "sim"


def shown_path(path: Path) -> str:
    """A path as the views print it: relative to the working directory when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


class NavBar(Static):
    """The views as numbered tabs (the active one highlighted, each clickable) and the run store's file."""

    def __init__(self, active: str, db: Path) -> None:
        tabs = [
            Content.from_markup(f"[@click=app.switch_mode('{mode}')] {n} {title} [/]")
            for n, (mode, (title, _)) in enumerate(VIEWS.items(), start=1)
        ]
        tabs = [tab.stylize("reverse bold") if mode == active else tab for tab, mode in zip(tabs, VIEWS)]
        super().__init__(
            Content(" pipedeck ").stylize("bold")
            + Content(" ").join(tabs)
            + Content(f"  db {shown_path(db)}").stylize("dim"),
            classes="navbar",
        )


class View(Screen[None]):
    """A view: navigation bar, the view's body, footer; lists the store on request."""

    MODE: ClassVar[str]
    AUTO_FOCUS = "Select"  # a picker, not a text field: single-key bindings work at once
    BINDINGS = [Binding("escape", "blur", "Leave field", show=False)]

    def __init__(self, session: Session) -> None:
        super().__init__(name=self.MODE)
        self.session = session

    def compose(self) -> ComposeResult:
        yield NavBar(self.MODE, self.session.db)
        yield from self.body()
        yield Footer()

    def body(self) -> ComposeResult:
        """The view's own widgets."""
        raise NotImplementedError

    def palette_commands(self) -> Iterable[SystemCommand]:
        """The view's actions, for the command palette."""
        return ()

    def action_blur(self) -> None:
        """Leave the focused field so that single-key bindings (1-4, s, x ...) work."""
        self.set_focus(None)

    def error(self, message: str) -> None:
        """Show an error as a notification in place of any other (never markup: messages quote paths and brackets).

        One at a time: notifications sit over the settings at the top right, and a stack of them would reach down
        over the view's results.
        """
        self.app.clear_notifications()
        self.notify(message, severity="error", timeout=8, markup=False)

    @work(thread=True, exclusive=True, group="store-list")
    def list_store(self) -> None:
        """Read the store's runs, studies and named configs; post StoreListed (or WorkFailed)."""
        try:
            with open_store(self.session.db) as store:
                listing = StoreListed(store.list_runs(), store.list_studies(), store.list_configs())
        except StoreError as err:
            self.post_message(WorkFailed(str(err)))
            return
        self.post_message(listing)

    def on_work_failed(self, message: WorkFailed) -> None:
        self.error(message.error)


def choose(select: Select[str], choices: Sequence[str], value: str) -> None:
    """Select `value`, first adding it to the choices when it is not one (a profile given as a file path)."""
    if value not in choices:
        select.set_options([(choice, choice) for choice in (*choices, value)])
    select.value = value


def offer(select: Select[str], options: Sequence[tuple[str, str]], value: str) -> None:
    """Replace a picker's choices and pick `value` (the first choice when it is gone), showing its label as it is now.

    A Select redraws its label only when its value changes, so a choice whose label changed under the same
    value (the Config form's config, edited) would keep showing the old label.
    """
    select.set_options(options)
    select.value = value if any(v == value for _, v in options) else options[0][1]
    select.mutate_reactive(type(select).value)


def cursor_key(table: DataTable[object]) -> str | None:
    """The key of the row under a table's cursor; None when the table has no rows."""
    return table.coordinate_to_cell_key(table.cursor_coordinate).row_key.value if table.row_count else None


def one_line(err: BaseException) -> str:
    """An exception as one line: its message's first line, or its type when it has none."""
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


Number = TypeVar("Number", int, float)  # what `typed_number` reads: the kind it is asked for


def typed_number(text: str, kind: type[Number], field: str) -> Number | None:
    """A positive number typed into a control, None when blank; a ValueError naming the field otherwise."""
    text = text.strip()
    if not text:
        return None
    try:
        value = kind(text)
    except ValueError:
        raise ValueError(f"{field}: expected {'a whole' if kind is int else 'a'} number, got {text!r}") from None
    if value <= 0:
        raise ValueError(f"{field}: must be positive, got {text}")
    return value
