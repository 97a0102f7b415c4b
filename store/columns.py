"""RunResult parts as numpy columns, bulk-inserted in one vectorised statement and read back exactly."""

from __future__ import annotations

from collections.abc import Sequence
from operator import itemgetter
from typing import Any, NamedTuple, TypeVar

import duckdb
import numpy as np

from ..backends import RankTime, RequestRecord, Span

T = TypeVar("T", bound=NamedTuple)

# (column, numpy dtype) per table, in the order of the NamedTuple's fields
RANK_COLUMNS = (
    ("rank", np.int32),
    ("compute", np.float64),
    ("exposed_comm", np.float64),
    ("bubble", np.float64),
    ("idle", np.float64),
)
REQUEST_COLUMNS = (
    ("id", np.int64),
    ("arrival_s", np.float64),
    ("prompt_tokens", np.int64),
    ("output_tokens", np.int64),
    ("first_token_s", np.float64),
    ("finish_s", np.float64),
)
SPAN_COLUMNS = (
    ("rank", np.int32),
    ("stage", np.int32),
    ("batch", np.int64),
    ("request", np.int64),
    ("chunk", np.int32),
    ("start_s", np.float64),
    ("end_s", np.float64),
    ("kind", object),
)
SPAN_NONE = {"request": -1, "chunk": -1}  # a Span's "none" (a decode-only batch), stored as NULL


def to_columns(
    run_id: int, rows: Sequence[tuple[Any, ...]], layout: tuple[tuple[str, object], ...]
) -> dict[str, np.ndarray]:
    """run_id, seq and one numpy array per field of `rows` (tuples in `layout`'s field order)."""
    n = len(rows)
    columns: dict[str, np.ndarray] = {"run_id": np.full(n, run_id, dtype=np.int64), "seq": np.arange(n, dtype=np.int32)}
    for i, (name, dtype) in enumerate(layout):
        columns[name] = np.fromiter(map(itemgetter(i), rows), dtype=dtype, count=n)  # type: ignore[call-overload]
    return columns


def insert_columns(
    con: duckdb.DuckDBPyConnection, table: str, columns: dict[str, np.ndarray], none: dict[str, int] | None = None
) -> None:
    """Append equal-length numpy columns to `table` with one INSERT ... SELECT over them.

    `none` names integer columns whose sentinel value means "none": it is stored as NULL.
    """
    if not len(columns["run_id"]):
        return
    scanned: dict[str, np.ndarray] = {}
    select: list[str] = []
    params: list[object] = []
    for name, values in columns.items():
        if values.dtype == object:
            # strings travel as int codes into a list of labels: scanning Python strings needs pandas in DuckDB 1.x
            index: dict[object, int] = {}
            scanned[name] = np.fromiter((index.setdefault(v, len(index)) for v in values), np.int32, len(values))
            select.append(f"(?::VARCHAR[])[{name} + 1]")
            params.append([None if v is None else str(v) for v in index])
        elif values.dtype.kind == "f" and np.isnan(values).any():
            # DuckDB's numpy scan reads NaN as NULL (pandas' missing value); put the NaNs back explicitly
            scanned[name], scanned[f"{name}__nan"] = values, np.isnan(values)
            select.append(f"CASE WHEN {name}__nan THEN CAST('NaN' AS DOUBLE) ELSE {name} END")
        elif none and name in none:
            scanned[name] = values
            select.append(f"nullif({name}, {int(none[name])})")
        else:
            scanned[name] = values
            select.append(name)
    # DuckDB's replacement scan finds this local by name and scans the dict of arrays in C++
    # (DuckDB 1.1 and 2.x alike; no pandas or pyarrow needed).
    pipedeck_bulk_columns = scanned  # noqa: F841
    con.execute(
        f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(select)} FROM pipedeck_bulk_columns", params
    )


def read_rows(
    con: duckdb.DuckDBPyConnection,
    table: str,
    run_id: int,
    layout: tuple[tuple[str, object], ...],
    kind: type[T],
    none: dict[str, int] | None = None,
) -> list[T]:
    """The rows `insert_columns` wrote for `run_id`, in their original order, as `kind` tuples (NULL as `none`'s)."""
    none = none or {}
    names = ", ".join(f"coalesce({name}, {int(none[name])}) AS {name}" if name in none else name for name, _ in layout)
    data = con.execute(f"SELECT {names} FROM {table} WHERE run_id = ? ORDER BY seq", [run_id]).fetchnumpy()
    lists = [data[name].tolist() for name, _ in layout]
    return list(map(kind._make, zip(*lists)))


def rank_columns(run_id: int, ranks: Sequence[RankTime]) -> dict[str, np.ndarray]:
    """The run_ranks table's columns for one run."""
    return to_columns(run_id, ranks, RANK_COLUMNS)


def request_columns(run_id: int, records: Sequence[RequestRecord]) -> dict[str, np.ndarray]:
    """The requests table's columns for one run."""
    return to_columns(run_id, records, REQUEST_COLUMNS)


def span_columns(run_id: int, spans: Sequence[Span]) -> dict[str, np.ndarray]:
    """The spans table's columns for one run."""
    return to_columns(run_id, spans, SPAN_COLUMNS)
