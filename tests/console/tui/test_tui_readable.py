"""The console at 80x24: every figure whole, the focused control plainly marked, notifications off the results."""

from __future__ import annotations

import asyncio
import re

from rich.style import Style
from textual.app import App
from textual.containers import VerticalScroll
from textual.widget import Widget
from textual.widgets import Button, DataTable, Input, Select, Static

from pipedeck.backends import backends
from pipedeck.backends.base import BackendDeclaration
from pipedeck.console.tui import PipedeckApp
from pipedeck.console.tui import tune as tune_view
from pipedeck.console.tui.compare import CompareScreen
from pipedeck.console.tui.live import seconds
from pipedeck.console.tui.messages import RunFailed, TuneEnded, TuneFailed
from pipedeck.tuner import GOODPUT, TuneOutcome
from tests.tui_support import (
    QWEN,
    SMALL,
    ScriptedBackend,
    cells,
    contrast,
    fake_study,
    fill,
    notifications,
    screen_lines,
    store_runs,
    text_in,
    wait_for,
)

FOCUS_CONTRAST = 3.0  # WCAG 2.2's least contrast between a focus indicator's focused and unfocused states
TEXT_CONTRAST = 4.5  # WCAG 2's least contrast of text against its background (AA)
TITLE = re.compile(r"╭─ [^╮]*? ─")  # a panel's title in its top border: a long study name may end in an ellipsis


def cut_text(app: App) -> list[str]:
    """Rows of the screen with an ellipsis outside a panel's title: something was cut to fit."""
    return [line for line in screen_lines(app) if "…" in TITLE.sub("", line)]


def scripted(monkeypatch) -> None:
    monkeypatch.setitem(
        backends(),
        "scripted",
        BackendDeclaration("scripted", "fixed replay for tests", ScriptedBackend.capabilities, ScriptedBackend),
    )


def test_every_view_shows_its_figures_whole_at_80x24(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    scripted(monkeypatch)
    monkeypatch.setattr(tune_view, "run_study", fake_study)
    db = tmp_path / "c.duckdb"
    store_runs(db)

    async def scenario() -> None:
        app = PipedeckApp(db, QWEN)
        async with app.run_test(size=SMALL) as pilot:
            live = app.screen
            fill(
                live,
                {
                    "backend": "scripted",
                    "scenario": "short-4k",
                    "requests": "4",
                    "speed": "max",
                    "slo": "ttft=2s,tpot@p95=100ms",
                },
            )
            await pilot.press("s")
            await wait_for(pilot, lambda: live.worker is None and live.stats is not None)
            await pilot.pause()
            latency = text_in(app, live.query_one("#latency-panel").region)
            for metric in ("ttft", "tpot"):
                assert all(seconds(value) in latency for value in live.stats.latency(metric)), latency
            assert "SLO TTFT P90 ≤ 2 s: FAIL" in latency  # the scripted run's P90 TTFT is 3.93 s
            tpot_p95 = seconds(live.stats.percentile("tpot", 95.0))  # no column: its value is on its line
            assert f"SLO TPOT P95 ≤ 100 ms: {tpot_p95} FAIL" in latency
            assert "form: qwen2.5-14b a100-40g-pcie tp2 pp2 cpp 8k" in text_in(app, live.query_one("#config").region)
            assert cut_text(app) == [] and "s Start  x Stop  [ Zoom in  ] Zoom out" in screen_lines(app)[-1]

            await pilot.press("2")
            tune = app.screen
            fill(tune, {"model": "qwen2.5-14b", "hardware": "a100-40g-pcie", "devices": "4", "trials": "4"})
            await pilot.press("s")
            await wait_for(pilot, lambda: tune.phase == "idle" and len(tune.trials) == 4)
            await pilot.press("e")
            await wait_for(pilot, lambda: "wrote" in str(tune.query_one("#export-status", Static).content))
            await pilot.pause()
            table = text_in(app, tune.query_one("#trials-table").region)
            for row in (
                r"0 +done +7\.18 +2×2 +8k +cpp",
                r"1 +done +10\.7 +2×2 +24k +cpp",
                r"2 +pruned +- +2×2 +40k +cpp",
            ):
                assert re.search(row, table), table
            export = text_in(app, tune.query_one("#export-status").region)
            assert all(name in export.replace("\n", " ") for name in ("serve.sh", "pipedeck-best.json")), export
            assert cut_text(app) == []

            await pilot.press("3")
            runs = app.screen
            await wait_for(pilot, lambda: runs.query_one("#runs-table", DataTable).row_count == 3)
            shown = text_in(app, runs.query_one("#runs-table").region)
            for row in runs.runs:
                assert f"{row.ttft_p90_s:.4g}" in shown and f"{row.tpot_p90_s:.4g}" in shown, shown
                assert f"{row.bubble_ratio:.1%}" in shown
            assert cut_text(app) == []
            await pilot.press("space", "down", "space", "c")
            await wait_for(pilot, lambda: app.screen is not runs)
            await pilot.pause()
            compare = app.screen
            shown = text_in(app, compare.query_one(DataTable).region)
            assert all(cell.text in shown for column in compare.cells for cell in column[:12]), shown
            assert cut_text(app) == []
            await pilot.press("escape", "4")
            await pilot.pause()
            assert cut_text(app) == []

    asyncio.run(scenario())


def shown(style: Style) -> tuple[tuple[int, int, int], tuple[int, int, int]] | None:
    """A cell's text and background colours as the terminal shows them (reverse swaps the two); None if unset."""
    text, background = (style.bgcolor, style.color) if style.reverse else (style.color, style.bgcolor)
    return None if text is None or background is None else (text.get_truecolor(), background.get_truecolor())


def look(app: App, widget: Widget) -> tuple[tuple[int, int, int], float]:
    """The colour that marks a control's focus: its border's (its corner's) if it has one, else its most common
    background; and the least contrast of its letters and digits against their background."""
    drawn = [(char, shown(style)) for char, style in cells(app, widget.region)]
    readable = min((contrast(*colours) for char, colours in drawn if char.isalnum() and colours), default=21.0)
    if widget.styles.border_top[0] not in ("", "none", "hidden", "blank"):
        return drawn[0][1][0], readable
    backgrounds = [colours[1] for _, colours in drawn if colours]
    return max(set(backgrounds), key=backgrounds.count), readable


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
                    focused, readable = look(app, widget)
                    screen.set_focus(None)
                    await pilot.pause()
                    plain, was_readable = look(app, widget)
                    ratio = contrast(focused, plain)
                    assert ratio >= FOCUS_CONTRAST, f"{key}: {widget!r} focused {focused}, not {plain}: {ratio:.2f}"
                    # and its text stays readable: WCAG's 4.5, or (Textual's own button colours) no worse than before
                    assert readable >= min(TEXT_CONTRAST, was_readable), f"{key}: {widget!r}: text {readable:.2f}"
                    checked.add(type(widget))
            assert {Input, Select, Button, DataTable, VerticalScroll} <= {
                kind for widget_type in checked for kind in widget_type.__mro__
            }

    asyncio.run(scenario())


def test_notifications_do_not_cover_the_results(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tune_view, "run_study", fake_study)

    async def scenario() -> None:
        app = PipedeckApp(tmp_path / "c.duckdb", QWEN.replace(kv_capacity=1000))  # no 4k prompt fits
        async with app.run_test(size=SMALL, notifications=True) as pilot:
            live = app.screen
            fill(live, {"scenario": "short-4k", "requests": "4", "speed": "max"})
            await pilot.press("s")
            await wait_for(pilot, lambda: live.worker is None and notifications(app))
            await pilot.pause()
            toasts = [toast.region for toast in live.query("Toast")]
            assert toasts and all(
                not toast.overlaps(live.query_one(selector).region)
                for toast in toasts
                for selector in ("#progress", "#latency-panel", "#strip", "#live-status")
            )

            await pilot.press("2")
            tune = app.screen
            fill(tune, {"model": "qwen2.5-14b", "hardware": "a100-40g-pcie", "devices": "4", "trials": "4"})
            await pilot.press("e")  # no study yet: refused, in a notification
            await wait_for(pilot, lambda: any("no study" in message for _, message in notifications(app)))
            await pilot.press("s")
            await wait_for(pilot, lambda: tune.phase == "idle" and tune.trials)
            await pilot.press("e")
            await wait_for(pilot, lambda: "wrote" in str(tune.query_one("#export-status", Static).content))
            await pilot.pause()
            assert {severity for severity, _ in notifications(app)} == {"error"}  # the results are in the view
            toasts = [toast.region for toast in tune.query("Toast")]
            assert toasts and all(
                not toast.overlaps(tune.query_one(selector).region)
                for toast in toasts
                for selector in ("#export-status", "#trials-table", "#best", "#chart")
            )

    asyncio.run(scenario())


def test_a_view_switch_clears_the_errors_of_the_view_left(tmp_path):
    async def scenario() -> None:
        app = PipedeckApp(tmp_path / "c.duckdb", QWEN)
        async with app.run_test(size=SMALL, notifications=True) as pilot:
            await pilot.press("3", "c")  # nothing selected: refused, in an error over the Runs settings
            await wait_for(pilot, lambda: notifications(app) and app.screen.query("Toast"))
            await pilot.press("1")
            await pilot.pause()
            assert notifications(app) == [] and not app.screen.query("Toast")
            assert not any("select at least two runs" in line for line in screen_lines(app))
            await pilot.press("1", "3", "c", "3")  # the same view again is no switch: its error stays
            await wait_for(pilot, lambda: notifications(app))
            await pilot.pause()
            assert [severity for severity, _ in notifications(app)] == ["error"]

    asyncio.run(scenario())


LONG_LABEL = "cluster-a baseline before the driver upgrade"
KILLED = (
    "engine: llama-server exited with status -9 while serving; log: /srv/cluster-a/pipedeck-serve.log "
    "(last line: srv  update_slots: id  0 | task 12 | prompt processing progress, n_past = 2048)"
)


def shown_whole(app: App, widget: Widget) -> str:
    """What a widget shows, its wrapped lines joined, every run of spaces one space (wrapping breaks at spaces)."""
    return " ".join(text_in(app, widget.region).split())


def whole(text: str) -> str:
    """The text as shown_whole gives it back when it is shown whole."""
    return " ".join(text.split())


def assert_headers_whole(app: App, table: DataTable) -> None:
    """Every column header of a bordered table shown whole: none cut at the panel's edge."""
    header = text_in(app, table.region).splitlines()[1][1:-1]
    for column in table.columns.values():
        label = str(column.label)
        assert not label or re.search(rf"(^|\s){re.escape(label)}(\s|$)", header), header


def test_status_lines_column_headers_and_failure_reasons_are_whole_at_80x24(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tune_view, "run_study", fake_study)
    ids = store_runs(tmp_path / "c.duckdb", labels=(LONG_LABEL, None))

    async def scenario() -> None:
        app = PipedeckApp(tmp_path / "c.duckdb", QWEN)
        async with app.run_test(size=SMALL) as pilot:
            live = app.screen
            live.post_message(RunFailed(KILLED))  # what a run whose server was killed ends with
            await wait_for(pilot, lambda: whole(KILLED) in shown_whole(app, live.query_one("#live-status")))

            await pilot.press("2")
            tune = app.screen
            fill(tune, {"model": "qwen2.5-14b", "hardware": "a100-40g-pcie", "devices": "4", "trials": "4"})
            await pilot.press("s")
            await wait_for(pilot, lambda: tune.phase == "idle" and len(tune.trials) == 4)
            await pilot.pause()
            table = tune.query_one("#trials-table", DataTable)
            assert_headers_whole(app, table)
            assert "split 24,24" in shown_whole(app, tune.query_one("#trial-detail"))  # what has no column
            table.focus()
            await pilot.press("down")  # the table's cursor to the next trial: its split and knobs
            await pilot.pause()
            assert shown_whole(app, tune.query_one("#trial-detail")).startswith("trial 1:")

            paused = TuneOutcome(tune.spec.study, GOODPUT, 4, None, None, None, None, interrupted=True)
            for message, status in (
                (TuneEnded(paused), "paused after 4 trials: Resume (s) continues, Stop (x) ends the study"),
                (TuneFailed(KILLED), f"failed: {KILLED}"),
            ):
                tune.post_message(message)
                await wait_for(pilot, lambda: whole(status) in shown_whole(app, tune.query_one("#tune-status")))  # noqa: B023 - awaited within this iteration
            assert cut_text(app) == []

            await pilot.press("3")
            runs = app.screen
            await wait_for(pilot, lambda: runs.query_one("#runs-table", DataTable).row_count == 2)
            await pilot.press("space", "down", "space")  # marks widen the first column
            await pilot.pause()
            for table in runs.query(DataTable):
                assert_headers_whole(app, table)
            detail = shown_whole(app, runs.query_one("#run-detail"))  # the cursor's run: what has no column
            assert detail.startswith(f"run {ids[0]}: qwen2.5-14b, created ") and detail.endswith(whole(LONG_LABEL))

            await pilot.press("c")
            await wait_for(pilot, lambda: isinstance(app.screen, CompareScreen) and app.screen.query(DataTable))
            await pilot.pause()
            compare = app.screen.query_one(DataTable)
            header = text_in(app, compare.region).splitlines()[: compare.header_height]
            for column, head in zip(list(compare.columns.values())[1:], app.screen.heads):
                lines = str(column.label).splitlines()  # a long label wraps over the header's lines
                assert " ".join(lines) == head and all(any(line in row for row in header) for line in lines), header
            assert cut_text(app) == []

    asyncio.run(scenario())
