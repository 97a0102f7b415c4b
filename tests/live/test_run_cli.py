"""`pipedeck run --backend live` against the mock server: the simulator's JSON keys, the server's metrics, the store."""

from __future__ import annotations

import json

from pipedeck.console.cli import cli
from pipedeck.console.errors import run_cli
from pipedeck.store import RunStore


def cli_json(capsys, argv: list[str]) -> dict:
    assert run_cli(cli, argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_a_live_run_prints_the_simulators_keys_and_the_servers_metrics_and_is_stored(capsys, tmp_path, mock_server):
    db = tmp_path / "runs.duckdb"
    live = cli_json(capsys, ["run", "--backend", "live", "--endpoint", mock_server, "--scenario", "sharegpt",
                             "--rate", "30", "--requests", "20", "--db", str(db), "--json"])
    sim = cli_json(capsys, ["simulate", "--scenario", "sharegpt", "--rate", "30", "--requests", "20", "--no-store",
                            "--json"])
    assert set(sim) | {"live", "server_metrics"} == set(live)
    assert live["requests"] == 20 and live["live"]["failed"] == 0 and live["backend"] == "live"
    assert live["server_metrics"]["engine"] == "llamacpp" and "kv_usage" in live["server_metrics"]["missing"]
    assert live["steps"] is None and live["bubble_ratio"] is None  # not measurable on a live server: absent, not 0
    with RunStore.open(db) as store:
        stored = store.get_run(live["run_id"]).result
    assert stored.backend == "live" and len(stored.live.requests) == 20 and stored.spans == []


def test_a_live_run_without_a_server_is_one_line(capsys):
    assert run_cli(cli, ["run", "--backend", "live", "--endpoint", "http://127.0.0.1:9", "--requests", "2",
                         "--no-store"]) == 2
    assert capsys.readouterr().err.startswith("pipedeck: error: endpoint: http://127.0.0.1:9/v1/models lists no model")
    assert run_cli(cli, ["run", "--backend", "live", "--timeline", "t.json", "--endpoint", "http://x", "--no-store"]) == 2
    assert "draws no per-rank timeline" in capsys.readouterr().err


def test_compare_puts_a_live_run_beside_a_simulated_one(capsys, tmp_path, mock_server):
    db = str(tmp_path / "runs.duckdb")
    common = ["--scenario", "sharegpt", "--rate", "30", "--requests", "10", "--db", db, "--json"]
    live = cli_json(capsys, ["run", "--backend", "live", "--endpoint", mock_server, *common])["run_id"]
    sim = cli_json(capsys, ["run", "--backend", "sim", *common])["run_id"]
    out = tmp_path / "compare.html"
    assert run_cli(cli, ["compare", str(sim), str(live), "--db", db, "--out", str(out)]) == 0, capsys.readouterr().err
    assert "n/a" in out.read_text()  # the live run's steps and bubble ratio: not measured, not 0
