"""One transaction around a block: committed whole, or rolled back on any exception, Ctrl-C included."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress

import duckdb


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[None]:
    """BEGIN, run the block, COMMIT; ROLLBACK on any BaseException and re-raise it."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield
        con.execute("COMMIT")
    except BaseException:
        with suppress(duckdb.Error):  # the failed COMMIT already rolled back, or the connection is gone
            con.execute("ROLLBACK")
        raise
