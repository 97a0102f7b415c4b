"""`pipedeck studies` lists the studies of the run store or of an Optuna storage, names whole."""

from __future__ import annotations

import json

import optuna
import pytest

from pipedeck.console.cli import cli
from pipedeck.console.errors import run_cli
from pipedeck.store import RunStore
from pipedeck.tuner import open_storage, pull_study

NAME = "azure-conv-deepseek-v3.1-ascend-910c-16-goodput-ttft=2s,tpot=200ms"  # 66 characters, as tune names it
SLO = {"ttft": {"limit_s": 2.0}, "tpot": {"limit_s": 0.2}}


def run(capsys, argv):
    status = run_cli(cli, [str(a) for a in argv])
    out, err = capsys.readouterr()
    return status, out, err


def config(chunk: int) -> dict[str, object]:
    return {"model": "deepseek-v3.1", "hardware": "ascend-910c", "tp": 16, "pp": 1, "mode": "cpp", "chunk": chunk}


def metrics(goodput: float, ttft: float) -> dict[str, float]:
    return {"goodput_rps": goodput, "ttft_p90_s": ttft, "tpot_p90_s": 0.1}


@pytest.fixture()
def db(db, tmp_path):
    """The shared run-store path (tests/conftest.py), holding two studies to list."""
    with RunStore.open(db) as store:
        store.save_study(
            NAME,
            scenario="azure-conv",
            objective="goodput",
            slo=SLO,
            settings={"backend": "sim"},
            storage=str(tmp_path / "runs.optuna.jsonl"),
        )
        for number, chunk, goodput, ttft, state in (
            (0, 2048, 2.1, 1.0, "COMPLETE"),
            (1, 8192, 3.0, 1.9, "COMPLETE"),
            (2, 4096, 2.99, 0.5, "COMPLETE"),
            (3, 512, None, None, "PRUNED"),
            (4, 256, None, None, "RUNNING"),
        ):
            store.save_trial(
                NAME,
                number,
                state=state,
                params={"chunk": chunk},
                config=config(chunk),
                metrics={} if goodput is None else metrics(goodput, ttft),
                objective=goodput,
                duration_s=1.0,
            )
        store.save_study(
            "ttft-study",
            scenario="short-4k",
            objective="ttft",
            slo={},
            settings={"backend": "sim"},
            storage="postgresql://tuner:secret@db.example:5432/studies",
        )
    return db


def test_lists_every_study_with_its_name_whole_and_the_recommended_best(capsys, db):
    status, out, err = run(capsys, ["studies", "--db", db])
    assert status == 0, err
    lines = out.splitlines()
    assert lines[0] == f"studies in {db}"
    assert lines[1] == NAME, "the name is printed whole, on its own line, to be copied into --study"
    # trial 2 ties trial 1 within the 2% precision and has more latency headroom: the tuner recommends it
    assert lines[2].split(" · ")[:2] == ["    4/5 trials", "best 2.99 req/s (trial 2)"]
    assert lines[2].endswith("runs.optuna.jsonl")
    assert lines[3] == "ttft-study"
    assert "best -" in lines[4], "a study with no completed trial has no best"
    assert lines[4].endswith("postgresql://tuner:***@db.example:5432/studies"), "the password is not printed"


def test_json_has_every_field_with_zoned_times(capsys, db):
    status, out, err = run(capsys, ["studies", "--db", db, "--json"])
    assert status == 0, err
    first, second = json.loads(out)
    assert (first["name"], first["finished"], first["trials"], first["best_trial"]) == (NAME, 4, 5, 2)
    assert first["direction"] == "maximize" and second["direction"] == "minimize"
    assert first["created_at"].endswith("+00:00") and first["updated_at"].endswith("+00:00")
    assert second["best_value"] is None and second["updated_at"] is None


def test_lists_an_optuna_storage_that_no_local_store_knows(capsys, tmp_path):
    journal = tmp_path / "shared.optuna.jsonl"
    study = optuna.create_study(study_name=NAME, storage=open_storage(str(journal)), direction="maximize")
    study.set_user_attr("pipedeck", {"objective": "goodput"})
    for value in (1.5, 2.5):
        study.add_trial(optuna.trial.create_trial(value=value))
    study.add_trial(optuna.trial.create_trial(state=optuna.trial.TrialState.FAIL))
    status, out, err = run(capsys, ["studies", "--storage", journal, "--json"])
    assert status == 0, err
    [line] = json.loads(out)
    assert (line["name"], line["finished"], line["trials"], line["best_trial"], line["best_value"]) == (
        NAME,
        2,
        3,
        1,
        2.5,
    )
    assert line["storage"] == str(journal)


def test_empty_and_missing_sources(capsys, tmp_path):
    empty = tmp_path / "empty.duckdb"
    RunStore.open(empty).close()
    assert run(capsys, ["studies", "--db", empty]) == (0, f"no studies in {empty}\n", "")
    missing = tmp_path / "missing.optuna.jsonl"
    status, _out, err = run(capsys, ["studies", "--storage", missing])
    assert status == 2 and "--storage" in err and len(err.splitlines()) == 1, err
    assert not missing.exists(), "listing never creates a journal file"


def test_the_run_store_and_the_optuna_storage_name_the_same_best(capsys, tmp_path):
    """Optuna's best trial is the highest goodput; the tuner recommends, among those tied within the search's
    precision, the one with most latency headroom: both listings name the tuner's recommendation."""
    journal, db = tmp_path / "shared.optuna.jsonl", tmp_path / "runs.duckdb"
    study = optuna.create_study(study_name=NAME, storage=open_storage(str(journal)), direction="maximize")
    study.set_user_attr(
        "pipedeck", {"backend": "sim", "scenario": "azure-conv", "objective": "goodput", "slo": "ttft=2s,tpot=200ms"}
    )
    for number, chunk, goodput, ttft in ((0, 2048, 2.1, 1.0), (1, 8192, 3.0, 1.9), (2, 4096, 2.99, 0.5)):
        study.add_trial(
            optuna.trial.create_trial(
                value=goodput,
                user_attrs={
                    "config": config(chunk),
                    "metrics": metrics(goodput, ttft),
                    **({"role": "default"} if number == 0 else {}),
                },
            )
        )
    pull_study(str(journal), NAME, db)
    listed = {}
    for source in (["--db", db], ["--storage", journal]):
        status, out, err = run(capsys, ["studies", *source, "--json"])
        assert status == 0, err
        [line] = json.loads(out)
        listed[source[0]] = (line["best_trial"], line["best_value"])
    assert listed["--storage"] == listed["--db"] == (2, 2.99)
