"""Optuna storages: open the one `--storage` names, and lock a study on it.

A storage is a journal file (the default, beside the run store), an SQLite
file (`sqlite:///FILE`) or a PostgreSQL database
(`postgresql://USER@HOST:PORT/DATABASE`, through psycopg 3), which workers on
several hosts share. Every pipedeck process working on a study takes the
study's lock around the steps that must not interleave: creating the schema
and the study, registering a worker, admitting a trial, claiming a config.
On PostgreSQL it is an advisory lock, which holds across hosts and is freed
when its holder dies; on a file it is a file lock on a lock file beside the
file, which its holder removes as it releases it (StudyLock).
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import IO

import optuna
import sqlalchemy
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from sqlalchemy.pool import NullPool

from ..backends import ConfigError
from ..errors import RuntimeFailure
from .journal import check_journal

ALLOWED = "a journal file path, sqlite:///FILE or postgresql://USER@HOST:PORT/DATABASE"
POSTGRES_SCHEMES = {"postgresql": "postgresql+psycopg", "postgresql+psycopg": "postgresql+psycopg"}
NO_DRIVER = "postgresql:// needs the PostgreSQL driver psycopg 3; pip install 'pipedeck[postgres]'"
HEARTBEAT_S = 10  # seconds between a running trial's heartbeats on a database storage
GRACE_BEATS = 3  # a running trial whose worker missed this many heartbeats is failed (and retried)
CONNECT_TIMEOUT_S = 10
# The server probes a lock holder's connection after 30 s of silence, so a lock held by a host that vanished
# (power, network) is freed within about a minute rather than the system's default two hours.
LOCK_KEEPALIVE = "-c tcp_keepalives_idle=30 -c tcp_keepalives_interval=10 -c tcp_keepalives_count=3"
LOCK_SUFFIX = ".pipedeck-lock"  # beside a journal or SQLite file (Optuna's own journal lock is FILE.lock)


def default_storage(db_path: str | Path) -> str:
    """The journal file beside the run store: pipedeck.duckdb -> pipedeck.optuna.jsonl."""
    return str(Path(db_path).with_suffix(".optuna.jsonl"))


def storage_kind(url: str) -> str:
    """'journal', 'sqlite' or 'postgresql'; ConfigError for anything else."""
    if "://" not in url:
        return "journal"
    scheme = url.partition("://")[0]
    if scheme == "sqlite":
        return "sqlite"
    if scheme in POSTGRES_SCHEMES:
        return "postgresql"
    raise ConfigError(f"storage: {shown(url)!r} is not a storage; allowed: {ALLOWED}")


def shown(url: str) -> str:
    """The URL as it may be printed or stored: a password in it becomes ***."""
    if "://" not in url:
        return url
    try:
        return sqlalchemy.engine.make_url(url).render_as_string(hide_password=True)
    except sqlalchemy.exc.ArgumentError:
        return url.partition("://")[0] + "://..."


def file_of(url: str) -> Path:
    """The file a journal or SQLite storage keeps the study in."""
    if storage_kind(url) == "journal":
        return Path(url)
    database = sqlalchemy.engine.make_url(url).database
    if not database or database == ":memory:":
        raise ConfigError(f"storage: {url!r} names no file; allowed: {ALLOWED}")
    return Path(database)


def has_heartbeat(url: str) -> bool:
    """Whether running trials on this storage beat a heartbeat (databases do; journal files cannot)."""
    return storage_kind(url) != "journal"


def _engine_url(url: str) -> str:
    """The SQLAlchemy URL: postgresql:// always means psycopg 3 (SQLAlchemy 2.0 would pick psycopg2)."""
    scheme, _, rest = url.partition("://")
    return f"{POSTGRES_SCHEMES.get(scheme, scheme)}://{rest}"


def _engine_kwargs(url: str) -> dict[str, object]:
    return {"connect_args": {"connect_timeout": CONNECT_TIMEOUT_S}} if storage_kind(url) == "postgresql" else {}


def check_storage(url: str, existing: bool = False) -> None:
    """Fail with one line unless `url` is a storage pipedeck can open (an `existing` one): a database is reached,
    a journal file's lines are Optuna's records."""
    if storage_kind(url) == "postgresql":
        open_storage(url)
        return
    path = file_of(url)
    if existing and not path.is_file():
        raise ConfigError(f"storage: no file {path}")
    if not path.parent.is_dir():
        raise ConfigError(f"storage: no folder {path.parent} for {url}; allowed: {ALLOWED}")
    if storage_kind(url) == "journal" and path.is_file():
        check_journal(path)


def open_storage(
    url: str,
    heartbeat_s: int = HEARTBEAT_S,
    on_stale: Callable[[optuna.Study, optuna.trial.FrozenTrial], None] | None = None,
) -> optuna.storages.BaseStorage:
    """The storage `url` names; on a database, running trials beat every `heartbeat_s` seconds.

    A trial whose worker stopped beating for GRACE_BEATS heartbeats (killed,
    on any host) is failed by the next worker that looks, and `on_stale` hears
    of it. Journal files have no heartbeat (see recovery.recover_abandoned).
    """
    kind = storage_kind(url)
    if kind == "journal":
        if Path(url).is_file():
            check_journal(Path(url))  # a line that is not a record: one line naming it, not Optuna's traceback
        return JournalStorage(JournalFileBackend(url))
    if kind == "postgresql" and importlib.util.find_spec("psycopg") is None:
        raise ConfigError(f"storage: {NO_DRIVER}")
    try:
        with warnings.catch_warnings(), locked(url, ""):  # Optuna's schema creation races without the lock
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # heartbeat_interval
            return optuna.storages.RDBStorage(
                _engine_url(url),
                engine_kwargs=_engine_kwargs(url),
                heartbeat_interval=heartbeat_s,
                grace_period=GRACE_BEATS * heartbeat_s,
                heartbeat_stale_trial_callback=on_stale,
            )
    except ImportError:
        raise ConfigError(f"storage: {NO_DRIVER}") from None
    except sqlalchemy.exc.DBAPIError as err:
        raise unreachable(url, err) from None


def unreachable(url: str, err: sqlalchemy.exc.DBAPIError) -> ConfigError:
    """One line: the database (password hidden) and the driver's first line."""
    return ConfigError(f"storage: cannot use {shown(url)}: {_driver_reason(err)}")


class StorageLost(RuntimeFailure):
    """The study's database went away mid-tune (a restart, a failover, the network): one line, and the tune stops."""


LOST = (sqlalchemy.exc.DBAPIError, optuna.exceptions.StorageInternalError)  # how a database that went away fails


def lost_connection(url: str, err: Exception) -> StorageLost:
    """One line: the database (password hidden), the driver's first line, and what becomes of the trial in flight."""
    return StorageLost(
        f"storage: lost the connection to {shown(url)} ({_driver_reason(err)}); its trial in flight "
        "is failed and retried by the heartbeat: rerun the same command to resume"
    )


def _driver_reason(err: BaseException) -> str:
    """The first line of the database driver's error behind `err` (Optuna wraps SQLAlchemy's, which wraps it)."""
    cause: BaseException | None = err
    while cause is not None and not isinstance(cause, sqlalchemy.exc.DBAPIError):
        cause = cause.__cause__
    original = err if cause is None else cause.orig
    text = str(original).strip()
    return text.splitlines()[0] if text else type(original).__name__


class StudyLock:
    """An exclusive lock on one study of a storage (name "" for the storage itself), shared by every holder.

    Holders are processes or threads, on any host for PostgreSQL. Not
    re-entrant: take it around short steps, never inside itself. A
    PostgreSQL lock keeps its own connection until `close()`.

    On a file storage the lock is flock(2) on FILE[.<digest>].pipedeck-lock,
    and its holder deletes that file just before it unlocks it, so no empty
    lock files pile up. That is safe because a holder counts only when, once
    locked, the path still names the file it locked: a waiter woken on a
    deleted file, or one that opened the path before an earlier holder
    deleted it, finds the path gone or naming another file and starts again,
    while anyone opening the path meanwhile creates and locks a new file.
    So at any moment at most one holder has locked the file the path names.
    A holder killed while holding leaves its file behind; the next holder
    deletes it.
    """

    def __init__(self, url: str, name: str):
        self.url, self.name = url, name
        self.kind = storage_kind(url)
        self.held = False
        self._connection: sqlalchemy.Connection | None = None
        self._file: IO[str] | None = None

    def acquire(self) -> None:
        if self.kind == "postgresql":
            self._database().execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": self._key()})
        else:
            self._file = self._lock_the_file()
        self.held = True

    def release(self) -> None:
        if not self.held:
            return
        self.held = False
        if self.kind == "postgresql":
            self._database().execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": self._key()})
        else:
            file = self._file
            assert file is not None  # held on a file storage: acquire() opened it
            Path(self._lock_file()).unlink(missing_ok=True)  # while still holding it: see the class docstring
            file.close()  # closing the file frees its lock
            self._file = None

    def close(self) -> None:
        self.release()
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def __enter__(self) -> StudyLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None) -> None:
        self.release()

    def _key(self) -> int:
        """A signed 64-bit advisory-lock key for this study (or the storage)."""
        return int.from_bytes(self._digest(), "big", signed=True)

    def _lock_the_file(self) -> IO[str]:
        """Lock the file the lock's path names, opening (or creating) it again until the one locked is still it."""
        path = self._lock_file()
        while True:
            handle = open(path, "a")  # noqa: SIM115 - closed by release()
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                if os.path.samestat(os.fstat(handle.fileno()), os.stat(path)):
                    return handle
            except FileNotFoundError:  # its holder deleted it as it released it
                pass
            handle.close()

    def _lock_file(self) -> str:
        """The file a journal or SQLite storage's lock is held on: FILE.pipedeck-lock for the storage itself,
        FILE.<digest>.pipedeck-lock for a study, so that two names never share (or wait on) one lock."""
        tag = f".{self._digest().hex()}" if self.name else ""
        return f"{file_of(self.url)}{tag}{LOCK_SUFFIX}"

    def _digest(self) -> bytes:
        return hashlib.blake2b(f"pipedeck-study:{self.name}".encode(), digest_size=8).digest()

    def _database(self) -> sqlalchemy.Connection:
        if self._connection is None:
            connect = {"connect_timeout": CONNECT_TIMEOUT_S, "options": LOCK_KEEPALIVE}
            engine = sqlalchemy.create_engine(_engine_url(self.url), poolclass=NullPool, connect_args=connect)
            try:
                self._connection = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            except ImportError:
                raise ConfigError(f"storage: {NO_DRIVER}") from None
            except sqlalchemy.exc.DBAPIError as err:
                raise unreachable(self.url, err) from None
        return self._connection


@contextmanager
def locked(url: str, name: str) -> Iterator[None]:
    """Hold the lock on study `name` (the storage's for "") once: a step that runs once, not a worker's loop."""
    lock = StudyLock(url, name)
    try:
        with lock:
            yield
    finally:
        lock.close()
