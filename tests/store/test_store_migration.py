"""Schemas 3 and 4: stores written by earlier pipedecks (schema 2, and schema 3) are migrated in place, every row kept.

tests/data/store-v2.duckdb.xz was written by pipedeck 78356bc on DuckDB 1.1
(tests/data/make_store_v2.py): a simulated run, a small tune with completed
and pruned trials and its best and default runs, a named config, and trials
that never ran. Each table is read before and after the migration and
compared row by row. The schema-3 store is that file as the pipedeck of
schema 3 left it after upgrading it (its own migration, frozen in
store/schema.py).
"""

from __future__ import annotations

import ast
import importlib
import json
import lzma
import shutil
import sys
from pathlib import Path

import duckdb
import pytest

from pipedeck.backends import Span
from pipedeck.store import RunStore, StoreError, schema
from pipedeck.store.schema import _v3
from pipedeck.store.transaction import transaction
from tests.flags import assert_flags_give_back
from tests.paths import DATA

FIXTURE = DATA / "store-v2.duckdb.xz"
ORDER = {
    "runs": "id",
    "run_ranks": "run_id, seq",
    "requests": "run_id, seq",
    "spans": "run_id, seq",
    "studies": "name",
    "trials": "study, number",
    "configs": "name",
    "schema_version": "version",
}
ZONED = {
    "runs": "created_at",
    "studies": "created_at",
    "trials": "completed_at",
    "configs": "created_at",
    "schema_version": "applied_at",
}


@pytest.fixture()
def v2_store(tmp_path) -> Path:
    path = tmp_path / "v2.duckdb"
    with lzma.open(FIXTURE) as src, path.open("wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


def tables(path: Path) -> dict[str, list[dict[str, object]]]:
    """Every row of every table as dicts (zoned timestamps read as naive UTC, as schema 2 held them)."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        out = {}
        for table, order in ORDER.items():
            names = [
                name
                for (name,) in con.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
                    [table],
                ).fetchall()
            ]
            select = ", ".join(
                f"timezone('UTC', {n}) AS {n}" if n == ZONED.get(table) and _zoned(con, table, n) else n for n in names
            )
            cursor = con.execute(f"SELECT {select} FROM {table} ORDER BY {order}")
            out[table] = [dict(zip(names, row)) for row in cursor.fetchall()]
        return out
    finally:
        con.close()


def _zoned(con: duckdb.DuckDBPyConnection, table: str, column: str) -> bool:
    return (
        con.execute(
            "SELECT data_type FROM information_schema.columns WHERE table_name = ? AND column_name = ?", [table, column]
        ).fetchone()[0]
        == "TIMESTAMP WITH TIME ZONE"
    )


def column_types(path: Path) -> dict[tuple[str, str], tuple[str, str]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return {
            (t, c): (kind, nullable)
            for t, c, kind, nullable in con.execute(
                "SELECT table_name, column_name, data_type, is_nullable FROM information_schema.columns"
            ).fetchall()
        }
    finally:
        con.close()


def test_the_fixture_is_what_schema_2_wrote(v2_store):
    before = tables(v2_store)
    assert [row["version"] for row in before["schema_version"]] == [1, 2]
    types = column_types(v2_store)
    assert types["runs", "created_at"] == ("TIMESTAMP", "NO") and types["spans", "request"] == ("BIGINT", "NO")
    pruned = [t for t in before["trials"] if t["state"] == "PRUNED" and t["objective"] is not None]
    assert pruned and all(json.loads(t["metrics"])["goodput_rps"] == 0 for t in pruned)  # the complaint
    assert all(t["run_id"] is None for t in before["trials"])
    assert any("parallelism" in json.loads(t["params"]) for t in before["trials"])
    assert any(s["request"] == -1 for s in before["spans"]) and any(s["request"] >= 0 for s in before["spans"])


def test_reading_a_schema_2_store_read_only_is_refused_untouched(v2_store):
    data = v2_store.read_bytes()
    with pytest.raises(StoreError) as err:
        RunStore.open(v2_store, read_only=True)
    assert str(err.value) == (
        f"db: {v2_store} has schema version 2, older than 4; open it once read-write "
        "(any pipedeck simulate) to upgrade it"
    )
    assert v2_store.read_bytes() == data


def test_a_schema_2_store_migrates_in_place_keeping_every_row(v2_store, far_from_utc):
    """Migrated where local time is UTC+5:30: a naive UTC time taken for local time would move."""
    before = tables(v2_store)
    RunStore.open(v2_store).close()
    after = tables(v2_store)
    types = column_types(v2_store)

    for table, column in ZONED.items():  # the same instants, now zoned
        assert types[table, column][0] == "TIMESTAMP WITH TIME ZONE"
    assert [row["version"] for row in after["schema_version"]] == [1, 2, 3, 4]
    assert after["schema_version"][:2] == before["schema_version"]
    for table in ("runs", "run_ranks", "requests", "studies", "configs"):
        assert after[table] == before[table], table

    assert (types["spans", "request"], types["spans", "chunk"]) == (("BIGINT", "YES"), ("INTEGER", "YES"))
    assert after["spans"] == [
        {
            **s,
            "request": None if s["request"] == -1 else s["request"],
            "chunk": None if s["chunk"] == -1 else s["chunk"],
        }
        for s in before["spans"]
    ]

    runs = {(r["study"], r["trial"]): r["id"] for r in before["runs"] if r["label"] in ("best", "default")}
    assert len(runs) == 2
    assert len(after["trials"]) == len(before["trials"])
    for old, new in zip(before["trials"], after["trials"]):
        key = (old["study"], old["number"])
        assert (new["study"], new["number"], new["state"], new["config"], new["duration_s"], new["completed_at"]) == (
            old["study"],
            old["number"],
            old["state"],
            old["config"],
            old["duration_s"],
            old["completed_at"],
        ), key
        assert new["run_id"] == runs.get(key), key
        metrics, old_metrics = json.loads(new["metrics"]), json.loads(old["metrics"])
        if old["state"] == "PRUNED" and old["objective"] is not None:
            assert new["objective"] is None  # a bound, kept where it belongs
            assert metrics == {"fails_slo_at_rps": old["objective"], "evaluations": old_metrics["evaluations"]}
        else:
            assert (new["objective"], metrics) == (old["objective"], old_metrics), key
        check_params(
            json.loads(old["params"]),
            json.loads(new["params"]),
            None if old["config"] is None else json.loads(old["config"]),
        )

    unrun = {t["number"]: json.loads(t["params"]) for t in after["trials"] if t["study"] == "v2-unrun"}
    # it never ran: its split is vLLM's 12,12,12,12 for 48 layers on 4 stages, moved by +1, 0, -1
    assert unrun[1] == {
        "tp": 2,
        "pp": 2,
        "mode": "vpp",
        "chunk": 4096,
        "max-running": 64,
        "layer-split": "13,12,11,12",
        "delay-scheduling": False,
    }
    assert unrun[2] == {"tp": 2, "pp": 2, "chunk": 999}


@pytest.fixture()
def v3_store(v2_store) -> Path:
    """The schema-2 fixture upgraded to schema 3 as the pipedeck of schema 3 did it."""
    con = duckdb.connect(str(v2_store))
    try:
        with transaction(con):
            _v3(con)
            con.execute("INSERT INTO schema_version VALUES (3, now())")
    finally:
        con.close()
    return v2_store


def test_a_schema_3_store_migrates_in_place_its_trials_gaining_a_null_start_and_worker(v3_store):
    before = tables(v3_store)
    assert [row["version"] for row in before["schema_version"]] == [1, 2, 3]
    assert ("trials", "started_at") not in column_types(v3_store)
    RunStore.open(v3_store).close()
    after = tables(v3_store)
    types = column_types(v3_store)

    assert (types["trials", "started_at"], types["trials", "worker"]) == (
        ("TIMESTAMP WITH TIME ZONE", "YES"),
        ("VARCHAR", "YES"),
    )
    assert [row["version"] for row in after["schema_version"]] == [1, 2, 3, 4]
    assert after["schema_version"][:3] == before["schema_version"]
    for table in ("runs", "run_ranks", "requests", "spans", "studies", "configs"):
        assert after[table] == before[table], table
    assert before["trials"] and after["trials"] == [{**t, "started_at": None, "worker": None} for t in before["trials"]]
    with RunStore.open(v3_store, read_only=True) as store:
        assert {(t.started_at, t.worker) for t in store.trials("v2-demo")} == {(None, None)}


def check_params(old: dict[str, object], new: dict[str, object], config: dict[str, object] | None) -> None:
    """`new` names what `old` searched, by --fix name, with values --fix takes back to the config that ran."""
    names = set()
    for name in old:
        names |= (
            {"tp", "pp"}
            if name == "parallelism"
            else {"layer-split"}
            if name.startswith("split")
            else {name.replace("_", "-")}
        )
    assert set(new) == names
    if config is not None:
        assert_flags_give_back(new, config)


def test_the_migrated_store_answers_through_the_api(v2_store):
    before = tables(v2_store)
    with RunStore.open(v2_store) as store:
        best = store.best_trial("v2-demo")
        trials = store.trials("v2-demo")
        spans = store.get_run(1).result.spans
        assert store.save_run(store.get_run(1).result) == 4  # the id sequence goes on
        store.save_trial(
            "v2-demo",
            best.number,
            state=best.state,
            params=best.params,
            config=best.config,
            metrics=best.metrics,
            objective=best.objective,
            duration_s=best.duration_s,
        )  # synced again
        assert store.trials("v2-demo")[best.number] == best and best.run_id == 2
    complete = [t.objective for t in trials if t.state == "COMPLETE"]
    assert best.objective == max(complete) and best.state == "COMPLETE"
    assert all(t.objective is None for t in trials if t.state != "COMPLETE")
    assert all(t.completed_at.utcoffset().total_seconds() == 0 for t in trials)
    assert spans == [
        Span(s["rank"], s["stage"], s["batch"], s["request"], s["chunk"], s["start_s"], s["end_s"], s["kind"])
        for s in before["spans"]
        if s["run_id"] == 1
    ]


# what a migration, and every store module it imports, may import: the standard library, DuckDB, the store's own
# modules, and pipedeck's error base (exception classes only; it imports nothing)
FROZEN_ROOTS = {*sys.stdlib_module_names, "__future__", "duckdb"}
FROZEN_PIPEDECK = ("pipedeck.store", "pipedeck.errors")


def imports_outside_the_store(source: str, module: str) -> list[str]:
    """The modules `source` (module `module` of the store) imports, at any depth of its code, that a frozen
    migration may not: anything but FROZEN_ROOTS and FROZEN_PIPEDECK."""
    package = module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            names = [".".join(part for part in (base, node.module) if part)]
        else:
            continue
        found += [
            name
            for name in names
            if name.split(".")[0] not in FROZEN_ROOTS
            and not any(name == allowed or name.startswith(allowed + ".") for allowed in FROZEN_PIPEDECK)
        ]
    return found


def store_modules_imported_by(module: str, seen: set[str]) -> set[str]:
    """`module` and every store module it imports, directly or through each other."""
    seen.add(module)
    source = Path(importlib.import_module(module).__file__).read_text()
    package = module.rpartition(".")[0]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            name = f"{package}.{node.module}"
            if name not in seen:
                store_modules_imported_by(name, seen)
    return seen


def test_the_migrations_are_frozen_they_import_nothing_of_pipedeck_outside_the_store():
    """A migration that called today's code (backends' layer split, say) would migrate an old store differently
    when that code changed: the schema module, and every store module it imports, import only the standard
    library, DuckDB, the store's own modules and pipedeck's error base."""
    modules = store_modules_imported_by(schema.__name__, set())
    assert {"pipedeck.store.schema", "pipedeck.store.connect", "pipedeck.store.transaction"} <= modules
    outside = {
        module: imports_outside_the_store(Path(importlib.import_module(module).__file__).read_text(), module)
        for module in modules
    }
    assert {module: names for module, names in outside.items() if names} == {}


@pytest.mark.parametrize(
    ("line", "outside"),
    [
        ("from ..backends.config import default_layer_split", "pipedeck.backends.config"),
        ("from ..backends import config", "pipedeck.backends"),
        ("import pipedeck.tuner.space", "pipedeck.tuner.space"),
        ("import numpy as np", "numpy"),
        ("def _v9(con):\n    from pipedeck.backends.result import RunResult", "pipedeck.backends.result"),
    ],
)
def test_a_migration_importing_todays_code_or_another_library_is_caught(line, outside):
    """The check above is not vacuous: the imports a migration must not make are each found, even in a function."""
    source = f"import json\nimport duckdb\nfrom .connect import not_a_store\nfrom ..errors import InputError\n{line}\n"
    assert imports_outside_the_store(source, "pipedeck.store.schema") == [outside]
