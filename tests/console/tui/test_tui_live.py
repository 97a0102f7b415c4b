"""The console's Live view: a paced simulated run fills the metrics and the pipeline strip and is stored;
a run attached to a server's endpoint shows its gauges as the server reports them."""

from __future__ import annotations

import asyncio
import time

import pytest
from textual.widgets import Static

from pipedeck.backends import footprint
from pipedeck.backends.live.mock_profiler import MockProfiler
from pipedeck.backends.live.mock_server import Behaviour, MockServer
from pipedeck.console.tui import PipedeckApp
from pipedeck.console.tui.live import NO_TIMELINE, LiveScreen
from pipedeck.console.tui.widgets import PipelineStrip
from pipedeck.store import RunStore
from tests.tui_support import QWEN, SIZE, fill, notifications, wait_for

SHORT = {"scenario": "short-4k", "requests": "8"}


def test_a_run_at_max_speed_fills_metrics_and_timeline_and_is_stored(tmp_path):
    db = tmp_path / "c.duckdb"

    async def scenario() -> None:
        app = PipedeckApp(db, QWEN)
        async with app.run_test(size=SIZE) as pilot:
            live = app.screen
            assert isinstance(live, LiveScreen)
            fill(live, {**SHORT, "speed": "max"})
            await pilot.press("s")
            await wait_for(pilot, lambda: live.worker is None and live.stats is not None)
            stats = live.stats
            assert stats.done == 8 and stats.last.running == 0
            assert len(stats.history["throughput"]) > 2 and max(stats.history["kv"]) > 0
            assert str(live.query_one("#v-done", Static).content) == "8/8"
            start, end, spans = live.query_one(PipelineStrip)._view
            assert end > start and len(spans) == 2 and all(spans)
            assert "stored run 1" in str(live.query_one("#live-status", Static).content)

    asyncio.run(scenario())
    with RunStore.open(db, read_only=True) as store:
        (row,) = store.list_runs()
        assert row.requests == 8 and (row.model, row.tp, row.pp) == ("qwen2.5-14b", 2, 2)
        assert store.count_spans(row.id) > 0


def test_cancelling_a_paced_run_stores_nothing(tmp_path):
    db = tmp_path / "c.duckdb"

    async def scenario() -> None:
        app = PipedeckApp(db, QWEN)
        async with app.run_test(size=SIZE) as pilot:
            live = app.screen
            fill(live, {**SHORT, "speed": "1"})
            await pilot.press("s")
            await wait_for(pilot, lambda: live.stats is not None and live.stats.now >= 1.0)
            # the run's controls show what it runs until it ends (the SLO stays editable); keys still work
            assert live.query_one("#config").disabled and not live.query_one("#slo").disabled
            await pilot.press("x")
            await wait_for(pilot, lambda: live.worker is None)
            assert live.stats.done < 8 and not live.query_one("#config").disabled
            assert "nothing stored" in str(live.query_one("#live-status", Static).content)

    asyncio.run(scenario())
    with RunStore.open(db, read_only=True) as store:
        assert store.list_runs() == []
        assert [
            store.con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
            for table in ("runs", "run_ranks", "requests", "spans")
        ] == [0, 0, 0, 0]


def test_a_backend_error_is_a_notification_not_a_crash(tmp_path):
    async def scenario() -> None:
        app = PipedeckApp(tmp_path / "c.duckdb", QWEN.replace(kv_capacity=1000))  # no 4k prompt fits
        async with app.run_test(size=SIZE) as pilot:
            live = app.screen
            fill(live, {**SHORT, "speed": "max"})
            await pilot.press("s")
            await wait_for(pilot, lambda: live.worker is None and notifications(app))
            assert any(sev == "error" and msg.startswith("kv_capacity: request") for sev, msg in notifications(app))
            assert app.is_running

    asyncio.run(scenario())


def test_a_run_attached_to_a_server_shows_its_gauges_and_is_stored_as_live(tmp_path):
    db = tmp_path / "c.duckdb"

    async def scenario() -> None:
        async with MockServer(Behaviour(first_token_s=0.05, token_s=0.02)) as url:
            app = PipedeckApp(db, QWEN)
            async with app.run_test(size=SIZE) as pilot:
                live = app.screen
                fill(live, {"backend": "live"})
                await pilot.pause()
                assert live.query_one("#live-server").display and live.query_one("#speed").disabled
                assert live.query_one(PipelineStrip).placeholder == NO_TIMELINE
                fill(live, {**SHORT, "target": url})
                await pilot.press("s")
                await wait_for(pilot, lambda: live.worker is None and live.stats is not None)
                stats = live.stats
                assert stats.done == 8 and stats.last.running == 0 and stats.last.kv_used is None
                assert max(stats.history["running"]) >= 1  # llamacpp:requests_processing while requests streamed
                assert not stats.history["kv"] and str(live.query_one("#v-kv", Static).content) == "n/a"
                assert live.query_one(PipelineStrip)._view[2] == []  # no per-rank rows for a server
                status = str(live.query_one("#live-status", Static).content)
                assert "s elapsed" in status and "llama.cpp b0-mock" in status and "stored run 1" in status
                assert "prefix cache hit rate 0.0%" in status  # prompts the mock had not seen

    asyncio.run(scenario())
    with RunStore.open(db, read_only=True) as store:
        (row,) = store.list_runs()
        assert row.backend == "live" and row.requests == 8 and store.count_spans(row.id) == 0


def test_a_profiled_live_run_draws_its_measured_timeline_when_it_ends(tmp_path):
    db, folder = tmp_path / "c.duckdb", tmp_path / "profile"
    folder.mkdir()

    async def scenario() -> None:
        async with MockServer(Behaviour(token_s=0.002), profiler=MockProfiler(folder)) as url:
            app = PipedeckApp(db, QWEN)
            async with app.run_test(size=SIZE) as pilot:
                live = app.screen
                fill(live, {"backend": "live"})
                await pilot.pause()
                fill(live, {**SHORT, "target": url, "profile": str(folder)})
                await pilot.press("s")
                await wait_for(pilot, lambda: live.worker is None and live.stats is not None)
                start, end, spans = live.query_one(PipelineStrip)._view
                assert end == live.stats.now > start and len(spans) == 2 and all(spans)  # both ranks, measured
                assert {s.kind for s in spans[1]} >= {"recv", "decode"}
                assert "bubble" in str(live.query_one("#live-status", Static).content)

    asyncio.run(scenario())
    with RunStore.open(db, read_only=True) as store:
        (row,) = store.list_runs()
        assert row.bubble_ratio is not None and store.count_spans(row.id) > 0


def test_a_live_run_of_a_config_setting_a_knob_no_server_reads_is_refused_before_it_starts(tmp_path):
    """As `pipedeck run` refuses it: the run would be stored as sticky_decodes=on, which no engine's launch sets."""

    async def scenario() -> None:
        app = PipedeckApp(tmp_path / "c.duckdb", QWEN.replace(sticky_decodes=True))
        async with app.run_test(size=SIZE) as pilot:
            live = app.screen
            fill(live, {**SHORT, "backend": "live", "target": "http://127.0.0.1:9"})  # nothing listens there
            await pilot.press("s")
            await wait_for(pilot, lambda: notifications(app))
            ((severity, line),) = notifications(app)
            assert severity == "error"
            assert line.startswith("sticky_decodes: set to on, but the live backend does not read it")
            await wait_for(pilot, lambda: live.worker is None)

    asyncio.run(scenario())


def test_a_live_run_without_an_endpoint_is_refused_with_one_line(tmp_path):
    async def scenario() -> None:
        app = PipedeckApp(tmp_path / "c.duckdb", QWEN)
        async with app.run_test(size=SIZE) as pilot:
            live = app.screen
            fill(live, {**SHORT, "backend": "live"})
            await pilot.press("s")
            await wait_for(pilot, lambda: notifications(app))
            assert notifications(app) == [("error", "endpoint: give the server's URL, e.g. http://127.0.0.1:8080")]
            assert live.worker is None

    asyncio.run(scenario())


@pytest.mark.parametrize("backend", ["sim", "live"])
def test_a_run_of_more_requests_than_memory_holds_is_refused_in_one_line_before_any_is_drawn(
    tmp_path, monkeypatch, backend
):
    monkeypatch.setattr(footprint, "available_bytes", lambda: 20e9)

    async def scenario() -> None:
        app = PipedeckApp(tmp_path / "c.duckdb", QWEN)
        async with app.run_test(size=SIZE) as pilot:
            live = app.screen
            fill(
                live,
                {"scenario": "short-4k", "requests": "1000000000", "backend": backend, "target": "http://127.0.0.1:9"},
            )
            start = time.process_time()
            await pilot.press("s")
            await wait_for(pilot, lambda: notifications(app))
            assert time.process_time() - start < 5  # CPU seconds: not the CPU-minutes drawing them would take
            ((severity, message),) = notifications(app)
            assert severity == "error" and message.startswith("requests: 1000000000 requests need about ")
            assert message.endswith("more than the 20.0 GB available; use fewer requests")
            assert live.worker is None

    asyncio.run(scenario())
