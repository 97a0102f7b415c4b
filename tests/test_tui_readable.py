"""The console at 80x24: every figure whole, the focused control plainly marked, notifications off the results."""

from __future__ import annotations

import asyncio

from textual.app import App
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Button, DataTable, Input, Select

from pipedeck.console.tui import PipedeckApp
from tests.tui_support import QWEN, SMALL, cell_styles, contrast

FOCUS_CONTRAST = 3.0  # WCAG 2.2's least contrast between a focus indicator's focused and unfocused states


def look(app: App, widget: Widget) -> tuple[int, int, int]:
    """The colour that marks a control's focus: its border's (its corner's) if it has one, else its most common
    background."""
    styles = cell_styles(app, widget.region)
    if widget.styles.border_top[0] not in ("", "none", "hidden", "blank"):
        return styles[0].color.get_truecolor()
    shown = [s.color if s.reverse else s.bgcolor for s in styles]  # reverse: the terminal swaps the two
    backgrounds = [colour.get_truecolor() for colour in shown if colour is not None]
    return max(set(backgrounds), key=backgrounds.count)


def test_the_focused_control_stands_out_in_every_view(tmp_path):
    """Every kind of control in each view (the Config form's forty fields are a handful of kinds)."""
    async def scenario() -> None:
        app = PipedeckApp(tmp_path / "c.duckdb", QWEN)
        async with app.run_test(size=SMALL) as pilot:
            checked = set()
            for key in "1234":
                await pilot.press("escape", key)
                await pilot.pause()
                screen = app.screen
                kinds = {(type(w), frozenset(w.classes)): w for w in reversed(screen.focus_chain)}  # one of each
                for widget in kinds.values():
                    widget.focus()
                    await pilot.pause()
                    focused = look(app, widget)
                    screen.set_focus(None)
                    await pilot.pause()
                    plain = look(app, widget)
                    ratio = contrast(focused, plain)
                    assert ratio >= FOCUS_CONTRAST, f"{key}: {widget!r} focused {focused}, not {plain}: {ratio:.2f}"
                    checked.add(type(widget))
            assert {Input, Select, Button, DataTable, VerticalScroll} <= {
                kind for widget_type in checked for kind in widget_type.__mro__}

    asyncio.run(scenario())
