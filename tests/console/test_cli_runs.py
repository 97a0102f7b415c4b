"""`pipedeck simulate` stores its run; `pipedeck runs` lists runs; `pipedeck show` shows one."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipedeck.console.cli import cli
from pipedeck.console.errors import run_cli
from pipedeck.store import RunStore
from tests.run_kinds import store_awkward_runs

QWEN = ["--model", "qwen2.5-14b", "--hardware", "a100-40g-pcie", "--tp", "2", "--pp", "2"]
SHORT = ["simulate", "--scenario", "short-4k", "--requests", "8", *QWEN]


@pytest.fixture(autouse=True)
def wide_terminal(monkeypatch):
    """Rich tables as wide as a desktop terminal, so cells are not folded."""
    monkeypatch.setenv("COLUMNS", "200")


def run(capsys, argv):
    """Run the CLI in-process; return (status, stdout, stderr)."""
    status = run_cli(cli, [str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def assert_one_line_error(status, out, err, start, *, exit_status=2):
    """One line on stderr starting with `start`, nothing on stdout, and the exit status (2: bad input)."""
    assert status == exit_status
    assert out == ""
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"pipedeck: error: {start}"), err
    assert "Traceback" not in err


# -- simulate stores its run ------------------------------------------------------------------------


def test_simulate_stores_the_run_with_its_timeline(capsys, db):
    status, out, err = run(capsys, [*SHORT, "--db", db, "--label", "baseline"])
    assert status == 0, err
    assert out.splitlines()[-1] == f"stored run 1 in {db}"
    with RunStore.open(db) as store:
        [row] = store.list_runs()
        stored = store.get_run(row.id)
    assert (row.id, row.label, row.scenario, row.mode, row.model) == (1, "baseline", "short-4k", "cpp", "qwen2.5-14b")
    assert stored.result.spans, "the timeline is recorded when the run is stored"
    assert len(stored.result.records) == 8


def test_simulate_json_gains_the_run_id(capsys, db):
    status, out, err = run(capsys, [*SHORT, "--db", db, "--json"])
    assert status == 0, err
    data = json.loads(out)
    assert data["run_id"] == 1
    with RunStore.open(db) as store:
        stored = store.get_run(1)
    assert data["config"] == stored.result.config
    assert data["ttft_s"] == stored.result.summary()["ttft_s"]
    status, out, _ = run(capsys, [*SHORT, "--db", db, "--json", "--mode", "vpp"])
    assert json.loads(out)["run_id"] == 2


def test_simulate_no_store_writes_nothing(capsys, db, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, out, err = run(capsys, [*SHORT, "--db", db, "--no-store"])
    assert status == 0, err
    assert "stored run" not in out
    status, out, _ = run(capsys, [*SHORT, "--no-store", "--json"])
    assert json.loads(out)["run_id"] is None
    assert list(tmp_path.iterdir()) == []


def test_simulate_defaults_to_pipedeck_db_env(capsys, tmp_path, monkeypatch):
    target = tmp_path / "from-env.duckdb"
    monkeypatch.setenv("PIPEDECK_DB", str(target))
    status, out, err = run(capsys, SHORT)
    assert status == 0, err
    assert out.splitlines()[-1] == f"stored run 1 in {target}"


def test_simulate_defaults_to_the_working_directory(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("PIPEDECK_DB")
    monkeypatch.chdir(tmp_path)
    status, out, err = run(capsys, SHORT)
    assert status == 0, err
    assert (tmp_path / "pipedeck.duckdb").is_file()
    assert out.splitlines()[-1] == f"stored run 1 in {tmp_path / 'pipedeck.duckdb'}"


@pytest.mark.parametrize("content", [b"not a duckdb file\n" * 100, b""])
def test_simulate_with_garbage_db_fails_fast_and_leaves_it(capsys, tmp_path, content):
    path = tmp_path / "garbage.duckdb"
    path.write_bytes(content)
    trace = tmp_path / "trace.json"
    status, out, err = run(capsys, [*SHORT, "--db", path, "--timeline", trace])
    assert_one_line_error(status, out, err, f"db: {path} is not a pipedeck DuckDB store")
    assert path.read_bytes() == content
    assert not trace.exists(), "the store is checked before any work"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["garbage.duckdb"]


def test_simulate_into_a_missing_folder_is_one_line(capsys, tmp_path):
    status, out, err = run(capsys, [*SHORT, "--db", tmp_path / "nope" / "runs.duckdb"])
    assert_one_line_error(status, out, err, "db: folder ")


def test_a_failed_run_creates_no_store_and_leaves_an_existing_one_untouched(capsys, db):
    dead = [
        "run",
        "--backend",
        "live",
        "--endpoint",
        "http://127.0.0.1:9",
        "--scenario",
        "short-4k",
        "--requests",
        "2",
        "--db",
        db,
    ]
    assert_one_line_error(*run(capsys, dead), "endpoint: http://127.0.0.1:9/v1/models lists no model", exit_status=1)
    assert not db.exists(), "nothing to store: no store file"
    run(capsys, [*SHORT, "--db", db])
    stored = db.read_bytes()
    assert_one_line_error(*run(capsys, dead), "endpoint: http://127.0.0.1:9/v1/models lists no model", exit_status=1)
    assert db.read_bytes() == stored


# -- runs --------------------------------------------------------------------------------------------------


def test_runs_lists_stored_runs_newest_first(capsys, db):
    run(capsys, [*SHORT, "--db", db, "--label", "first"])
    run(capsys, [*SHORT, "--db", db, "--mode", "vpp"])
    status, out, err = run(capsys, ["runs", "--db", db])
    assert status == 0, err
    assert f"runs in {db}" in out
    lines = [line for line in out.splitlines() if "short-4k" in line]
    assert len(lines) == 2
    assert lines[0].split()[0] == "2" and lines[1].split()[0] == "1"
    assert "vpp 2×2 8k" in lines[0] and "cpp 2×2 8k" in lines[1] and "first" in lines[1]
    assert "qwen2.5-14b" in lines[0]  # the hardware is in --json and `show`


def test_runs_json_and_filters(capsys, db):
    run(capsys, [*SHORT, "--db", db])
    run(capsys, [*SHORT, "--db", db, "--mode", "vpp"])
    run(capsys, ["simulate", "--scenario", "azure-conv", "--requests", "10", "--rate", "2", *QWEN, "--db", db])
    status, out, _ = run(capsys, ["runs", "--db", db, "--json"])
    rows = json.loads(out)
    assert [r["id"] for r in rows] == [3, 2, 1]
    assert rows[0]["rate"] == 2 and rows[0]["scenario"] == "azure-conv"
    assert set(rows[0]) >= {"created_at", "ttft_p90_s", "tpot_p90_s", "throughput_tok_s", "makespan_s", "bubble_ratio"}
    for argv, ids in [
        (["--mode", "vpp"], [2]),
        (["--scenario", "short-4k"], [2, 1]),
        (["--limit", "1"], [3]),
        (["--study", "nope"], []),
    ]:
        status, out, err = run(capsys, ["runs", "--db", db, "--json", *argv])
        assert status == 0, err
        assert [r["id"] for r in json.loads(out)] == ids, argv


def test_runs_with_no_runs_says_so(capsys, db):
    run(capsys, [*SHORT, "--db", db, "--no-store"])
    RunStore.open(db).close()
    status, out, _ = run(capsys, ["runs", "--db", db])
    assert status == 0 and out.strip() == f"no runs in {db}"


def test_a_study_filter_that_matches_nothing_names_the_studies_there(capsys, db):
    with RunStore.open(db) as store:
        for name in ("prod-2k", "prod-8k"):
            store.save_study(name, scenario="azure-conv", objective="goodput", slo={}, settings={}, storage="-")
    status, out, _ = run(capsys, ["runs", "--db", db, "--study", "prod"])
    assert status == 0 and out.strip() == f"no runs of study prod in {db}; studies there: prod-2k, prod-8k"
    status, out, _ = run(capsys, ["runs", "--db", db, "--mode", "vpp"])
    assert status == 0 and out.strip() == f"no runs in {db} match --mode vpp"


@pytest.mark.parametrize(
    "argv, start",
    [
        (["runs", "--mode", "nope"], "Invalid value for '--mode'"),
        (["runs", "--limit", "0"], "Invalid value for '--limit'"),
    ],
)
def test_runs_bad_options_are_one_line(capsys, argv, start):
    assert_one_line_error(*run(capsys, argv), start)


def test_runs_on_a_missing_or_garbage_store_is_one_line(capsys, tmp_path):
    missing = tmp_path / "missing.duckdb"
    assert_one_line_error(*run(capsys, ["runs", "--db", missing]), f"db: no store at {missing}")
    assert not missing.exists()
    garbage = tmp_path / "garbage.duckdb"
    garbage.write_bytes(b"\x00garbage" * 1000)
    assert_one_line_error(*run(capsys, ["runs", "--db", garbage]), f"db: {garbage} is not a pipedeck DuckDB store")
    assert garbage.read_bytes() == b"\x00garbage" * 1000


# -- show ----------------------------------------------------------------------------------------------------


def test_show_prints_the_stored_run(capsys, db):
    _, simulated, _ = run(capsys, [*SHORT, "--db", db, "--label", "baseline"])
    status, out, err = run(capsys, ["show", "1", "--db", db])
    assert status == 0, err
    assert out.startswith("run 1  ")
    assert "label baseline" in out.splitlines()[0]
    for text in (
        "short-4k",
        "qwen2.5-14b on a100-40g-pcie",
        "tp=2 pp=2",
        "mode=cpp",
        "TTFT",
        "TPOT",
        "time per rank",
        "exposed comm",
        "bubble ratio",
    ):
        assert text in out, text
    # the stored run renders exactly as the live one did
    assert out.split("\n", 1)[1] == simulated.rsplit("stored run", 1)[0]


@pytest.mark.parametrize("width", ["200", None])  # rich's table on a terminal; plain columns in a pipe
def test_show_prints_a_label_as_written(capsys, db, monkeypatch, width):
    """Brackets and colons in a label are text: no rich markup, no emoji codes."""
    if width is None:
        monkeypatch.delenv("COLUMNS")
    run(capsys, [*SHORT, "--db", db, "--label", "a [b] :fire: [/]"])
    status, out, err = run(capsys, ["show", "1", "--db", db])
    assert status == 0, err
    assert "label a [b] :fire: [/]  backend sim" in out.splitlines()[0]


def test_show_json(capsys, db):
    _, simulated, _ = run(capsys, [*SHORT, "--db", db, "--json", "--label", "x"])
    status, out, err = run(capsys, ["show", "1", "--db", db, "--json"])
    assert status == 0, err
    shown, live = json.loads(out), json.loads(simulated)
    assert shown["run_id"] == 1 and shown["label"] == "x" and shown["spans"] > 0
    assert shown["study"] is None and shown["trial"] is None and shown["created_at"]
    for key, value in live.items():
        assert shown[key] == value, key


def test_show_unknown_run_is_one_line_exit_2(capsys, db):
    run(capsys, [*SHORT, "--db", db])
    assert_one_line_error(*run(capsys, ["show", "999", "--db", db]), f"run: no run 999 in {db}")


def test_show_with_garbage_db_is_one_line_and_leaves_it(capsys, tmp_path):
    path = tmp_path / "garbage.duckdb"
    path.write_bytes(b"garbage" * 50)
    assert_one_line_error(*run(capsys, ["show", "1", "--db", path]), f"db: {path} is not a pipedeck DuckDB store")
    assert path.read_bytes() == b"garbage" * 50


def test_help_lists_the_store_commands_and_flags(capsys):
    _, out, _ = run(capsys, ["--help"])
    assert "runs" in out and "show" in out
    _, out, _ = run(capsys, ["simulate", "--help"])
    for flag in ("--db", "--label", "--no-store"):
        assert flag in out


def test_installed_console_script_show_error_exit_status(tmp_path):
    exe = shutil.which("pipedeck") or str(Path(sys.executable).with_name("pipedeck"))
    path = tmp_path / "garbage.duckdb"
    path.write_bytes(b"garbage" * 50)
    proc = subprocess.run([exe, "show", "1", "--db", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert (
        proc.stderr
        == f"pipedeck: error: db: {path} is not a pipedeck DuckDB store (corrupt or another format); nothing was changed\n"
    )
    assert path.read_bytes() == b"garbage" * 50


# -- what a run cannot have is n/a, never 0 ----------------------------------------------------------------------


@pytest.mark.parametrize("width", ["200", None])  # a terminal's width: rich's table; none, as in a pipe: plain columns
def test_a_prefill_only_run_shows_tpot_as_na_everywhere(capsys, db, monkeypatch, width):
    """long-64k has one output token per request: no TPOT, so show, runs and --json say n/a / null, not 0."""
    if width is None:
        monkeypatch.delenv("COLUMNS")
    status, _, err = run(capsys, ["simulate", "--scenario", "long-64k", "--db", db])
    assert status == 0, err
    _, out, _ = run(capsys, ["show", "1", "--db", db])
    assert ["TPOT"] + ["n/a"] * 4 in [line.replace("│", " ").split() for line in out.splitlines()]
    _, out, _ = run(capsys, ["runs", "--db", db, "--json"])
    assert json.loads(out)[0]["tpot_p90_s"] is None
    _, out, _ = run(capsys, ["runs", "--db", db])
    [listed] = [line for line in out.splitlines() if "long-64k" in line]
    assert listed.split()[9] == "n/a"  # id, date, time, scenario, model, mode, tp×pp, chunk, TTFT p90, TPOT p90


def test_a_tpot_of_zero_stored_by_an_older_version_lists_as_na(capsys, db):
    run(capsys, [*SHORT, "--db", db])
    with RunStore.open(db) as store:  # as a version that counted one-token outputs' TPOT as 0 stored it
        store.con.execute(
            "UPDATE runs SET summary = json_merge_patch(summary, "
            '\'{"tpot_s": {"mean": 0, "p50": 0, "p90": 0, "p99": 0}}\')'
        )
        [row] = store.list_runs()
    assert row.tpot_p90_s is None


# -- every kind of stored run lists, shows and compares ------------------------------------------------------


@pytest.fixture(scope="module")
def awkward_store(tmp_path_factory) -> tuple[Path, dict[str, int]]:
    db = tmp_path_factory.mktemp("kinds") / "runs.duckdb"
    return db, store_awkward_runs(db)


def test_every_kind_of_stored_run_lists(capsys, awkward_store):
    """A run with no TTFT (every request failed), one request, or no TPOT never makes the store unreadable."""
    db, ids = awkward_store
    status, out, err = run(capsys, ["runs", "--db", db, "--json"])
    assert status == 0, err
    listed = {row["label"]: row for row in json.loads(out)}
    assert {label: row["id"] for label, row in listed.items()} == ids
    assert (listed["all-failed"]["requests"], listed["all-failed"]["failed"]) == (0, 3)
    assert listed["all-failed"]["ttft_p90_s"] is None and listed["all-failed"]["tpot_p90_s"] is None
    assert listed["no-output"]["ttft_p90_s"] == pytest.approx(0.1) and listed["no-output"]["tpot_p90_s"] is None
    assert listed["one-request"]["requests"] == 1 and listed["interrupted"]["failed"] == 1
    status, out, err = run(capsys, ["runs", "--db", db])
    assert status == 0, err
    [line] = [line for line in out.splitlines() if "all-failed" in line]
    assert "3 failed" in line and line.split()[8:10] == ["n/a", "n/a"]  # id, date, time, scenario, model, config


@pytest.mark.parametrize("kind", ["one-request", "all-failed", "no-output", "interrupted"])
def test_every_kind_of_stored_run_shows_and_compares(capsys, awkward_store, kind, tmp_path):
    db, ids = awkward_store
    status, out, err = run(capsys, ["show", ids[kind], "--db", db])
    assert status == 0, err
    assert out.startswith(f"run {ids[kind]}  ") and f"label {kind}" in out
    status, out, err = run(capsys, ["show", ids[kind], "--db", db, "--json"])
    assert status == 0, err
    assert json.loads(out)["run_id"] == ids[kind]
    page = tmp_path / "compare.html"
    status, out, err = run(capsys, ["compare", ids[kind], ids["simulated"], "--db", db, "--out", page])
    assert status == 0, err
    assert out.splitlines()[0] == f"wrote {page}" and "plotly" in page.read_text(encoding="utf-8")[:200000].lower()
