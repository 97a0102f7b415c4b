"""`RunStore`: runs, studies, trials and named configs in one DuckDB file, one transaction per write."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from types import TracebackType
from typing import Any

import duckdb
import numpy as np

from ..backends import RankTime, RequestRecord, RunResult, Span, live_from_dict, live_to_dict
from .columns import (
    RANK_COLUMNS,
    REQUEST_COLUMNS,
    SPAN_COLUMNS,
    SPAN_NONE,
    insert_columns,
    rank_columns,
    read_rows,
    request_columns,
    span_columns,
)
from .connect import check_path, connect, first_line, translate
from .errors import StoreFailure, StoreInputError
from .paths import default_db_path
from .rows import ConfigRow, RunRow, StoredRun, StudyRow, TrialRow
from .schema import known_version, migrate, utcnow
from .transaction import transaction

TRIAL_STATES = ("RUNNING", "WAITING", "COMPLETE", "PRUNED", "FAIL")
FINISHED_STATES = frozenset({"COMPLETE", "PRUNED", "FAIL"})

_RUN_COLUMNS = (
    "created_at, pipedeck_version, backend, scenario, seed, rate, model, hardware, mode, tp, pp, chunk, "
    "config, summary, makespan_s, steps, chunks, stage_executions, study, trial, label, live"
)
# TIMESTAMPTZ columns are read as naive UTC (DuckDB before 2.0 needs pytz to fetch a zoned value), then tagged UTC
_LIST_COLUMNS = (
    "id, timezone('UTC', created_at), backend, scenario, mode, model, hardware, tp, pp, chunk, rate, seed, study, trial, "
    "label, makespan_s, summary"
)
_TRIAL_COLUMNS = (
    "study, number, state, params, config, metrics, objective, duration_s, completed_at, run_id, started_at, worker"
)
_TRIAL_READ = _TRIAL_COLUMNS.replace("completed_at", "timezone('UTC', completed_at)").replace(
    "started_at", "timezone('UTC', started_at)"
)
_STUDY_COLUMNS = "name, created_at, scenario, objective, slo, settings, storage, pipedeck_version"
# One write transaction at a time in this process (DuckDB lets one process write a file; its connections'
# concurrent transactions would conflict on the same keys, and a check before an insert would miss the other's row).
_WRITING = threading.RLock()


def pipedeck_version() -> str:
    """The installed pipedeck version, recorded with every run and study."""
    try:
        return metadata.version("pipedeck")
    except metadata.PackageNotFoundError:
        return "0+unknown"


class RunStore:
    """A pipedeck run store: one DuckDB file holding runs, timelines, studies, trials and named configs."""

    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path, read_only: bool = False) -> None:
        self._con: duckdb.DuckDBPyConnection | None = con
        self.path = path
        self.read_only = read_only

    # -- opening and closing ---------------------------------------------------------

    @classmethod
    def open(cls, path: str | Path | None = None, *, read_only: bool = False, lock_timeout_s: float = 0.0) -> RunStore:
        """Open (creating file and schema if missing) the store at `path`, $PIPEDECK_DB or ./pipedeck.duckdb."""
        resolved = default_db_path(path)
        con = connect(resolved, read_only=read_only, lock_timeout_s=lock_timeout_s)
        try:
            migrate(con, resolved, read_only=read_only)
        except duckdb.Error as err:
            con.close()
            raise translate(err, resolved) from None
        except BaseException:
            con.close()
            raise
        return cls(con, resolved, read_only)

    @staticmethod
    def check_writable(path: str | Path | None = None) -> None:
        """Refuse, before any work and without creating or changing a file, a store a run could not be saved in.

        A missing file needs a folder that exists and can be written (the file is created by the first write);
        an existing one must be a writable pipedeck store of a schema this pipedeck knows (it is upgraded by the
        first write).
        """
        resolved = default_db_path(path)
        if not resolved.exists():
            check_path(resolved, read_only=False)
            if not os.access(resolved.parent, os.W_OK | os.X_OK):
                raise StoreInputError(f"db: folder {resolved.parent} is not writable")
            return
        con = connect(resolved, read_only=True)
        try:
            known_version(con, resolved)
        except duckdb.Error as err:
            raise translate(err, resolved) from None
        finally:
            con.close()
        if not os.access(resolved, os.W_OK):
            raise StoreInputError(f"db: {resolved} is not writable")

    def close(self) -> None:
        """Close the file (idempotent); its lock is released for other processes."""
        if self._con is not None:
            self._con.close()
            self._con = None

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RunStore({str(self.path)!r}{', read_only=True' if self.read_only else ''})"

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """The open DuckDB connection, for ad-hoc SQL."""
        if self._con is None:
            raise StoreFailure(f"db: {self.path} is closed")
        return self._con

    @contextmanager
    def _writing(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One write transaction; DuckDB failures become one-line StoreErrors naming the file."""
        if self.read_only:
            raise StoreFailure(f"db: {self.path} was opened read-only")
        con = self.con
        try:
            with _WRITING, transaction(con):
                yield con
        except duckdb.Error as err:
            raise StoreFailure(f"db: could not write to {self.path}: {first_line(str(err))}") from None

    @contextmanager
    def _reading(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One consistent read snapshot; DuckDB failures become one-line StoreErrors naming the file."""
        con = self.con
        try:
            with transaction(con):
                yield con
        except duckdb.Error as err:
            raise StoreFailure(f"db: could not read {self.path}: {first_line(str(err))}") from None

    # -- runs --------------------------------------------------------------------------

    def save_run(
        self,
        result: RunResult,
        *,
        study: str | None = None,
        trial: int | None = None,
        label: str | None = None,
        keep_timeline: bool = True,
        once: bool = False,
    ) -> int:
        """Write one run (config, summary, ranks, requests and, unless told not to, spans) in one transaction; return its id.

        `once`: the run of this study, trial and label is stored once (a study's best or default run): if one is
        stored already, checked in the same transaction, its id is returned and nothing is written.
        """
        if once and (study is None or trial is None or label is None):
            raise StoreInputError(
                f"once: a run saved once names its study, trial and label, got {study!r}, {trial!r}, {label!r}"
            )
        config = result.config
        row = [
            utcnow(),
            pipedeck_version(),
            result.backend,
            result.scenario,
            int(result.seed),
            _opt_float(result.rate),
            _opt_str(config.get("model")),
            _opt_str(config.get("hardware")),
            _opt_str(config.get("mode")),
            _opt_int(config.get("tp")),
            _opt_int(config.get("pp")),
            _opt_int(config.get("chunk")),
            dumps(config, "config"),
            dumps(result.summary(), "summary"),
            float(result.makespan_s),
            _opt_int(result.steps),
            _opt_int(result.chunks),
            _opt_int(result.stage_executions),
            study,
            _opt_int(trial),
            label,
            None if result.live is None else dumps(live_to_dict(result.live), "live"),
        ]
        tables: list[tuple[str, dict[str, np.ndarray], dict[str, int] | None]] = [
            ("run_ranks", rank_columns(0, result.ranks), None),
            ("requests", request_columns(0, result.records), None),
        ]
        if keep_timeline:
            tables.append(("spans", span_columns(0, result.spans), SPAN_NONE))
        marks = ", ".join("?" * len(row))
        with self._writing() as con:
            if once:
                ((stored,),) = con.execute(
                    "SELECT min(id) FROM runs WHERE study = ? AND trial = ? AND label = ?",
                    [study, _opt_int(trial), label],
                ).fetchall()
                if stored is not None:
                    return int(stored)
            ((run_id,),) = con.execute(
                f"INSERT INTO runs ({_RUN_COLUMNS}) VALUES ({marks}) RETURNING id", row
            ).fetchall()
            for table, columns, none in tables:
                columns["run_id"][:] = run_id
                insert_columns(con, table, columns, none)
        return int(run_id)

    def delete_run(self, run_id: int) -> None:
        """Delete one run and its ranks, requests and spans; trials that pointed at it keep a NULL run_id."""
        with self._writing() as con:
            self._require_run(con, run_id)
            for table in ("spans", "requests", "run_ranks"):
                con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
            con.execute("UPDATE trials SET run_id = NULL WHERE run_id = ?", [run_id])
            con.execute("DELETE FROM runs WHERE id = ?", [run_id])

    def get_run(self, run_id: int, *, timeline: bool = True) -> StoredRun:
        """One stored run with its RunResult rebuilt exactly (spans only when `timeline`)."""
        with self._reading() as con:
            row = con.execute(
                "SELECT id, timezone('UTC', created_at), study, trial, label, pipedeck_version, backend, scenario, seed, rate, config, "
                "makespan_s, steps, chunks, stage_executions, "
                # runs stored before preemptions were counted had none; a live run without the counter has NULL
                "coalesce(CAST(json_extract(summary, '$.preemptions') AS BIGINT), CASE WHEN live IS NULL THEN 0 END), "
                "live FROM runs WHERE id = ?",
                [run_id],
            ).fetchone()
            if row is None:
                raise self._no_run(run_id)
            (
                rid,
                created,
                study,
                trial,
                label,
                version,
                backend,
                scenario,
                seed,
                rate,
                config,
                makespan,
                steps,
                chunks,
                execs,
                preemptions,
                live,
            ) = row
            result = RunResult(
                config=json.loads(config),
                scenario=scenario,
                backend=backend,
                seed=seed,
                rate=rate,
                records=read_rows(con, "requests", rid, REQUEST_COLUMNS, RequestRecord),
                ranks=read_rows(con, "run_ranks", rid, RANK_COLUMNS, RankTime),
                makespan_s=makespan,
                steps=steps,
                chunks=chunks,
                stage_executions=execs,
                spans=read_rows(con, "spans", rid, SPAN_COLUMNS, Span, SPAN_NONE) if timeline else [],
                preemptions=preemptions,
                live=None if live is None else live_from_dict(json.loads(live)),
            )
        return StoredRun(
            id=rid,
            created_at=_utc(created),
            study=study,
            trial=trial,
            label=label,
            pipedeck_version=version,
            result=result,
        )

    def list_runs(
        self, study: str | None = None, scenario: str | None = None, mode: str | None = None, limit: int | None = None
    ) -> list[RunRow]:
        """Stored runs, newest first, without their requests and spans, optionally filtered."""
        where, params = [], []
        for column, value in (("study", study), ("scenario", scenario), ("mode", mode)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        sql = f"SELECT {_LIST_COLUMNS} FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id DESC"
        if limit is not None:
            if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
                raise StoreInputError(f"limit: must be a positive integer, got {limit!r}")
            sql += f" LIMIT {limit}"
        with self._reading() as con:
            rows = con.execute(sql, params).fetchall()
        return [_run_row(row) for row in rows]

    def count_spans(self, run_id: int) -> int:
        """How many timeline spans the run has stored."""
        with self._reading() as con:
            self._require_run(con, run_id)
            ((count,),) = con.execute("SELECT count(*) FROM spans WHERE run_id = ?", [run_id]).fetchall()
            return int(count)

    # -- studies and trials --------------------------------------------------------------

    def save_study(
        self,
        name: str,
        *,
        scenario: str,
        objective: str,
        slo: Mapping[str, object],
        settings: dict[str, object],
        storage: str,
    ) -> None:
        """Create the study, or update its settings if it exists (its creation time is kept)."""
        _require_name(name, "study")
        row = [
            name,
            utcnow(),
            scenario,
            objective,
            dumps(slo, "slo"),
            dumps(settings, "settings"),
            storage,
            pipedeck_version(),
        ]
        with self._writing() as con:
            con.execute(
                f"INSERT INTO studies ({_STUDY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
                "scenario = excluded.scenario, objective = excluded.objective, slo = excluded.slo, "
                "settings = excluded.settings, storage = excluded.storage, pipedeck_version = excluded.pipedeck_version",
                row,
            )

    def get_study(self, name: str) -> StudyRow:
        """One study and its trial counts; StoreError if there is none by that name."""
        with self._reading() as con:
            rows = con.execute(_STUDIES_SQL + " WHERE s.name = ? GROUP BY ALL", [name]).fetchall()
        if not rows:
            raise self._no_study(name)
        return _study_row(rows[0])

    def list_studies(self) -> list[StudyRow]:
        """Every study, oldest first."""
        with self._reading() as con:
            rows = con.execute(_STUDIES_SQL + " GROUP BY ALL ORDER BY created_utc, s.name").fetchall()
        return [_study_row(row) for row in rows]

    def save_trial(
        self,
        study: str,
        number: int,
        *,
        state: str,
        params: dict[str, object],
        config: dict[str, object] | None,
        metrics: dict[str, object],
        objective: float | None,
        duration_s: float | None,
        run_id: int | None = None,
        completed_at: datetime | None = None,
        started_at: datetime | None = None,
        worker: str | None = None,
    ) -> None:
        """Insert or replace trial (study, number): syncing the same trial twice leaves one row.

        Only a COMPLETE trial has an objective. Without `run_id` the trial keeps the run it is linked to
        (see `link_run`); without `completed_at` a finished trial keeps its first completion time; without
        `started_at` (when it started) or `worker` (which tuner worker ran it, "host:pid") it keeps the stored ones.
        """
        state = _trial_state(state)
        if isinstance(number, bool) or not isinstance(number, (int, np.integer)) or number < 0:
            raise StoreInputError(f"number: must be a non-negative trial number, got {number!r}")
        if objective is not None and state != "COMPLETE":
            raise StoreInputError(f"objective: only a COMPLETE trial has one, got {objective!r} for a {state} trial")
        row = [
            study,
            int(number),
            state,
            dumps(params, "params"),
            None if config is None else dumps(config, "config"),
            dumps(metrics, "metrics"),
            _opt_float(objective),
            _opt_float(duration_s),
            None if completed_at is None else _zoned(completed_at),
            _opt_int(run_id),
            None if started_at is None else _zoned(started_at),
            _opt_str(worker),
        ]
        with self._writing() as con:
            if con.execute("SELECT 1 FROM studies WHERE name = ?", [study]).fetchone() is None:
                raise self._no_study(study)
            old = (
                con.execute(
                    "SELECT timezone('UTC', completed_at), run_id, timezone('UTC', started_at), worker "
                    "FROM trials WHERE study = ? AND number = ?",
                    [study, int(number)],
                ).fetchone()
                or (None,) * 4
            )
            if row[8] is None and state in FINISHED_STATES:
                row[8] = _opt_utc(old[0]) or utcnow()
            for i, kept in ((9, old[1]), (10, _opt_utc(old[2])), (11, old[3])):
                if row[i] is None:
                    row[i] = kept
            marks = ", ".join("?" * len(row))
            con.execute(f"INSERT OR REPLACE INTO trials ({_TRIAL_COLUMNS}) VALUES ({marks})", row)

    def link_run(self, study: str, number: int, run_id: int) -> None:
        """Point trial (study, number) at `run_id`, a stored run of it (the best or default config's)."""
        with self._writing() as con:
            self._require_run(con, run_id)
            if (
                con.execute("SELECT 1 FROM trials WHERE study = ? AND number = ?", [study, int(number)]).fetchone()
                is None
            ):
                raise StoreInputError(f"trial: no trial {number} of study {study!r} in {self.path}")
            # (no UPDATE ... RETURNING: on DuckDB 1.1 it leaves the key index thinking the row is there twice)
            con.execute("UPDATE trials SET run_id = ? WHERE study = ? AND number = ?", [run_id, study, int(number)])

    def trials(self, study: str) -> list[TrialRow]:
        """The study's trials ordered by number."""
        with self._reading() as con:
            if con.execute("SELECT 1 FROM studies WHERE name = ?", [study]).fetchone() is None:
                raise self._no_study(study)
            rows = con.execute(f"SELECT {_TRIAL_READ} FROM trials WHERE study = ? ORDER BY number", [study]).fetchall()
        return [_trial_row(row) for row in rows]

    def best_trial(self, study: str, *, descending: bool = True) -> TrialRow | None:
        """The completed trial with the best objective, highest first unless not `descending` (ties: lowest
        number); None if none completed. The store keeps no direction: the caller's objective knows it."""
        order = "DESC" if descending else "ASC"
        with self._reading() as con:
            if con.execute("SELECT 1 FROM studies WHERE name = ?", [study]).fetchone() is None:
                raise self._no_study(study)
            row = con.execute(
                f"SELECT {_TRIAL_READ} FROM trials WHERE study = ? AND state = 'COMPLETE' AND objective IS NOT NULL "
                f"AND NOT isnan(objective) ORDER BY objective {order}, number LIMIT 1",
                [study],
            ).fetchone()
        return None if row is None else _trial_row(row)

    # -- named configs --------------------------------------------------------------------

    def save_config(self, name: str, config: dict[str, object]) -> None:
        """Save a serving config under `name`, replacing one of the same name (its creation time is kept)."""
        _require_name(name, "config")
        if not isinstance(config, dict):
            raise StoreInputError(f"config: must be a dict of config fields, got {type(config).__name__}")
        with self._writing() as con:
            con.execute(
                "INSERT INTO configs (name, created_at, config) VALUES (?, ?, ?) "
                "ON CONFLICT (name) DO UPDATE SET config = excluded.config",
                [name, utcnow(), dumps(config, "config")],
            )

    def get_config(self, name: str) -> dict[str, object]:
        """The config saved under `name`; StoreError if there is none."""
        with self._reading() as con:
            row = con.execute("SELECT config FROM configs WHERE name = ?", [name]).fetchone()
        if row is None:
            raise StoreInputError(f"config: no config named {name!r} in {self.path}")
        config: dict[str, object] = json.loads(row[0])
        return config

    def list_configs(self) -> list[ConfigRow]:
        """Every named config, by name."""
        with self._reading() as con:
            rows = con.execute("SELECT name, timezone('UTC', created_at), config FROM configs ORDER BY name").fetchall()
        return [
            ConfigRow(name=name, created_at=_utc(created), config=json.loads(config)) for name, created, config in rows
        ]

    # -- helpers ----------------------------------------------------------------------------

    def _require_run(self, con: duckdb.DuckDBPyConnection, run_id: int) -> None:
        if con.execute("SELECT 1 FROM runs WHERE id = ?", [run_id]).fetchone() is None:
            raise self._no_run(run_id)

    def _no_run(self, run_id: int) -> StoreInputError:
        return StoreInputError(f"run: no run {run_id} in {self.path}")

    def _no_study(self, name: str) -> StoreInputError:
        return StoreInputError(f"study: no study {name!r} in {self.path}")


_STUDIES_SQL = (
    "SELECT s.name, timezone('UTC', s.created_at) AS created_utc, s.scenario, s.objective, s.slo, s.settings, s.storage, s.pipedeck_version, "
    "count(t.number), count(t.number) FILTER (WHERE t.state = 'COMPLETE') "
    "FROM studies s LEFT JOIN trials t ON t.study = s.name"
)


def dumps(value: object, field: str) -> str:
    """`value` as JSON text (numpy scalars and arrays as plain numbers and lists; NaN and Infinity kept)."""
    try:
        return json.dumps(value, default=_plain)
    except (TypeError, ValueError) as err:
        raise StoreInputError(f"{field}: cannot store as JSON: {err}") from None


def _plain(value: object) -> object:
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _loads(text: str | None) -> Any:
    """A JSON column's value as json.loads gives it (None for NULL); the row types say what each holds."""
    return None if text is None else json.loads(text)


def _utc(value: datetime) -> datetime:
    """A timestamp read as UTC (the queries convert with timezone('UTC', ...)) as a zoned datetime."""
    return value.replace(tzinfo=UTC)


def _opt_utc(value: datetime | None) -> datetime | None:
    return None if value is None else _utc(value)


def _zoned(value: datetime) -> datetime:
    """A datetime as a zoned instant (a naive one is taken as UTC), as TIMESTAMPTZ columns store it."""
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _opt_float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def _opt_int(value: object) -> int | None:
    return None if value is None else int(value)  # type: ignore[call-overload]


def _opt_str(value: object) -> str | None:
    return None if value is None else str(value)


def _require_name(name: object, what: str) -> None:
    if not isinstance(name, str) or not name.strip():
        raise StoreInputError(f"{what}: a name must be a non-empty string, got {name!r}")


def _trial_state(state: object) -> str:
    text = str(state).rsplit(".", 1)[-1].upper()  # accepts optuna's TrialState.COMPLETE as well as "complete"
    if text not in TRIAL_STATES:
        raise StoreInputError(f"state: unknown trial state {state!r}; allowed: {', '.join(TRIAL_STATES)}")
    return text


def _run_row(row: tuple[Any, ...]) -> RunRow:
    (
        rid,
        created,
        backend,
        scenario,
        mode,
        model,
        hardware,
        tp,
        pp,
        chunk,
        rate,
        seed,
        study,
        trial,
        label,
        makespan,
        summary,
    ) = row
    s = json.loads(summary)
    return RunRow(
        id=rid,
        created_at=_utc(created),
        backend=backend,
        scenario=scenario,
        mode=mode,
        model=model,
        hardware=hardware,
        tp=tp,
        pp=pp,
        chunk=chunk,
        rate=rate,
        seed=seed,
        study=study,
        trial=trial,
        label=label,
        requests=s["requests"],
        ttft_p90_s=_p90(s["ttft_s"]),
        tpot_p90_s=_tpot_p90(s["tpot_s"]),
        throughput_tok_s=s["throughput_tok_s"],
        makespan_s=makespan,
        bubble_ratio=s["bubble_ratio"],
        failed=s["live"]["failed"] if s.get("live") else None,
    )


def _p90(latency: dict[str, float] | None) -> float | None:
    """A stored summary's P90 of a latency; None where no request measured it (a run whose every request failed)."""
    return None if latency is None else latency["p90"]


def _tpot_p90(tpot: dict[str, float] | None) -> float | None:
    """A stored summary's TPOT P90; None where the run has no TPOT.

    Runs stored before one-token outputs had no TPOT counted theirs as 0, and a
    measured TPOT is never 0, so a stored 0 reads as none too.
    """
    return tpot["p90"] if tpot and tpot["p90"] > 0 else None


def _study_row(row: tuple[Any, ...]) -> StudyRow:
    name, created, scenario, objective, slo, settings, storage, version, trials, completed = row
    return StudyRow(
        name=name,
        created_at=_utc(created),
        scenario=scenario,
        objective=objective,
        slo=_loads(slo),
        settings=_loads(settings),
        storage=storage,
        pipedeck_version=version,
        trials=int(trials),
        completed=int(completed),
    )


def _trial_row(row: tuple[Any, ...]) -> TrialRow:
    study, number, state, params, config, metrics, objective, duration, completed, run_id, started, worker = row
    return TrialRow(
        study=study,
        number=number,
        state=state,
        params=_loads(params),
        config=_loads(config),
        metrics=_loads(metrics),
        objective=objective,
        duration_s=duration,
        completed_at=_opt_utc(completed),
        run_id=run_id,
        started_at=_opt_utc(started),
        worker=worker,
    )
