"""Opening a DuckDB file without ever damaging it, and turning DuckDB's errors into one-line StoreErrors."""

from __future__ import annotations

import re
import time
from pathlib import Path

import duckdb

from .errors import StoreError, StoreFailure, StoreInputError

MAGIC_OFFSET, MAGIC = 8, b"DUCK"  # every DuckDB file: an 8-byte checksum, then the magic bytes
_LOCKED = "Could not set lock on file"
_CORRUPT = ("not a valid DuckDB database file", "Corrupt database file", "checksum", "Could not read enough bytes")


def not_a_store(path: Path) -> StoreInputError:
    """The error for a file that exists but is not (or no longer) a pipedeck DuckDB store."""
    return StoreInputError(
        f"db: {path} is not a pipedeck DuckDB store (corrupt or another format); nothing was changed"
    )


def check_path(path: Path, read_only: bool) -> None:
    """Refuse, before DuckDB touches anything, a path that cannot hold a store."""
    if path.is_dir():
        raise StoreInputError(f"db: {path} is a directory, not a DuckDB file")
    if not path.exists():
        if read_only:
            raise StoreInputError(f"db: no store at {path}; pipedeck simulate creates one, or pass --db")
        if not path.parent.is_dir():
            raise StoreInputError(f"db: folder {path.parent} does not exist")
        return
    try:
        with path.open("rb") as handle:
            head = handle.read(MAGIC_OFFSET + len(MAGIC))
    except OSError as err:
        raise StoreInputError(f"db: cannot read {path}: {err.strerror or err}") from None
    if head[MAGIC_OFFSET:] != MAGIC:
        raise not_a_store(path)


def connect(path: Path, *, read_only: bool = False, lock_timeout_s: float = 0.0) -> duckdb.DuckDBPyConnection:
    """Connect to `path`, waiting up to `lock_timeout_s` for another process's lock; StoreError otherwise."""
    check_path(path, read_only)
    deadline = time.monotonic() + max(0.0, lock_timeout_s)
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only)
        except duckdb.Error as err:
            if _LOCKED in str(err) and time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            raise translate(err, path) from None


def translate(err: duckdb.Error, path: Path) -> StoreError:
    """DuckDB's error about `path` as one line that names the file."""
    text = str(err)
    if _LOCKED in text:
        pid = re.search(r"PID (\d+)", text)
        holder = f" (PID {pid.group(1)})" if pid else ""
        return StoreFailure(
            f"db: {path} is in use by another process{holder}; close it or wait for it to finish, then retry"
        )
    if any(marker in text for marker in _CORRUPT):
        return not_a_store(path)
    return StoreFailure(f"db: {path}: {first_line(text)}")


def first_line(text: str) -> str:
    """The first line of DuckDB's message without its 'IO Error: ' style prefix."""
    line = text.strip().splitlines()[0] if text.strip() else "unknown error"
    return re.sub(r"^[A-Za-z ]+Error: ", "", line)
