"""The store's tables and the ordered migrations that create and upgrade them."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import duckdb

from .connect import not_a_store
from .errors import StoreError
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


MIGRATIONS: list[Migration] = [_v1, _v2]
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
    (version,) = con.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()
    return int(version)


def migrate(con: duckdb.DuckDBPyConnection, path: Path, *, read_only: bool = False) -> int:
    """Bring the schema up to SCHEMA_VERSION in one transaction; return the version found."""
    with _MIGRATING:
        return _migrate(con, path, read_only)


def _migrate(con: duckdb.DuckDBPyConnection, path: Path, read_only: bool) -> int:
    found = current_version(con, path)
    if found > SCHEMA_VERSION:
        raise StoreError(f"db: {path} has schema version {found}, newer than this pipedeck knows ({SCHEMA_VERSION}); upgrade pipedeck")
    if found == SCHEMA_VERSION:
        return found
    if read_only:
        raise StoreError(f"db: {path} has schema version {found}, older than {SCHEMA_VERSION}; open it once read-write (any pipedeck simulate) to upgrade it")
    with transaction(con):
        con.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL, applied_at TIMESTAMP NOT NULL)")
        for version in range(found + 1, SCHEMA_VERSION + 1):
            MIGRATIONS[version - 1](con)
            con.execute("INSERT INTO schema_version VALUES (?, ?)", [version, utcnow()])
    return found


def utcnow() -> datetime:
    """Now in UTC, naive, as the store's TIMESTAMP columns hold it."""
    return datetime.now(timezone.utc).replace(tzinfo=None)
