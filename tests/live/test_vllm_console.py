"""The console's Live view attached to a real vLLM: its running, waiting and KV cache gauges show what the server's
/metrics page says while a run goes (Textual's pilot drives the view, as a user would, at 80x24).

36 requests with ~1800-token prompts arrive at once; the server's 8192-token KV cache holds four of them,
so for several seconds up to four run, the rest wait and the cache is up to nine tenths full. Few tokens stream back,
which matters on this 2-core host: a burst of short prompts with long answers (about 1,000 tokens a second
from 16 streams) keeps the console's process so busy reading them that the view, and the scrapes of
/metrics it shows, fell seconds behind (looked at in tmux at 80x24: two updates in a 13-second run, every
gauge at 0 throughout).
"""

from __future__ import annotations

import asyncio

import pytest
from textual.widgets import Sparkline, Static

from pipedeck.backends import ServingConfig
from pipedeck.console.tui import PipedeckApp
from pipedeck.store import RunStore
from tests.live.vllm_serving import CONFIG, LONG_PROMPTS
from tests.tui_support import SMALL, fill

pytestmark = pytest.mark.vllm


def test_the_live_view_shows_vllms_running_waiting_and_kv_gauges(vllm_server, vllm_model, tmp_path):
    db = tmp_path / "c.duckdb"

    async def scenario() -> None:
        app = PipedeckApp(db, ServingConfig.from_dict({"model": str(vllm_model / "config.json"), **CONFIG}))
        async with app.run_test(size=SMALL) as pilot:
            live = app.screen
            fill(live, {"backend": "live"})
            await pilot.pause()
            fill(
                live,
                {"scenario-file": str(LONG_PROMPTS), "rate": "1000", "requests": "36", "target": vllm_server.url},
            )
            await pilot.press("s")
            while live.worker is not None or live.stats is None:  # once a second: repainting more often takes the
                await pilot.pause(1.0)  # run's thread's time
            status = str(live.query_one("#live-status", Static).content)
            assert live.stats.done == 36 and "stored run 1" in status and "vllm 0.32.0" in status, status
            drawn = {key: live.query_one(f"#s-{key}", Sparkline).data for key in ("running", "waiting", "kv")}
            assert drawn == {key: list(live.stats.history[key]) for key in drawn}  # the sparklines the view draws
            assert 1 <= max(drawn["running"]) <= 4  # vllm:num_requests_running: what the KV cache holds
            assert max(drawn["waiting"]) >= 1  # vllm:num_requests_waiting: the rest
            assert 0 < max(drawn["kv"]) <= 1  # vllm:kv_cache_usage_perc: a share of the cache (0.48-0.94 seen)
            assert str(live.query_one("#v-kv", Static).content) == "0.0%"  # at the end: a figure, never n/a

    asyncio.run(scenario())
    with RunStore.open(db, read_only=True) as store:
        (row,) = store.list_runs()
    assert row.backend == "live" and row.requests == 36
