"""The console app: four views as Textual modes, switched with 1-4 or from the command palette."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from pathlib import Path

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.widget import AwaitMount

from ...backends import ServingConfig
from ...store import RunStore, StoreError
from ..errors import exit_status
from .config import ConfigScreen
from .live import LiveScreen
from .messages import ConfigChosen
from .runs import RunsScreen
from .tune import TuneScreen
from .view import VIEWS, Session, View

SCREENS: tuple[type[View], ...] = (LiveScreen, TuneScreen, RunsScreen, ConfigScreen)


class PipedeckApp(App[None]):
    """`pipedeck console`: Live runs, tuning studies, stored runs and the config form over one run store."""

    TITLE = "pipedeck"
    CSS_PATH = ["app.tcss", "live.tcss", "tune.tcss", "runs.tcss", "config.tcss", "compare.tcss"]  # parsed once
    MODES = {mode: mode for mode in VIEWS}
    BINDINGS = [
        Binding(str(n), f"switch_mode('{mode}')", title, show=False)  # the navigation bar shows them
        for n, (mode, (title, _)) in enumerate(VIEWS.items(), start=1)
    ]

    def __init__(self, db: Path, config: ServingConfig | None = None) -> None:
        super().__init__()
        self.session = Session(db, config or ServingConfig())

    def on_mount(self) -> None:
        try:  # create and migrate the store now: workers opening a new file at once would both migrate it
            RunStore.open(self.session.db).close()
        except StoreError as err:
            self.exit(return_code=exit_status(err), message=str(err))
            return
        for screen in SCREENS:
            self.install_screen(screen(self.session), screen.MODE)
        self.switch_mode("live")

    def switch_mode(self, mode: str) -> AwaitMount:
        """Show another view, clearing the notifications: an error over the settings of the view left behind
        would sit over the next view's settings, which it is not about."""
        if mode != self.current_mode:
            self.clear_notifications()
        return super().switch_mode(mode)

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for mode, (title, about) in VIEWS.items():
            yield SystemCommand(f"{title} view", about, partial(self.switch_mode, mode))
        if isinstance(screen, View):
            yield from screen.palette_commands()

    async def on_config_chosen(self, message: ConfigChosen) -> None:
        """The Config view hands its config to Live or Tune, which is shown (and composed, the first time)."""
        await self.switch_mode(message.target)
        view = self.screen
        if isinstance(view, LiveScreen):
            view.use_form()
        elif isinstance(view, TuneScreen):
            view.use_config(message.config)
