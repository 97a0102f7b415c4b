"""The DuckDB run store: exact round trips, one transaction per write, and files it never damages."""

from __future__ import annotations

import math
import random
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import duckdb
import pytest

import pipedeck.store.runstore as runstore_module
import pipedeck.store.schema as schema_module
from pipedeck.backends import RankTime, RequestRecord, RunResult, ServingConfig, Span
from pipedeck.backends.sim import SimBackend
from pipedeck.scenarios import load_scenario
from pipedeck.store import SCHEMA_VERSION, RunStore, StoreError, default_db_path

QWEN = ServingConfig.of(model="qwen2.5-14b", hardware="a100-40g-pcie", tp=2, pp=2)
TABLES = ("runs", "run_ranks", "requests", "spans")


@pytest.fixture(scope="module")
def sim_result() -> RunResult:
    """A real simulated run with its timeline."""
    result = SimBackend().run(load_scenario("short-4k"), QWEN, num_requests=8)
    assert result.spans and len(result.records) == 8 and len(result.ranks) == 2
    return result


@pytest.fixture()
def store(db):
    with RunStore.open(db) as s:
        yield s


def bits(value: object) -> object:
    """A float's exact bits (so -0.0, NaN and subnormals compare exactly); anything else as is."""
    return value.hex() if isinstance(value, float) else value


def assert_rows_identical(got: list, want: list) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert type(g) is type(w)
        assert g._fields == w._fields
        for name in w._fields:
            a, b = getattr(g, name), getattr(w, name)
            assert type(a) is type(b), name
            assert bits(a) == bits(b), (name, a, b)


def assert_results_identical(got: RunResult, want: RunResult) -> None:
    assert got.config == want.config
    for name in ("scenario", "backend", "seed", "rate", "makespan_s", "steps", "chunks", "stage_executions"):
        assert bits(getattr(got, name)) == bits(getattr(want, name)), name
    assert_rows_identical(got.records, want.records)
    assert_rows_identical(got.ranks, want.ranks)
    assert_rows_identical(got.spans, want.spans)


def counts(path: Path) -> dict[str, int]:
    with RunStore.open(path) as s:
        return {t: s.con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}


def awkward_result(n_spans: int = 3000, n_records: int = 500, seed: int = 1) -> RunResult:
    """Synthetic run whose floats are hard to store exactly, with records out of id order."""
    rng = random.Random(seed)
    odd = [-0.0, 0.0, 5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, math.inf, -math.inf, math.nan, 0.1]

    def f() -> float:
        return rng.choice(odd) if rng.random() < 0.05 else rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-12, 3)

    kinds = ["prefill", "decode", "mixed", "send", "recv", "exchange"]
    records = [
        RequestRecord(rng.randrange(10**12), f(), rng.randrange(1, 10**6), rng.randrange(1, 4096), f(), f())
        for _ in range(n_records)
    ]
    spans = [
        Span(
            rng.randrange(8),
            rng.randrange(16),
            rng.randrange(10**9),
            rng.randrange(-1, 10**6),
            rng.randrange(-1, 64),
            f(),
            f(),
            rng.choice(kinds),
        )
        for _ in range(n_spans)
    ]
    for i, value in enumerate(odd):  # every awkward value appears in every float column at least once
        records.append(RequestRecord(i, value, 1, 1, value, value))
        spans.append(Span(0, 0, i, -1, -1, value, value, "decode"))
    ranks = [RankTime(r, f(), f(), f(), f()) for r in range(4)] + [
        RankTime(9, *odd[i : i + 4]) for i in range(len(odd) - 3)
    ]
    config = {**QWEN.resolve().to_dict(), "smooth_factor": 0.1 + 0.2}
    return RunResult(
        config=config,
        scenario="awkward",
        backend="sim",
        seed=2**62,
        rate=0.30000000000000004,
        records=records,
        ranks=ranks,
        makespan_s=f(),
        steps=7,
        chunks=3,
        stage_executions=11,
        spans=spans,
    )


# -- round trips -----------------------------------------------------------------------------------


def test_simulated_run_round_trips_exactly(db, sim_result):
    before = datetime.now(UTC)
    with RunStore.open(db) as s:
        run_id = s.save_run(sim_result, study="st", trial=3, label="first")
    with RunStore.open(db) as s:  # reopened: read back from the checkpointed file, not from memory
        stored = s.get_run(run_id)
    assert stored.id == run_id == 1
    assert (stored.study, stored.trial, stored.label) == ("st", 3, "first")
    assert stored.pipedeck_version and stored.created_at.tzinfo is UTC
    assert before <= stored.created_at <= datetime.now(UTC)  # when it was saved
    assert_results_identical(stored.result, sim_result)
    assert stored.result == sim_result
    assert stored.result.summary() == sim_result.summary()


def test_times_are_stored_as_zoned_instants_whatever_the_local_zone(db, sim_result, far_from_utc):
    before = datetime.now(UTC)
    with RunStore.open(db) as s:
        run_id = s.save_run(sim_result)
        s.save_study("st", scenario="s", objective="goodput", slo={}, settings={}, storage="x")
        s.save_trial(
            "st",
            0,
            state="COMPLETE",
            params={},
            config=None,
            metrics={},
            objective=1.0,
            duration_s=None,
            completed_at=datetime(2025, 3, 1, 12, 0, tzinfo=UTC),
        )
        kinds = {
            (table, name): kind
            for table, name, kind in s.con.execute(
                "SELECT table_name, column_name, data_type FROM information_schema.columns WHERE column_name IN "
                "('created_at', 'completed_at', 'applied_at')"
            ).fetchall()
        }
        (age_s,) = s.con.execute("SELECT epoch(now()) - epoch(created_at) FROM runs WHERE id = ?", [run_id]).fetchone()
        (completed,) = s.con.execute(
            "SELECT strftime(timezone('UTC', completed_at), '%Y-%m-%d %H:%M') FROM trials"
        ).fetchone()
        stored = s.get_run(run_id).created_at
    after = datetime.now(UTC)
    assert len(kinds) == 5 and set(kinds.values()) == {"TIMESTAMP WITH TIME ZONE"}, kinds  # every table's times
    # SQL sees the instant, not local time as UTC (which would be 5.5 hours off)
    assert 0 <= age_s <= (after - before).total_seconds() and completed == "2025-03-01 12:00"
    assert stored.tzinfo is UTC and before <= stored <= after


def test_spans_without_a_request_hold_null_and_read_back_as_the_span_had_them(store, sim_result):
    run_id = store.save_run(sim_result)
    nulls = store.con.execute(
        "SELECT count(*) FILTER (WHERE request IS NULL), count(*) FILTER (WHERE chunk IS NULL), "
        "count(*) FILTER (WHERE request = -1 OR chunk = -1) FROM spans WHERE run_id = ?",
        [run_id],
    ).fetchone()
    none = [s for s in sim_result.spans if s.request == -1]
    assert none and nulls == (len(none), sum(s.chunk == -1 for s in sim_result.spans), 0)
    assert_rows_identical(store.get_run(run_id).result.spans, sim_result.spans)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # its summary() takes percentiles over inf and NaN
def test_awkward_floats_and_order_round_trip_bit_for_bit(store):
    result = awkward_result()
    run_id = store.save_run(result)
    assert_results_identical(store.get_run(run_id).result, result)


def test_rate_none_and_empty_run_round_trip(store, sim_result):
    empty = RunResult(
        config={"model": "m"},
        scenario="empty",
        backend="sim",
        seed=0,
        rate=None,
        records=[],
        ranks=[],
        makespan_s=0.0,
        steps=0,
        chunks=0,
        stage_executions=0,
    )
    run_id = store.save_run(empty)
    got = store.get_run(run_id).result
    assert got == empty and got.rate is None and got.spans == []


def test_keep_timeline_false_stores_no_spans(store, sim_result):
    run_id = store.save_run(sim_result, keep_timeline=False)
    assert store.con.execute("SELECT count(*) FROM spans WHERE run_id = ?", [run_id]).fetchone()[0] == 0
    got = store.get_run(run_id).result
    assert got.spans == []
    assert_rows_identical(got.records, sim_result.records)
    assert store.count_spans(run_id) == 0


def test_get_run_without_timeline_skips_spans(store, sim_result):
    run_id = store.save_run(sim_result)
    assert store.get_run(run_id, timeline=False).result.spans == []
    assert store.count_spans(run_id) == len(sim_result.spans)


def test_runs_table_columns_hold_the_config_and_metrics(store, sim_result):
    run_id = store.save_run(sim_result)
    row = store.con.execute(
        "SELECT backend, scenario, seed, rate, model, hardware, mode, tp, pp, chunk, makespan_s, steps, chunks, "
        "stage_executions, CAST(json_extract(config, '$.layer_split') AS INTEGER[]) FROM runs WHERE id = ?",
        [run_id],
    ).fetchone()
    assert row == (
        "sim",
        "short-4k",
        0,
        None,
        "qwen2.5-14b",
        "a100-40g-pcie",
        "cpp",
        2,
        2,
        8192,
        sim_result.makespan_s,
        sim_result.steps,
        sim_result.chunks,
        sim_result.stage_executions,
        [24, 24],
    )


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_bulk_insert_of_100k_spans_is_fast(store):
    result = awkward_result(n_spans=100_000, n_records=10_000)
    start = time.process_time()  # CPU seconds of this process, DuckDB's threads included: not slowed by a busy machine
    run_id = store.save_run(result)
    cpu_s = time.process_time() - start
    assert store.count_spans(run_id) == len(result.spans) > 100_000
    assert cpu_s < 2.0, f"saving 100k spans took {cpu_s:.2f} CPU s"  # row-by-row executemany takes minutes


# -- listing -------------------------------------------------------------------------------------------


def test_list_runs_filters_newest_first(store, sim_result):
    vpp = SimBackend().run(load_scenario("short-4k"), QWEN.replace(mode="vpp"), num_requests=4, timeline=False)
    a = store.save_run(sim_result, label="a")
    b = store.save_run(vpp, study="s1", trial=0)
    c = store.save_run(sim_result, study="s1", trial=1)
    assert [r.id for r in store.list_runs()] == [c, b, a]
    assert [r.id for r in store.list_runs(study="s1")] == [c, b]
    assert [r.id for r in store.list_runs(mode="vpp")] == [b]
    assert [r.id for r in store.list_runs(mode="cpp", study="s1")] == [c]
    assert [r.id for r in store.list_runs(scenario="short-4k", limit=2)] == [c, b]
    assert store.list_runs(scenario="nope") == []
    row = store.list_runs(limit=1)[0]
    s = sim_result.summary()
    assert (row.study, row.trial, row.label, row.mode, row.tp, row.pp, row.chunk) == ("s1", 1, None, "cpp", 2, 2, 8192)
    assert row.ttft_p90_s == s["ttft_s"]["p90"] and row.tpot_p90_s == s["tpot_s"]["p90"]
    assert row.throughput_tok_s == s["throughput_tok_s"] and row.bubble_ratio == s["bubble_ratio"]
    assert row.makespan_s == sim_result.makespan_s and row.requests == 8
    with pytest.raises(StoreError, match="limit"):
        store.list_runs(limit=0)


def test_delete_run_removes_its_rows_and_unlinks_trials(store, sim_result):
    keep = store.save_run(sim_result)
    gone = store.save_run(sim_result)
    store.save_study("st", scenario="short-4k", objective="goodput", slo={}, settings={}, storage="x")
    store.save_trial(
        "st", 0, state="COMPLETE", params={}, config=None, metrics={}, objective=1.0, duration_s=None, run_id=gone
    )
    store.delete_run(gone)
    for table, column in (("runs", "id"), ("run_ranks", "run_id"), ("requests", "run_id"), ("spans", "run_id")):
        assert store.con.execute(f"SELECT count(*) FROM {table} WHERE {column} = ?", [gone]).fetchone()[0] == 0
    assert store.trials("st")[0].run_id is None
    assert_results_identical(store.get_run(keep).result, sim_result)
    with pytest.raises(StoreError, match=f"run: no run {gone} in "):
        store.delete_run(gone)


def test_missing_run_is_one_line_naming_the_file(store, db):
    with pytest.raises(StoreError) as err:
        store.get_run(42)
    assert str(err.value) == f"run: no run 42 in {db}"


# -- studies, trials, configs ---------------------------------------------------------------------------


def test_study_insert_then_update_keeps_created_at(store):
    store.save_study(
        "st",
        scenario="azure-conv",
        objective="goodput",
        slo={"ttft_p90_s": 2.0},
        settings={"seed": 0},
        storage="journal:a",
    )
    first = store.get_study("st")
    store.save_study(
        "st",
        scenario="azure-conv",
        objective="goodput",
        slo={"ttft_p90_s": 1.5},
        settings={"seed": 1},
        storage="journal:b",
    )
    second = store.get_study("st")
    assert second.created_at == first.created_at
    assert (second.slo, second.settings, second.storage) == ({"ttft_p90_s": 1.5}, {"seed": 1}, "journal:b")
    assert [s.name for s in store.list_studies()] == ["st"]
    with pytest.raises(StoreError, match="study: no study 'nope'"):
        store.get_study("nope")


def test_syncing_the_same_trial_twice_leaves_one_row(store):
    store.save_study("st", scenario="s", objective="goodput", slo={}, settings={}, storage="x")
    store.save_trial(
        "st", 0, state="RUNNING", params={"chunk": 4096}, config=None, metrics={}, objective=None, duration_s=None
    )
    assert store.trials("st")[0].completed_at is None
    done = dict(
        state="COMPLETE",
        params={"chunk": 4096},
        config={"chunk": 4096},
        metrics={"goodput_rps": 2.5},
        objective=2.5,
        duration_s=1.25,
        run_id=None,
    )
    store.save_trial("st", 0, **done)
    completed = store.trials("st")[0].completed_at
    store.save_trial("st", 0, **done)
    rows = store.trials("st")
    assert len(rows) == 1
    assert store.con.execute("SELECT count(*) FROM trials").fetchone()[0] == 1
    t = rows[0]
    assert (t.study, t.number, t.state, t.params, t.config, t.metrics, t.objective, t.duration_s) == (
        "st",
        0,
        "COMPLETE",
        {"chunk": 4096},
        {"chunk": 4096},
        {"goodput_rps": 2.5},
        2.5,
        1.25,
    )
    assert t.completed_at == completed and completed is not None
    assert store.get_study("st").trials == 1 and store.get_study("st").completed == 1


def test_trials_are_ordered_and_validated(store):
    store.save_study("st", scenario="s", objective="goodput", slo={}, settings={}, storage="x")
    for n in (2, 0, 1):
        store.save_trial(
            "st", n, state="complete", params={}, config=None, metrics={}, objective=float(n), duration_s=None
        )
    assert [t.number for t in store.trials("st")] == [0, 1, 2]
    assert {t.state for t in store.trials("st")} == {"COMPLETE"}
    with pytest.raises(StoreError, match="state: unknown trial state"):
        store.save_trial("st", 3, state="done", params={}, config=None, metrics={}, objective=None, duration_s=None)
    with pytest.raises(StoreError, match="study: no study 'other'"):
        store.save_trial(
            "other", 0, state="COMPLETE", params={}, config=None, metrics={}, objective=None, duration_s=None
        )


def test_best_trial_uses_completed_trials_only(store):
    store.save_study("st", scenario="s", objective="goodput", slo={}, settings={}, storage="x")
    assert store.best_trial("st") is None
    for number, state, objective in [
        (0, "COMPLETE", 2.0),
        (1, "PRUNED", None),
        (2, "FAIL", None),
        (3, "COMPLETE", 3.0),
        (4, "RUNNING", None),
        (5, "COMPLETE", 1.0),
        (6, "COMPLETE", 3.0),
        (7, "COMPLETE", math.nan),
        (8, "COMPLETE", None),
    ]:
        store.save_trial(
            "st",
            number,
            state=state,
            params={"n": number},
            config=None,
            metrics={},
            objective=objective,
            duration_s=None,
        )
    assert store.best_trial("st").number == 3  # ties go to the lower number
    assert store.best_trial("st", descending=True).objective == 3.0
    assert store.best_trial("st", descending=False).number == 5


@pytest.mark.parametrize("state", ["PRUNED", "FAIL", "RUNNING", "WAITING"])
def test_only_a_completed_trial_has_an_objective(store, state):
    store.save_study("st", scenario="s", objective="goodput", slo={}, settings={}, storage="x")
    with pytest.raises(StoreError) as err:  # a pruned search's probe rate is a bound, not a result
        store.save_trial("st", 0, state=state, params={}, config=None, metrics={}, objective=9.0, duration_s=None)
    assert str(err.value) == f"objective: only a COMPLETE trial has one, got 9.0 for a {state} trial"
    assert store.trials("st") == []


def test_a_trial_keeps_its_run_link_and_completion_time_when_synced_again(store, sim_result):
    store.save_study("st", scenario="s", objective="goodput", slo={}, settings={}, storage="x")
    done = dict(state="COMPLETE", params={"chunk": 4096}, config=None, metrics={}, objective=2.5, duration_s=1.0)
    store.save_trial("st", 0, **done)
    run_id = store.save_run(sim_result, study="st", trial=0, label="best")
    store.link_run("st", 0, run_id)
    first = store.trials("st")[0]
    store.save_trial("st", 0, **{**done, "metrics": {"goodput_ci": {"mean": 2.5}}})  # the finalist's interval
    again = store.trials("st")[0]
    assert (again.run_id, again.completed_at, again.metrics) == (
        run_id,
        first.completed_at,
        {"goodput_ci": {"mean": 2.5}},
    )
    assert first.completed_at.tzinfo is UTC
    with pytest.raises(StoreError, match="trial: no trial 7 of study 'st' in "):
        store.link_run("st", 7, run_id)
    with pytest.raises(StoreError, match=f"run: no run {run_id + 1} in "):
        store.link_run("st", 0, run_id + 1)


def test_a_trial_records_when_it_started_and_which_worker_ran_it(store):
    store.save_study("st", scenario="s", objective="goodput", slo={}, settings={}, storage="x")
    started = datetime(2026, 1, 2, 9, 4, 5, tzinfo=timezone(timedelta(hours=5, minutes=30)))
    store.save_trial(
        "st",
        0,
        state="RUNNING",
        params={},
        config=None,
        metrics={},
        objective=None,
        duration_s=None,
        started_at=started,
        worker="node-a:4242",
    )
    first = store.trials("st")[0]
    assert (first.started_at, first.worker) == (started, "node-a:4242") and first.started_at.tzinfo is UTC
    store.save_trial("st", 0, state="COMPLETE", params={}, config=None, metrics={}, objective=1.0, duration_s=2.0)
    again = store.trials("st")[0]
    assert (again.started_at, again.worker) == (started, "node-a:4242")  # synced again without them: kept
    store.save_trial("st", 1, state="FAIL", params={}, config=None, metrics={}, objective=None, duration_s=None)
    assert (store.trials("st")[1].started_at, store.trials("st")[1].worker) == (None, None)
    (kind,) = store.con.execute(
        "SELECT data_type FROM information_schema.columns WHERE table_name = 'trials' AND column_name = 'started_at'"
    ).fetchone()
    assert kind == "TIMESTAMP WITH TIME ZONE"


def test_a_study_s_run_saved_once_is_stored_once(store, sim_result):
    """A study's best (or default) run is stored once per trial and label, whoever saves it again."""
    first = store.save_run(sim_result, study="s", trial=3, label="best", once=True)
    assert store.save_run(sim_result, study="s", trial=3, label="best", once=True) == first
    other = store.save_run(sim_result, study="s", trial=3, label="default", once=True)
    assert other != first
    assert store.save_run(sim_result, study="s", trial=3, label="best") not in (first, other)  # without once: a new run
    assert sorted(r.label for r in store.list_runs(study="s")) == ["best", "best", "default"]
    with pytest.raises(StoreError, match="once: a run saved once names its study, trial and label"):
        store.save_run(sim_result, study="s", label="best", once=True)


def test_two_threads_saving_a_study_s_run_once_at_once_store_one_copy(tmp_path, sim_result):
    for attempt in range(5):
        path = tmp_path / f"study-{attempt}.duckdb"
        RunStore.open(path).close()
        start, ids = threading.Barrier(2), []

        def save() -> None:
            with RunStore.open(path) as s:  # noqa: B023 - the threads end within this attempt
                start.wait()  # noqa: B023
                ids.append(s.save_run(sim_result, study="s", trial=0, label="best", once=True))  # noqa: B023

        threads = [threading.Thread(target=save) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(ids) == 2 and ids[0] == ids[1]
        with RunStore.open(path) as s:
            assert [r.id for r in s.list_runs()] == ids[:1]


def test_named_configs(store):
    config = QWEN.resolve().to_dict()
    store.save_config("qwen-tp2", config)
    assert store.get_config("qwen-tp2") == config
    store.save_config("qwen-tp2", {**config, "chunk": 4096})
    assert store.get_config("qwen-tp2")["chunk"] == 4096
    assert [c.name for c in store.list_configs()] == ["qwen-tp2"]
    with pytest.raises(StoreError, match="config: no config named 'nope'"):
        store.get_config("nope")


# -- one transaction per write -------------------------------------------------------------------------


@pytest.mark.parametrize("interrupt", [RuntimeError("disk on fire"), KeyboardInterrupt()])
def test_failed_write_leaves_no_partial_run(db, sim_result, monkeypatch, interrupt):
    with RunStore.open(db) as s:
        first = s.save_run(sim_result)
    before = counts(db)
    real = runstore_module.insert_columns
    calls = []

    def insert_then_fail(con, table, columns, none=None):
        calls.append(table)
        real(con, table, columns, none)  # the runs row and this table are written inside the transaction ...
        if table == "requests":
            raise interrupt  # ... then the write dies before the spans

    monkeypatch.setattr(runstore_module, "insert_columns", insert_then_fail)
    with RunStore.open(db) as s:
        with pytest.raises(type(interrupt)):
            s.save_run(sim_result)
        assert calls == ["run_ranks", "requests"]
        assert {t: s.con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES} == before
    monkeypatch.setattr(runstore_module, "insert_columns", real)
    assert counts(db) == before
    with RunStore.open(db) as s:
        assert_results_identical(s.get_run(first).result, sim_result)
        again = s.save_run(sim_result)
        assert_results_identical(s.get_run(again).result, sim_result)


def test_database_error_midway_rolls_back_as_one_line(store, db, sim_result):
    bad = RunResult(
        **{**sim_result.__dict__, "spans": [*sim_result.spans[:5], sim_result.spans[5]._replace(kind=None)]}
    )
    before = {t: store.con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES}
    with pytest.raises(StoreError) as err:
        store.save_run(bad)
    assert str(err.value).startswith(f"db: could not write to {db}: ") and "\n" not in str(err.value)
    assert {t: store.con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in TABLES} == before


def test_interrupted_first_migration_leaves_an_openable_file(db, monkeypatch):
    def boom(con):
        con.execute("CREATE TABLE half_done (x INTEGER)")
        raise KeyboardInterrupt

    monkeypatch.setattr(schema_module, "MIGRATIONS", [boom])
    with pytest.raises(KeyboardInterrupt):
        RunStore.open(db)
    monkeypatch.undo()
    with RunStore.open(db) as s:
        assert s.con.execute("SELECT max(version) FROM schema_version").fetchone()[0] == SCHEMA_VERSION


# -- schema ----------------------------------------------------------------------------------------------


def test_two_threads_creating_one_store_at_once_both_succeed(tmp_path):
    for attempt in range(5):  # without the lock every attempt conflicted on creating schema_version
        path = tmp_path / f"fresh-{attempt}.duckdb"
        start, errors = threading.Barrier(2), []

        def open_store() -> None:
            start.wait()  # noqa: B023 - the threads end within this attempt
            try:
                with RunStore.open(path) as s:  # noqa: B023
                    s.list_runs()
            except StoreError as err:
                errors.append(err)  # noqa: B023

        threads = [threading.Thread(target=open_store) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        with RunStore.open(path) as s:
            assert s.con.execute("SELECT count(*) FROM schema_version").fetchone()[0] == SCHEMA_VERSION


def test_schema_version_is_recorded_once(db):
    RunStore.open(db).close()
    read = "SELECT version, applied_at::VARCHAR, typeof(applied_at) FROM schema_version"
    with RunStore.open(db) as s:
        first = s.con.execute(read).fetchall()
    RunStore.open(db).close()
    with RunStore.open(db) as s:
        assert s.con.execute(read).fetchall() == first
    assert [v for v, _, _ in first] == list(range(1, SCHEMA_VERSION + 1)) == [1, 2, 3, 4]
    assert {kind for _, _, kind in first} == {"TIMESTAMP WITH TIME ZONE"}


def test_a_store_written_at_version_1_is_migrated_in_place_keeping_its_runs(db, sim_result):
    with RunStore.open(db) as store:  # write a run, then take the runs table back to what version 1 wrote
        run_id = store.save_run(sim_result)
        store.con.execute("DELETE FROM schema_version WHERE version > 1")
        store.con.execute("ALTER TABLE runs DROP COLUMN live")
        for column in ("started_at", "worker"):
            store.con.execute(f"ALTER TABLE trials DROP COLUMN {column}")
        for column in ("steps", "chunks", "stage_executions"):
            store.con.execute(f"ALTER TABLE runs ALTER COLUMN {column} SET NOT NULL")
    with RunStore.open(db) as store:
        assert [v for (v,) in store.con.execute("SELECT version FROM schema_version ORDER BY 1").fetchall()] == [
            1,
            2,
            3,
            4,
        ]
        back = store.get_run(run_id).result
        assert back.records == sim_result.records and back.steps == sim_result.steps and back.live is None
        nullable = store.con.execute(
            "SELECT is_nullable FROM information_schema.columns WHERE table_name = 'runs' AND column_name = 'steps'"
        ).fetchone()
        assert nullable == ("YES",)


def test_newer_schema_is_refused_without_changes(db):
    with RunStore.open(db) as s:
        s.con.execute("INSERT INTO schema_version VALUES (99, now())")
    data = db.read_bytes()
    with pytest.raises(StoreError) as err:
        RunStore.open(db)
    assert str(err.value).startswith(f"db: {db} has schema version 99, newer than this pipedeck knows")
    assert db.read_bytes() == data


# -- files the store must never damage -------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [b"garbage bytes, not a database\n" * 300, b"", b"\x00" * 4096, b"SQLite format 3\x00" + bytes(range(256)) * 8],
)
def test_corrupt_file_is_reported_and_left_byte_identical(tmp_path, content):
    path = tmp_path / "notes.duckdb"
    path.write_bytes(content)
    for read_only in (False, True):
        with pytest.raises(StoreError) as err:
            RunStore.open(path, read_only=read_only)
        assert (
            str(err.value)
            == f"db: {path} is not a pipedeck DuckDB store (corrupt or another format); nothing was changed"
        )
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.duckdb"]  # no .wal beside it either


def test_truncated_store_is_reported_and_left_byte_identical(tmp_path, db):
    RunStore.open(db).close()
    cut = tmp_path / "cut.duckdb"
    cut.write_bytes(db.read_bytes()[:12288])
    with pytest.raises(StoreError, match="is not a pipedeck DuckDB store"):
        RunStore.open(cut)
    assert cut.read_bytes() == db.read_bytes()[:12288]


def test_someone_elses_duckdb_file_is_not_touched(tmp_path):
    path = tmp_path / "other.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE runs (x INTEGER)")
    con.close()
    data = path.read_bytes()
    with pytest.raises(StoreError, match="is not a pipedeck DuckDB store"):
        RunStore.open(path)
    assert path.read_bytes() == data


HOLD = textwrap.dedent("""
    import sys, time
    from pipedeck.store import RunStore
    store = RunStore.open(sys.argv[1])
    print("holding", flush=True)
    time.sleep(float(sys.argv[2]))
    store.close()
""")


def hold(path: Path, seconds: float) -> subprocess.Popen:
    """Another process that holds the store open for `seconds`."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), str(seconds)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "holding"
    return proc


def test_file_locked_by_another_process_is_one_line(db):
    RunStore.open(db).close()
    proc = hold(db, 60)
    try:
        for read_only in (False, True):
            with pytest.raises(StoreError) as err:
                RunStore.open(db, read_only=read_only)
            message = str(err.value)
            assert message.startswith(f"db: {db} is in use by another process (PID {proc.pid})"), message
            assert "\n" not in message
    finally:
        proc.kill()
        proc.wait()
    RunStore.open(db).close()


def test_open_waits_for_a_lock_to_be_released(db, sim_result):
    proc = hold(db, 0.5)
    try:
        with RunStore.open(db, lock_timeout_s=30) as s:
            assert s.save_run(sim_result) == 1
    finally:
        proc.wait()


# -- paths and modes -------------------------------------------------------------------------------------


def test_default_db_path_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("PIPEDECK_DB", raising=False)
    assert default_db_path() == tmp_path / "pipedeck.duckdb"
    monkeypatch.setenv("PIPEDECK_DB", str(tmp_path / "env.duckdb"))
    assert default_db_path() == tmp_path / "env.duckdb"
    assert default_db_path(tmp_path / "explicit.duckdb") == tmp_path / "explicit.duckdb"
    assert default_db_path("x.duckdb") == Path("x.duckdb")
    with RunStore.open() as s:
        assert s.path == tmp_path / "env.duckdb"
    assert (tmp_path / "env.duckdb").exists()


def test_read_only_store_refuses_writes_and_missing_files(tmp_path, db, sim_result):
    with pytest.raises(StoreError, match="no store at"):
        RunStore.open(tmp_path / "missing.duckdb", read_only=True)
    assert not (tmp_path / "missing.duckdb").exists()
    with RunStore.open(db) as s:
        run_id = s.save_run(sim_result)
    with RunStore.open(db, read_only=True) as s:
        assert_results_identical(s.get_run(run_id).result, sim_result)
        with pytest.raises(StoreError, match="read-only"):
            s.save_run(sim_result)


def test_check_writable_creates_and_changes_nothing_and_refuses_what_could_not_take_a_run(
    tmp_path, db, sim_result, monkeypatch
):
    RunStore.check_writable(db)
    assert not db.exists()
    with pytest.raises(StoreError, match=r"^db: folder .* does not exist$"):
        RunStore.check_writable(tmp_path / "missing" / "runs.duckdb")
    with RunStore.open(db) as store:
        store.save_run(sim_result)
    stored = db.read_bytes()
    RunStore.check_writable(db)
    assert db.read_bytes() == stored
    garbage = tmp_path / "garbage.duckdb"
    garbage.write_bytes(b"garbage" * 100)
    with pytest.raises(StoreError, match="is not a pipedeck DuckDB store"):
        RunStore.check_writable(garbage)
    (tmp_path / "new").mkdir()
    monkeypatch.setattr(runstore_module.os, "access", lambda path, mode: False)  # as a folder or file not ours
    with pytest.raises(StoreError, match=f"^db: folder {tmp_path / 'new'} is not writable$"):
        RunStore.check_writable(tmp_path / "new" / "runs.duckdb")
    with pytest.raises(StoreError, match=f"^db: {db} is not writable$"):
        RunStore.check_writable(db)
    assert db.read_bytes() == stored


def test_bad_locations_are_one_line(tmp_path):
    with pytest.raises(StoreError, match="does not exist"):
        RunStore.open(tmp_path / "no-such-dir" / "runs.duckdb")
    with pytest.raises(StoreError, match="is a directory"):
        RunStore.open(tmp_path)
