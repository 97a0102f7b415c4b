"""The console's Live view launching a real llama-server for the run, and stopping it however the run ends."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from textual.widgets import Static

from pipedeck.backends import ServingConfig
from pipedeck.console.tui import PipedeckApp
from pipedeck.console.tui.live import SERVE_LOG
from pipedeck.store import RunStore
from tests.live.test_live_llama import CPU
from tests.tui_support import SIZE, fill, wait_for


def processes_serving(model: Path) -> list[int]:
    """PIDs whose command line names `model` (a launched llama-server)."""
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(model) in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode():
                pids.append(int(entry.name))
        except OSError:
            continue  # gone meanwhile, or not ours to read
    return pids


@pytest.fixture()
def on_path(llama_server_binary, monkeypatch):
    """llama-server findable as the console finds an engine: on PATH."""
    monkeypatch.setenv("PATH", f"{llama_server_binary.parent}{os.pathsep}{os.environ['PATH']}")


@pytest.mark.parametrize("stop_early", [False, True], ids=["to-the-end", "stopped"])
def test_the_console_launches_the_engine_for_a_run_and_stops_it(on_path, tiny_model, tmp_path, stop_early):
    db = tmp_path / "c.duckdb"

    async def scenario() -> None:
        app = PipedeckApp(db, ServingConfig.of(**CPU))
        async with app.run_test(size=SIZE) as pilot:
            live = app.screen
            fill(
                live, {"backend": "live", "scenario": "sharegpt", "rate": "4", "requests": "40" if stop_early else "12"}
            )
            await pilot.pause()
            fill(live, {"server": "llama-server", "target": str(tiny_model)})
            await pilot.press("s")
            if stop_early:
                await wait_for(pilot, lambda: live.stats is not None and live.stats.done >= 2)
                assert processes_serving(tiny_model), "the launched server runs while the run goes"
                await pilot.press("x")
            await wait_for(pilot, lambda: live.worker is None and live.stats is not None, timeout=60)
            status = str(live.query_one("#live-status", Static).content)
            assert ("nothing stored" in status) if stop_early else ("llama.cpp" in status and "stored run 1" in status)

    asyncio.run(scenario())
    assert processes_serving(tiny_model) == []
    assert (tmp_path / SERVE_LOG).stat().st_size > 0  # the server's output, beside the run store
    with RunStore.open(db, read_only=True) as store:
        runs = store.list_runs()
    assert [(r.backend, r.requests) for r in runs] == ([] if stop_early else [("live", 12)])
