"""docs/store.md's SQL gives the right answers: every query, on a store a real `pipedeck tune` wrote, against the API.

The tune is study `demo` on azure-conv, as the queries name them; "run 7"
in the queries is replaced by the id of the tune's best run. The store also
holds a run of another model on other hardware, which a query by mode must
not mix in; and the trials' queries run again on a study whose tp was pinned
with --fix (no trial's params has it).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

import duckdb
import numpy as np
import pytest

from pipedeck.store import RunStore
from tests.paths import ROOT

DOC = ROOT / "docs" / "store.md"
TUNE = [
    "tune",
    "--model",
    "qwen2.5-14b",
    "--hardware",
    "a100-40g-pcie",
    "--devices",
    "4",
    "--scenario",
    "azure-conv",
    "--requests",
    "40",
    "--slo",
    "ttft=1s,tpot=100ms",
    "--trials",
    "8",
    "--repeats",
    "2",
    "--study",
    "demo",
    "--json",
]


OTHER_CLUSTER = [
    "simulate",
    "--model",
    "qwen2.5-32b",
    "--hardware",
    "h100-sxm",
    "--tp",
    "2",
    "--pp",
    "2",
    "--mode",
    "cpp",
    "--scenario",
    "azure-conv",
    "--requests",
    "10",
]


def pipedeck(*args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "pipedeck.console", *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def tuned(tmp_path_factory) -> tuple[Path, dict]:
    db = tmp_path_factory.mktemp("docs") / "pipedeck.duckdb"
    outcome = json.loads(pipedeck(*TUNE, "--db", str(db)))
    pipedeck(*OTHER_CLUSTER, "--db", str(db))
    return db, outcome


@pytest.fixture(scope="module")
def pinned(tmp_path_factory) -> Path:
    """A store whose study `demo` pinned tp with --fix: the trials' params have no tp."""
    db = tmp_path_factory.mktemp("pinned") / "pipedeck.duckdb"
    pipedeck(
        *TUNE[: TUNE.index("--requests")],
        "--requests",
        "20",
        "--slo",
        "ttft=1s,tpot=100ms",
        "--trials",
        "4",
        "--fix",
        "tp=2",
        "--study",
        "demo",
        "--db",
        str(db),
    )
    return db


def sql_blocks() -> list[str]:
    return re.findall(r"```sql\n(.*?)```", DOC.read_text(encoding="utf-8"), flags=re.S)


def answers(db: Path, best_run: int | None, blocks: list[str] | None = None) -> list[list[dict]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        out = []
        for sql in sql_blocks() if blocks is None else blocks:
            cursor = con.execute(sql.replace("run_id = 7", f"run_id = {best_run}"))
            names = [d[0] for d in cursor.description]
            out.append([dict(zip(names, row)) for row in cursor.fetchall()])
        return out
    finally:
        con.close()


def test_every_query_in_the_docs_gives_the_api_s_answer(tuned):
    db, outcome = tuned
    best_run = outcome["best_run_id"]
    got = answers(db, best_run)
    with RunStore.open(db, read_only=True) as store:
        runs = store.list_runs()
        stored = {r.id: store.get_run(r.id) for r in runs}
        trials = store.trials("demo")
        best = store.best_trial("demo")
        fixed = store.get_study("demo").settings["fixed"]
    checks = [
        ttft_p90_by_mode,
        run_summaries,
        runs_of_the_last_day,
        busy_time,
        prefill_or_decode,
        best_trials,
        by_tp,
        pruned_trials,
        trials_with_runs,
    ]
    assert len(got) == len(checks), "a query in docs/store.md without a check here (or the other way round)"
    context = dict(runs=runs, stored=stored, trials=trials, best=best, best_run=best_run, outcome=outcome, fixed=fixed)
    for rows, check in zip(got, checks):
        check(rows, **context)


def ttft_p90_by_mode(rows, runs, stored, **_):
    by_mode = defaultdict(list)  # latencies of one model on one hardware: another cluster's are not mixed in
    for run in runs:
        if run.scenario == "azure-conv":
            by_mode[run.model, run.hardware, run.mode].append(stored[run.id].result.records)
    assert len({(model, hardware) for model, hardware, _ in by_mode}) == 2
    assert ("qwen2.5-32b", "h100-sxm", "cpp") in by_mode
    assert rows and [(r["model"], r["hardware"], r["mode"]) for r in rows] == sorted(
        by_mode, key=lambda key: (key[0], key[1], np.percentile(ttfts(by_mode[key]), 90))
    )
    for row in rows:
        key = (row["model"], row["hardware"], row["mode"])
        assert row["ttft_p90_s"] == pytest.approx(np.percentile(ttfts(by_mode[key]), 90), rel=1e-12)
        assert (row["runs"], row["requests"]) == (len(by_mode[key]), sum(map(len, by_mode[key])))


def ttfts(runs_records) -> list[float]:
    return [q.first_token_s - q.arrival_s for records in runs_records for q in records]


def run_summaries(rows, runs, **_):
    assert [(r["id"], r["mode"], r["chunk"], r["ttft_p90_s"], r["bubble_ratio"]) for r in rows] == [
        (r.id, r.mode, r.chunk, r.ttft_p90_s, r.bubble_ratio) for r in runs[:10]
    ]


def runs_of_the_last_day(rows, runs, **_):
    day_ago = datetime.now(UTC) - timedelta(days=1)
    assert [(r["id"], r["scenario"], r["label"]) for r in rows] == [
        (r.id, r.scenario, r.label) for r in sorted(runs, key=lambda r: r.id) if r.created_at > day_ago
    ]
    assert rows and all(r["created_at"] == run.created_at for r, run in zip(rows, sorted(runs, key=lambda r: r.id)))


def busy_time(rows, stored, best_run, **_):
    spans = stored[best_run].result.spans
    count, busy = Counter(), defaultdict(float)
    for s in spans:
        count[s.rank, s.kind] += 1
        busy[s.rank, s.kind] += s.end - s.start
    assert [(r["rank"], r["kind"], r["spans"]) for r in rows] == sorted((k[0], k[1], n) for k, n in count.items())
    for r in rows:
        assert r["busy_s"] == pytest.approx(busy[r["rank"], r["kind"]], rel=1e-9)


def prefill_or_decode(rows, stored, best_run, **_):
    spans = stored[best_run].result.spans
    want = {
        kind: (
            sum(s.kind == kind and s.request != -1 for s in spans),
            sum(s.kind == kind and s.request == -1 for s in spans),
        )
        for kind in {s.kind for s in spans}
    }
    assert {r["kind"]: (r["with_prefill"], r["decode_only"]) for r in rows} == want
    assert sum(decode for _, decode in want.values()) > 0  # the run has decode-only batches to count


def best_trials(rows, trials, best, **_):
    complete = sorted((t for t in trials if t.state == "COMPLETE"), key=lambda t: (-t.objective, t.number))
    unfinished = [t for t in trials if t.state != "COMPLETE"]  # no objective: after every completed trial
    assert [r["number"] for r in rows] == [t.number for t in complete + unfinished][:5]
    assert rows[0]["number"] == best.number and len(complete) < 5 and rows[-1]["objective"] is None
    for r in rows:
        t = next(t for t in trials if t.number == r["number"])
        assert (r["objective"], r["mode"], json.loads(r["params"])) == (
            t.objective,
            (t.config or {}).get("mode"),
            t.params,
        )


def by_tp(rows, trials, fixed, **_):
    assert rows == tp_groups(trials, fixed)
    assert any(r["pruned"] for r in rows)  # so the best column is known to leave pruned trials out


def tp_groups(trials, fixed) -> list[dict]:
    """The trials by the tp each ran (its config's; a trial that could not run: searched or pinned with --fix)."""
    groups = defaultdict(list)
    for t in trials:
        groups[(t.config or {}).get("tp") or t.params.get("tp") or fixed["tp"]].append(t)
    return [
        {
            "tp": tp,
            "trials": len(ts),
            "pruned": sum(t.state == "PRUNED" for t in ts),
            "best": max((t.objective for t in ts if t.state == "COMPLETE"), default=None),
        }
        for tp, ts in sorted(groups.items())
    ]


def test_the_query_by_tp_groups_a_study_that_pinned_tp(pinned):
    with RunStore.open(pinned, read_only=True) as store:
        trials = store.trials("demo")
        fixed = store.get_study("demo").settings["fixed"]
    assert fixed["tp"] == 2 and not any("tp" in t.params for t in trials)  # pinned, so no trial searched it
    [query] = [sql for sql in sql_blocks() if "AS tp" in sql]
    [rows] = answers(pinned, None, [query])
    assert rows == tp_groups(trials, fixed) and [r["tp"] for r in rows] == [2]


def pruned_trials(rows, trials, **_):
    pruned = [t for t in trials if t.state == "PRUNED"]
    assert pruned and all(t.objective is None for t in pruned)
    assert rows == [
        {"number": t.number, "fails_slo_at_rps": t.metrics["fails_slo_at_rps"], "chunk": str(t.params["chunk"])}
        for t in pruned
    ]


def trials_with_runs(rows, trials, runs, outcome, **_):
    by_id = {r.id: r for r in runs}
    linked = [t for t in trials if t.run_id is not None]
    assert [(r["number"], r["run_id"]) for r in rows] == [(t.number, t.run_id) for t in linked]
    assert {r["number"]: r["run_id"] for r in rows} == {
        outcome["best"]["trial"]: outcome["best_run_id"],
        outcome["default"]["trial"]: outcome["default_run_id"],
    }
    for r in rows:
        run = by_id[r["run_id"]]
        assert (r["label"], r["ttft_p90_s"]) == (run.label, run.ttft_p90_s) and run.trial == r["number"]
