"""The console's Live view attached to a real vLLM: its running, waiting and KV cache gauges show what the server's
/metrics page says while a run goes (Textual's pilot drives the view, as a user would, at 80x24).

48 requests arrive at once while the server runs at most 16 (`--max-num-seqs`), so for a few seconds 16 run
and the rest wait, and their prompts and ~128-token answers fill part of its 8192-token KV cache. The view
scrapes /metrics about once a second; on this busy 2-core host a scrape during the run can take seconds to
come back (the API server streams the answers first), which is why the run lasts several.
"""

from __future__ import annotations

import asyncio

import pytest
from textual.widgets import Static

from pipedeck.backends import ServingConfig
from pipedeck.console.tui import PipedeckApp
from pipedeck.store import RunStore
from tests.live.vllm_serving import CHAT, CONFIG
from tests.tui_support import SMALL, fill, wait_for

pytestmark = pytest.mark.vllm


def test_the_live_view_shows_vllms_running_waiting_and_kv_gauges(vllm_server, vllm_model, tmp_path):
    db = tmp_path / "c.duckdb"
    shown: dict[str, set[str]] = {"running": set(), "waiting": set(), "kv": set()}

    async def scenario() -> None:
        app = PipedeckApp(db, ServingConfig.from_dict({"model": str(vllm_model / "config.json"), **CONFIG}))
        async with app.run_test(size=SMALL) as pilot:
            live = app.screen
            fill(live, {"backend": "live"})
            await pilot.pause()
            fill(
                live,
                {
                    "scenario-file": str(CHAT),
                    "rate": "1000",
                    "requests": "48",
                    "target": vllm_server.url,
                },
            )
            await pilot.press("s")

            def seen() -> bool:
                for key in shown:
                    shown[key].add(str(live.query_one(f"#v-{key}", Static).content))
                return live.worker is None and live.stats is not None

            await wait_for(pilot, seen, timeout=120)
            stats, status = live.stats, str(live.query_one("#live-status", Static).content)
            assert stats.done == 48 and "stored run 1" in status, status
            assert 1 <= max(stats.history["running"]) <= CONFIG["max_running"]  # vllm:num_requests_running
            assert max(stats.history["waiting"]) >= 1  # vllm:num_requests_waiting: beyond the 16 running
            assert 0 < max(stats.history["kv"]) < 1  # vllm:kv_cache_usage_perc, a share of the cache
            assert stats.last.running == 0 and stats.last.kv_used is not None

    asyncio.run(scenario())
    assert shown["running"] - {"-", "0"} and shown["waiting"] - {"-", "0"}  # figures the view showed
    assert any(text.endswith("%") and text != "0.0%" for text in shown["kv"])  # a figure, never n/a
    with RunStore.open(db, read_only=True) as store:
        (row,) = store.list_runs()
    assert row.backend == "live" and row.requests == 48
