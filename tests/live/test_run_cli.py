"""`pipedeck run --backend live` against the mock server: the simulator's JSON keys, the server's metrics, the store."""

from __future__ import annotations

import asyncio
import json
import socket
import time

import pytest

from pipedeck.backends import footprint
from pipedeck.backends.live import LoadOptions, run_scenario
from pipedeck.backends.live.mock_server import MOCK_ERROR, Behaviour, MockServer
from pipedeck.console.cli import cli
from pipedeck.console.comparison import compare_sections, comparison
from pipedeck.console.errors import run_cli
from pipedeck.console.run_cells import row_cells
from pipedeck.scenarios import load_scenario
from pipedeck.store import RunStore
from tests.mock_program import mock_program


def failing_mock(fault: str, every: int = 1):
    """The mock server as a program, answering every `every`-th completion with `fault`; its URL."""
    return mock_program("--fault", fault, "--fault-every", str(every))


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # free once closed: nothing listens there


def cli_json(capsys, argv: list[str]) -> dict:
    assert run_cli(cli, argv) == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_a_live_run_prints_the_simulators_keys_and_the_servers_metrics_and_is_stored(capsys, tmp_path, mock_server):
    db = tmp_path / "runs.duckdb"
    live = cli_json(
        capsys,
        [
            "run",
            "--backend",
            "live",
            "--endpoint",
            mock_server,
            "--scenario",
            "sharegpt",
            "--rate",
            "30",
            "--requests",
            "20",
            "--db",
            str(db),
            "--json",
        ],
    )
    sim = cli_json(
        capsys, ["simulate", "--scenario", "sharegpt", "--rate", "30", "--requests", "20", "--no-store", "--json"]
    )
    assert set(sim) | {"live", "server_metrics"} == set(live)
    assert live["requests"] == 20 and live["live"]["failed"] == 0 and live["backend"] == "live"
    assert live["server_metrics"]["engine"] == "llamacpp" and "kv_usage" in live["server_metrics"]["missing"]
    assert live["steps"] is None and live["bubble_ratio"] is None  # not measurable on a live server: absent, not 0
    with RunStore.open(db) as store:
        stored = store.get_run(live["run_id"]).result
    assert stored.backend == "live" and len(stored.live.requests) == 20 and stored.spans == []
    assert stored.live.engine_version == live["live"]["engine_version"] == "llama.cpp b0-mock"


def test_a_live_runs_table_names_the_server_and_what_its_metrics_lack(capsys, mock_server):
    assert (
        run_cli(
            cli,
            [
                "run",
                "--backend",
                "live",
                "--endpoint",
                mock_server,
                "--scenario",
                "sharegpt",
                "--requests",
                "4",
                "--no-store",
            ],
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "live: sent 4, failed 0, unsent 0" in out and "server: llama.cpp b0-mock" in out
    assert "server metrics: llamacpp; missing: kv_usage" in " ".join(out.split())


def test_a_live_run_without_a_server_is_one_line_and_exit_1_bad_flags_exit_2(capsys):
    assert (
        run_cli(cli, ["run", "--backend", "live", "--endpoint", "http://127.0.0.1:9", "--requests", "2", "--no-store"])
        == 1
    )
    assert capsys.readouterr().err.startswith("pipedeck: error: endpoint: http://127.0.0.1:9/v1/models lists no model")
    assert (
        run_cli(cli, ["run", "--backend", "live", "--timeline", "t.json", "--endpoint", "http://x", "--no-store"]) == 2
    )
    assert "draws no per-rank timeline" in capsys.readouterr().err


def test_compare_puts_a_live_run_beside_a_simulated_one(capsys, tmp_path, mock_server):
    db = str(tmp_path / "runs.duckdb")
    common = ["--scenario", "sharegpt", "--rate", "30", "--requests", "10", "--db", db, "--json"]
    live = cli_json(capsys, ["run", "--backend", "live", "--endpoint", mock_server, *common])["run_id"]
    sim = cli_json(capsys, ["run", "--backend", "sim", *common])["run_id"]
    out = tmp_path / "compare.html"
    assert run_cli(cli, ["compare", str(sim), str(live), "--db", db, "--out", str(out)]) == 0, capsys.readouterr().err
    assert "n/a" in out.read_text()  # the live run's steps and bubble ratio: not measured, not 0
    with RunStore.open(db, read_only=True) as store:
        stored = [store.get_run(sim), store.get_run(live)]
    sections = {s.key: s for s in compare_sections(comparison(stored), None, 1000)}
    assert list(sections) == ["cdf", "breakdown", "metrics", "server", "timeline"]
    live_name = f"run {live} "
    breakdown_names = {str(x) for trace in sections["breakdown"].figure.data for x in trace.x if isinstance(x, str)}
    assert not any(name.startswith(live_name) for name in breakdown_names) and live_name in sections["breakdown"].note
    gauges = sections["server"].figure
    assert {a.text for a in gauges.layout.annotations} == {"running requests", "waiting requests"}  # llama.cpp: no KV
    assert {trace.name for trace in gauges.data} == {gauges.data[0].name} and gauges.data[0].name.startswith(live_name)
    only_live = [s.key for s in compare_sections(comparison([stored[1], stored[1]]), None, 1000)]
    assert only_live == ["cdf", "metrics", "server"]


def test_a_live_run_with_failed_requests_is_stored_with_them_and_listed_as_failed(tmp_path):
    async def main():
        async with MockServer(Behaviour(fault="http500", fault_every=3)) as url:
            return await asyncio.to_thread(
                run_scenario,
                load_scenario("sharegpt"),
                url,
                rate=50.0,
                num_requests=9,
                options=LoadOptions(metrics_interval_s=None),
            )

    result = asyncio.run(main())
    with RunStore.open(tmp_path / "runs.duckdb") as store:
        run_id = store.save_run(result)
        (row,) = store.list_runs()
        stored = store.get_run(run_id).result
    assert (row.requests, row.failed) == (6, 3)  # served and failed: requests 0, 3 and 6 got HTTP 500
    assert [r.error for r in stored.live.failed()] == [result.live.failed()[0].error] * 3
    assert row_cells(row)[-1] == "live 3 failed"


def run_live(endpoint: str, db, *extra: str) -> list[str]:
    return [
        "run",
        "--backend",
        "live",
        "--endpoint",
        endpoint,
        "--served-model",
        "mock",
        "--scenario",
        "sharegpt",
        "--rate",
        "50",
        "--requests",
        "6",
        "--db",
        str(db),
        *extra,
    ]


def test_a_run_against_a_closed_port_is_refused_by_the_backend_s_check_before_any_request(capsys, tmp_path):
    """The served model named or not, nothing listening is found by check() before a request is sent."""
    db, port = tmp_path / "runs.duckdb", closed_port()
    assert run_cli(cli, run_live(f"http://127.0.0.1:{port}", db)) == 1  # a dead server: a failure while running
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        f"pipedeck: error: endpoint: http://127.0.0.1:{port}/v1/models lists no model (ConnectError: "
    ), err
    assert not db.exists(), "no run: nothing stored"


def test_a_run_where_every_request_gets_http_500_fails_with_the_servers_whole_message(capsys, tmp_path):
    db = tmp_path / "runs.duckdb"
    with failing_mock("http500") as url:
        assert run_cli(cli, run_live(url, db, "--json")) == 1  # served nothing: a failure while running
    captured = capsys.readouterr()
    assert captured.err == "pipedeck: error: 0 of 6 requests served: 6 http 500 (stored as run 1)\n"
    out = json.loads(captured.out)
    assert out["live"]["errors"] == {"http 500": 6} and out["run_id"] == 1
    assert out["live"]["first_error"] == f"http 500: {MOCK_ERROR}"  # the message whole, not cut at 200 characters


def test_a_run_whose_every_stream_is_not_json_fails_in_one_line(capsys, tmp_path):
    with failing_mock("malformed") as url:
        assert (
            run_cli(cli, run_live(url, tmp_path / "runs.duckdb", "--no-store")) == 1
        )  # served nothing: a failure while running
    assert capsys.readouterr().err == "pipedeck: error: 0 of 6 requests served: 6 malformed stream\n"


def test_a_run_whose_streams_stall_past_the_stall_timeout_fails_in_one_line(capsys, tmp_path):
    with failing_mock("stall") as url:
        assert run_cli(cli, run_live(url, tmp_path / "runs.duckdb", "--stall-timeout", "0.5", "--no-store")) == 1
    assert capsys.readouterr().err == "pipedeck: error: 0 of 6 requests served: 6 stalled\n"
    assert run_cli(cli, ["run", "--backend", "sim", "--stall-timeout", "1", "--no-store"]) == 2
    assert "--stall-timeout" in capsys.readouterr().err  # a simulated run streams nothing


def test_a_run_where_some_requests_fail_warns_in_one_line_and_exits_0(capsys, tmp_path):
    with failing_mock("http500", every=3) as url:
        assert run_cli(cli, run_live(url, tmp_path / "runs.duckdb", "--json")) == 0
    captured = capsys.readouterr()
    assert captured.err == "pipedeck: warning: 4 of 6 requests served: 2 http 500\n"
    assert json.loads(captured.out)["live"]["errors"] == {"http 500": 2}


def test_a_live_run_of_more_requests_than_memory_holds_is_refused_as_a_simulation_is(capsys, monkeypatch):
    monkeypatch.setattr(footprint, "available_bytes", lambda: 20e9)
    for backend in ("live", "sim"):
        argv = [
            "run",
            "--backend",
            backend,
            "--scenario",
            "sharegpt",
            "--requests",
            "1000000000",
            "--no-store",
            *(["--endpoint", f"http://127.0.0.1:{closed_port()}", "--served-model", "mock"] * (backend == "live")),
        ]
        start = time.process_time()
        assert run_cli(cli, argv) == 2
        assert time.process_time() - start < 5  # refused before drawing a billion requests
        err = capsys.readouterr().err
        assert (
            err.startswith("pipedeck: error: requests: 1000000000 requests need about ") and len(err.splitlines()) == 1
        )
        assert err.endswith(" more than the 20.0 GB available; use fewer requests\n"), err
    with pytest.raises(footprint.FootprintError, match=r"^requests: 1000000000 requests need about"):
        run_scenario(load_scenario("sharegpt"), "http://127.0.0.1:9", num_requests=10**9)  # the Python API too


def test_a_live_run_and_show_print_the_prefix_cache_hit_rate_and_fresh_prompts_is_for_live_runs(capsys, tmp_path):
    db = tmp_path / "runs.duckdb"
    with mock_program() as url:
        for rate in ("20", "40"):
            assert run_cli(cli, run_live(url, db, "--rate", rate)) == 0
        assert run_cli(cli, run_live(url, db, "--rate", "80", "--fresh-prompts")) == 0
    out = capsys.readouterr().out
    assert "prefix cache: hit rate 0.0% (from usage)" in out  # the first run: nothing cached yet
    assert "prefix cache: hit rate 100.0% (from usage)" in out  # the second: the same prompts
    assert out.count("prefix cache: hit rate 0.0% (from usage)") == 2  # the third: fresh prompts
    assert run_cli(cli, ["show", "2", "--db", str(db)]) == 0
    assert "prefix cache: hit rate 100.0% (from usage)" in capsys.readouterr().out
    assert run_cli(cli, ["run", "--backend", "sim", "--fresh-prompts", "--no-store"]) == 2
    assert "--fresh-prompts" in capsys.readouterr().err


def test_a_live_run_without_a_config_records_what_the_server_says_not_pipedeck_s_defaults(
    capsys, tmp_path, mock_server
):
    db = str(tmp_path / "runs.duckdb")
    common = [
        "--backend",
        "live",
        "--endpoint",
        mock_server,
        "--scenario",
        "sharegpt",
        "--requests",
        "4",
        "--db",
        db,
        "--json",
    ]
    first, second = (cli_json(capsys, ["run", *common]) for _ in range(2))
    assert first["config"] == {"model": "mock", "engine": "llama.cpp"}  # /v1/models' name, /props' engine; no more
    with RunStore.open(db, read_only=True) as store:
        rows = {row.id: row for row in store.list_runs()}
    row = rows[first["run_id"]]
    assert (row.model, row.hardware, row.tp, row.pp) == ("mock", None, None, None)
    assert row_cells(row)[3:5] == ("mock", "")  # no tp×pp made up
    out = tmp_path / "compare.html"
    assert run_cli(cli, ["compare", str(first["run_id"]), str(second["run_id"]), "--db", db, "--out", str(out)]) == 0, (
        capsys.readouterr().err
    )
    assert "deepseek" not in out.read_text().lower()
    capsys.readouterr()
    given = cli_json(
        capsys, ["run", *common, "--model", "qwen2.5-14b", "--hardware", "a100-40g-pcie", "--tp", "1", "--pp", "1"]
    )
    assert given["config"]["model"] == "qwen2.5-14b" and given["config"]["tp"] == 1  # a config given is recorded
