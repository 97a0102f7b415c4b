"""The store's tables and the ordered migrations that create and upgrade them."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import duckdb

from .connect import not_a_store
from .errors import StoreInputError
from .transaction import transaction

Migration = Callable[[duckdb.DuckDBPyConnection], None]
# Connections of one process share the database; two creating the tables at once would conflict. Another
# process cannot open the file for writing meanwhile (DuckDB locks it), so a process-wide lock suffices.
_MIGRATING = threading.Lock()

_V1 = """
CREATE SEQUENCE runs_id_seq START 1;
CREATE TABLE runs (
    id BIGINT PRIMARY KEY DEFAULT nextval('runs_id_seq'),
    created_at TIMESTAMP NOT NULL,
    pipedeck_version VARCHAR NOT NULL,
    backend VARCHAR NOT NULL,
    scenario VARCHAR NOT NULL,
    seed BIGINT NOT NULL,
    rate DOUBLE,
    model VARCHAR,
    hardware VARCHAR,
    mode VARCHAR,
    tp INTEGER,
    pp INTEGER,
    chunk BIGINT,
    config JSON NOT NULL,
    summary JSON NOT NULL,
    makespan_s DOUBLE NOT NULL,
    steps BIGINT NOT NULL,
    chunks BIGINT NOT NULL,
    stage_executions BIGINT NOT NULL,
    study VARCHAR,
    trial INTEGER,
    label VARCHAR
);
CREATE TABLE run_ranks (
    run_id BIGINT NOT NULL,
    seq INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    compute DOUBLE NOT NULL,
    exposed_comm DOUBLE NOT NULL,
    bubble DOUBLE NOT NULL,
    idle DOUBLE NOT NULL
);
CREATE TABLE requests (
    run_id BIGINT NOT NULL,
    seq INTEGER NOT NULL,
    id BIGINT NOT NULL,
    arrival_s DOUBLE NOT NULL,
    prompt_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    first_token_s DOUBLE NOT NULL,
    finish_s DOUBLE NOT NULL
);
CREATE TABLE spans (
    run_id BIGINT NOT NULL,
    seq INTEGER NOT NULL,
    rank INTEGER NOT NULL,
    stage INTEGER NOT NULL,
    batch BIGINT NOT NULL,
    request BIGINT NOT NULL,
    chunk INTEGER NOT NULL,
    start_s DOUBLE NOT NULL,
    end_s DOUBLE NOT NULL,
    kind VARCHAR NOT NULL
);
CREATE TABLE studies (
    name VARCHAR PRIMARY KEY,
    created_at TIMESTAMP NOT NULL,
    scenario VARCHAR,
    objective VARCHAR,
    slo JSON,
    settings JSON,
    storage VARCHAR,
    pipedeck_version VARCHAR NOT NULL
);
CREATE TABLE trials (
    study VARCHAR NOT NULL,
    number INTEGER NOT NULL,
    state VARCHAR NOT NULL,
    params JSON,
    config JSON,
    metrics JSON,
    objective DOUBLE,
    duration_s DOUBLE,
    completed_at TIMESTAMP,
    run_id BIGINT,
    PRIMARY KEY (study, number)
);
CREATE TABLE configs (
    name VARCHAR PRIMARY KEY,
    created_at TIMESTAMP NOT NULL,
    config JSON NOT NULL
);
"""


def _v1(con: duckdb.DuckDBPyConnection) -> None:
    """Runs with their ranks, requests and spans; studies, trials and named configs."""
    con.execute(_V1)


def _v2(con: duckdb.DuckDBPyConnection) -> None:
    """Live runs: step counts only where a backend counts them, and the load generator's own record."""
    for column in ("steps", "chunks", "stage_executions"):
        con.execute(f"ALTER TABLE runs ALTER COLUMN {column} DROP NOT NULL")
    con.execute("ALTER TABLE runs ADD COLUMN live JSON")


# every timestamp column: schema 2 held naive UTC, schema 3 a zoned instant
TIMESTAMP_COLUMNS = (
    ("schema_version", "applied_at"),
    ("runs", "created_at"),
    ("studies", "created_at"),
    ("trials", "completed_at"),
    ("configs", "created_at"),
)
_V2_SPLIT = re.compile(r"split(\d+)_(\d+)")  # schema 2's layer-split shifts: split{stages}_{stage}
_PRUNED_PLACEHOLDERS = ("goodput_rps", "attainment", "capped")  # a pruned goodput search's, all 0 or false


def _v3(con: duckdb.DuckDBPyConnection) -> None:
    """Honest answers to SQL: zoned times, NULL for "none", no objective for a pruned trial, trials linked to
    their stored runs, and parameters under the names and values `--fix` takes."""
    for table, column in TIMESTAMP_COLUMNS:
        if _column_type(con, table, column) == "TIMESTAMP":  # a new store's schema_version is zoned already
            con.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE TIMESTAMPTZ USING timezone('UTC', {column})")
    for column in ("request", "chunk"):  # -1 stood for a decode-only batch
        con.execute(f"ALTER TABLE spans ALTER COLUMN {column} DROP NOT NULL")
        con.execute(f"UPDATE spans SET {column} = NULL WHERE {column} = -1")
    runs = dict(
        ((study, trial), run_id)
        for study, trial, run_id in con.execute(
            "SELECT study, trial, min(id) FROM runs WHERE label IN ('best', 'default') AND study IS NOT NULL "
            "AND trial IS NOT NULL GROUP BY study, trial"
        ).fetchall()
    )
    trials = [
        (
            study,
            number,
            state,
            json.loads(params or "{}"),
            None if config is None else json.loads(config),
            json.loads(metrics or "{}"),
            objective,
            run_id,
        )
        for study, number, state, params, config, metrics, objective, run_id in con.execute(
            "SELECT study, number, state, params, config, metrics, objective, run_id FROM trials"
        ).fetchall()
    ]
    layers = {
        study: sum(config["layer_split"])
        for study, _, _, _, config, *_ in trials
        if config and config.get("layer_split")
    }  # one model per study: any trial that ran says
    for study, number, state, params, config, metrics, objective, run_id in trials:
        if state == "PRUNED" and objective is not None:  # the rate the pruned search failed at, not a result
            if metrics.get("goodput_rps") == 0:
                metrics = {k: v for k, v in metrics.items() if k not in _PRUNED_PLACEHOLDERS}
            metrics["fails_slo_at_rps"], objective = objective, None
        con.execute(
            "UPDATE trials SET params = ?, metrics = ?, objective = ?, run_id = ? WHERE study = ? AND number = ?",
            [
                json.dumps(_v3_params(params, config, layers.get(study))),
                json.dumps(metrics),
                objective,
                run_id if run_id is not None else runs.get((study, number)),
                study,
                number,
            ],
        )


def _column_type(con: duckdb.DuckDBPyConnection, table: str, column: str) -> str:
    data_type: str
    ((data_type,),) = con.execute(
        "SELECT data_type FROM information_schema.columns WHERE table_catalog = current_database() "
        "AND table_schema = 'main' AND table_name = ? AND column_name = ?",
        [table, column],
    ).fetchall()
    return data_type


def _v3_params(params: dict[str, object], config: dict[str, object] | None, layers: int | None) -> dict[str, object]:
    """Schema 2's Optuna parameters under their --fix names, with the values the trial ran (from its config).

    `parallelism` "8x2" became tp and pp; the layer-split shifts `split{n}_{i}`
    from vLLM's even split became `layer-split` "15,16,15,15"; a trial without
    a config (it could not run) rebuilds its split from the study's layer
    count, and keeps its shifts when no trial of the study says what that is.
    """
    named: dict[str, object] = {}
    shifts: dict[int, dict[int, int]] = {}
    for name, value in params.items():
        shift = _V2_SPLIT.fullmatch(name)
        if shift:
            shifts.setdefault(int(shift[1]), {})[int(shift[2])] = int(value)  # type: ignore[call-overload]
            named.setdefault("layer-split", None)
        elif name == "parallelism":
            named["tp"], named["pp"] = (int(part) for part in str(value).split("x"))
        else:
            named[name.replace("_", "-")] = value
    if config is not None:
        for key in named:
            field = key.replace("-", "_")
            if config.get(field) is not None:
                named[key] = ",".join(map(str, config[field])) if field == "layer_split" else config[field]  # type: ignore[call-overload]
    elif len(shifts) == 1 and layers:
        ((stages, moved),) = shifts.items()
        split = [base + moved.get(i, 0) for i, base in enumerate(_v2_even_split(layers, stages)[:-1])]
        named["layer-split"] = ",".join(map(str, [*split, layers - sum(split)]))
    if named.get("layer-split") is None:
        named.pop("layer-split", None)
        named.update({f"split{n}_{i}": shift for n, moved in shifts.items() for i, shift in moved.items()})
    return named


def _v2_even_split(layers: int, stages: int) -> list[int]:
    """The split schema 2's shifts were measured from, frozen as it was then (vLLM's: even, remainder layers added
    from the second-to-last stage backwards), so that this migration never changes with today's code."""
    split = [layers // stages] * stages
    for i in range(2, layers % stages + 2):
        split[-i] += 1
    return split


def _v4(con: duckdb.DuckDBPyConnection) -> None:
    """Trials say when they started and which worker ran them; NULL for the trials stored before."""
    con.execute("ALTER TABLE trials ADD COLUMN started_at TIMESTAMPTZ")
    con.execute("ALTER TABLE trials ADD COLUMN worker VARCHAR")


MIGRATIONS: list[Migration] = [_v1, _v2, _v3, _v4]
SCHEMA_VERSION = len(MIGRATIONS)


def tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    """Names of the tables in the database's main schema."""
    rows = con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' AND table_catalog = current_database()"
    ).fetchall()
    return {name for (name,) in rows}


def current_version(con: duckdb.DuckDBPyConnection, path: Path) -> int:
    """The schema version the file is at: 0 for an empty database; StoreError for someone else's database."""
    names = tables(con)
    if "schema_version" not in names:
        if names:
            raise not_a_store(path)
        return 0
    ((version,),) = con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchall()
    return int(version)


def migrate(con: duckdb.DuckDBPyConnection, path: Path, *, read_only: bool = False) -> int:
    """Bring the schema up to SCHEMA_VERSION in one transaction; return the version found."""
    with _MIGRATING:
        return _migrate(con, path, read_only)


def known_version(con: duckdb.DuckDBPyConnection, path: Path) -> int:
    """The file's schema version (as `current_version`); StoreError if it is newer than this pipedeck knows."""
    found = current_version(con, path)
    if found > SCHEMA_VERSION:
        raise StoreInputError(
            f"db: {path} has schema version {found}, newer than this pipedeck knows ({SCHEMA_VERSION}); upgrade pipedeck"
        )
    return found


def _migrate(con: duckdb.DuckDBPyConnection, path: Path, read_only: bool) -> int:
    found = known_version(con, path)
    if found == SCHEMA_VERSION:
        return found
    if read_only:
        raise StoreInputError(
            f"db: {path} has schema version {found}, older than {SCHEMA_VERSION}; open it once read-write (any pipedeck simulate) to upgrade it"
        )
    with transaction(con):
        con.execute(
            "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, applied_at TIMESTAMPTZ NOT NULL)"
        )
        for version in range(found + 1, SCHEMA_VERSION + 1):
            MIGRATIONS[version - 1](con)
        applied = utcnow()  # recorded once every migration ran, when schema_version.applied_at is zoned
        for version in range(found + 1, SCHEMA_VERSION + 1):
            con.execute("INSERT INTO schema_version VALUES (?, ?)", [version, applied])
    return found


def utcnow() -> datetime:
    """Now, in UTC and zoned, as the store's TIMESTAMPTZ columns take it whatever the session's TimeZone."""
    return datetime.now(UTC)
