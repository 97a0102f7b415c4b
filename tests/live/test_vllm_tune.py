"""Sim-screened, live-confirmed tuning against vLLM's CPU build at pp 2: `tune --confirm live --launch vllm` tunes
the tiny model on the simulator with the calibrated cpu-host profile, then measures its best config and vLLM's
default, each on a vLLM launched for it, and prints the simulated goodput beside the measured one.

The workload is short (24 requests) and the SLO tight (TTFT 100 ms, TPOT 15 ms at P90), so that the goodput
searches cross the SLO; the two best configs are confirmed, so that at least two servers are launched even
where the simulator's best is vLLM's default (that config is then measured once).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import psutil
import pytest

from pipedeck.console.cli import cli
from pipedeck.console.errors import run_cli
from pipedeck.store import RunStore

pytestmark = pytest.mark.vllm
TINY = str(Path(__file__).parents[1] / "data" / "tiny-chat.toml")
FIXED = ("tp=1", "pp=2", "kv-capacity=8192")


def test_confirm_live_measures_the_two_best_and_vllms_default_at_pp_2_each_on_its_own_server(
    vllm_python, vllm_model, tmp_path, capsys
):
    db = tmp_path / "r.duckdb"
    argv = ["tune", "--model", str(vllm_model / "config.json"), "--hardware", "cpu-host", "--scenario", TINY]
    argv += ["--requests", "24", "--slo", "ttft=100ms,tpot=15ms", "--trials", "4", "--db", str(db)]
    argv += [arg for fix in FIXED for arg in ("--fix", fix)]
    argv += ["--confirm", "live", "--confirm-top", "2", "--launch", "vllm", "--program", str(vllm_python)]
    status = run_cli(cli, [*argv, "--model-path", str(vllm_model), "--json"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    out = json.loads(captured.out)
    rows = out["confirm"]
    # the two best first; vLLM's default once: a row of its own, or a top config's row where the simulator ranks
    # vLLM's default among its two best
    assert [r["role"].split(",")[0] for r in rows[:2]] == ["top 1", "top 2"] and len(rows) in (2, 3)
    assert sum("default" in r["role"] for r in rows) == 1
    assert all(r["error"] is None and r["measured"] > 0 and r["simulated"] > 0 for r in rows)
    assert all(r["config"]["pp"] == 2 for r in rows)
    with RunStore.open(db, read_only=True) as store:
        runs = {r.id: r for r in store.list_runs(study=out["study"])}
        measured = [store.get_run(row["run_id"]).result for row in rows]
    for row, result in zip(rows, measured):
        stored = runs[row["run_id"]]
        assert (stored.label, stored.backend, stored.requests) == ("confirm", "live", 24)
        assert stored.rate == pytest.approx(row["measured"])
        assert result.live is not None and result.live.engine_version.startswith("vllm") and not result.live.failed()
        assert result.config["layer_split"] == row["config"]["layer_split"]
    logs = sorted((tmp_path / "r-servers").iterdir())
    assert len(logs) == len(rows)
    # every process a launched vLLM logged under (API server, engine core, a worker per rank) has ended
    pids = {int(pid) for log in logs for pid in re.findall(r"\bpid=(\d+)", log.read_text())}
    assert len(pids) >= 4 * len(rows) and not [pid for pid in pids if running(pid)]


def running(pid: int) -> bool:
    """Whether `pid` still runs (an exited process its parent has not reaped yet does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
