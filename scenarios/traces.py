"""Request traces on disk: CSV or JSONL rows of arrival time and token counts."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn

from .errors import ScenarioError, got_text

PIPEDECK_COLUMNS = ("arrival_s", "prompt_tokens", "output_tokens")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
_DATETIME = "a datetime like 2023-11-16 18:15:46.6805900"


@dataclass(frozen=True, slots=True)
class Trace:
    """A trace's servable rows sorted by arrival, and how many rows were skipped."""

    arrival_s: tuple[float, ...]
    prompt_tokens: tuple[int, ...]
    output_tokens: tuple[int, ...]
    skipped: int


def read_trace(path: Path) -> Trace:
    """Read a .csv or .jsonl trace with pipedeck's or the Azure LLM inference trace's columns.

    pipedeck columns: arrival_s (seconds, kept as written), prompt_tokens,
    output_tokens. Azure columns: TIMESTAMP (a datetime; arrival = seconds since
    the earliest row), ContextTokens, GeneratedTokens. Rows with zero prompt or
    output tokens (failed requests in the Azure traces) are skipped.
    """
    parsed: list[tuple[Any, int, int]] = []  # (seconds or datetime, prompt tokens, output tokens)
    columns: tuple[str, ...] = ()
    for number, row in _rows(path):
        if not columns:
            columns = _columns(path, row)
            checks = _checks(columns)
            (time_col, read_time, _), (prompt_col, _, _), (output_col, _, _) = checks
        try:  # the whole row at once; a bad value is looked for again, column by column, for the message
            parsed.append(
                (
                    read_time(str(row.get(time_col)).strip()),
                    _count(str(row.get(prompt_col)).strip()),
                    _count(str(row.get(output_col)).strip()),
                )
            )
        except ValueError:
            _raise_for_value(f"{path}:{number}", row, checks)
    if not parsed:
        raise ScenarioError(f"{path}: must have at least one request row, got none")
    if columns == AZURE_COLUMNS:
        origin = min(stamp for stamp, _, _ in parsed)
        parsed = [((stamp - origin).total_seconds(), p, o) for stamp, p, o in parsed]
    kept = sorted((row for row in parsed if row[1] > 0 and row[2] > 0), key=lambda row: row[0])
    if not kept:
        raise ScenarioError(f"{path}: must have a row with prompt and output tokens >= 1, got none")
    arrival_s, prompt_tokens, output_tokens = zip(*kept, strict=True)
    return Trace(arrival_s, prompt_tokens, output_tokens, len(parsed) - len(kept))


def _rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield (line number, row) for each row of a .csv or .jsonl file; a byte that is not UTF-8 is a one-line error."""
    try:
        yield from _decoded_rows(path)
    except UnicodeDecodeError:
        raise _not_text(path) from None


def _not_text(path: Path) -> ScenarioError:
    """The error naming the line of the file's first byte that is not UTF-8 (the reader's offsets are its buffer's)."""
    data = path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        return ScenarioError(f"{path}:{line}: must be UTF-8 text, got byte 0x{data[err.start]:02x}")
    return ScenarioError(f"{path}: must be UTF-8 text")  # the file changed while it was read


def _decoded_rows(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with path.open(encoding="utf-8-sig", newline="") as f:
        if path.suffix.lower() == ".csv":
            reader = csv.DictReader(f)
            for row in reader:
                yield reader.line_num, row
            return
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                obj = None
            if not isinstance(obj, dict):
                got = line.strip()[:40]
                raise ScenarioError(f"{path}:{number}: must be a JSON object, got {got!r}")
            yield number, obj


def _columns(path: Path, row: dict[str, Any]) -> tuple[str, ...]:
    """The column set the first row carries, or a one-line error naming what is missing."""
    for columns in (PIPEDECK_COLUMNS, AZURE_COLUMNS):
        if all(c in row for c in columns):
            return columns
    closest = max((PIPEDECK_COLUMNS, AZURE_COLUMNS), key=lambda cols: sum(c in row for c in cols))
    missing = ",".join(c for c in closest if c not in row)
    raise ScenarioError(
        f"{path}: missing column {missing}; a trace needs columns "
        f"{','.join(PIPEDECK_COLUMNS)} or {','.join(AZURE_COLUMNS)}"
    )


def _checks(columns: tuple[str, ...]) -> tuple[tuple[str, Callable[[str], Any], str], ...]:
    """For each of a row's columns (time, prompt, output): its name, its parser and what it allows."""
    time_col, prompt_col, output_col = columns
    time_rule = (datetime.fromisoformat, _DATETIME) if columns == AZURE_COLUMNS else (_seconds, "seconds >= 0")
    return (time_col, *time_rule), (prompt_col, _count, "an integer >= 0"), (output_col, _count, "an integer >= 0")


def _raise_for_value(
    where: str, row: dict[str, Any], checks: tuple[tuple[str, Callable[[str], Any], str], ...]
) -> NoReturn:
    """Raise the one-line error naming the line, the first column whose value does not parse, and what it allows."""
    for column, parse, allowed in checks:
        value = row.get(column)
        try:
            parse(str(value).strip())
        except ValueError:
            raise ScenarioError(f"{where}: {column}: must be {allowed}, got {got_text(value)}") from None
    raise AssertionError(f"{where}: a value failed to parse once and parsed the second time")


def _seconds(text: str) -> float:
    """A finite number of seconds >= 0."""
    seconds = float(text)
    if not (math.isfinite(seconds) and seconds >= 0):
        raise ValueError(text)
    return seconds


def _count(text: str) -> int:
    """A token count: an integer >= 0."""
    tokens = int(text)
    if tokens < 0:
        raise ValueError(text)
    return tokens
