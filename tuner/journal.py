"""Journal files, the default study storage: a line that is not a record is one error; a cut-off last line is set aside.

Optuna appends one JSON record per line and replays every line when it opens
the file. A line that is not one of its records (binary bytes, other text, a
JSON object without Optuna's keys) would fail that replay with a traceback:
`check_journal` finds it first and names its line, changing nothing. A last
line without its newline is a record whose write was cut off (power loss, a
full disk, a killed writer): Optuna skips it when reading, but glues the next
record it appends onto it, which breaks the whole file. Before a tune writes,
`recover_journal` keeps a copy of the file and cuts it back to its complete
lines.
"""

from __future__ import annotations

import json
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

from optuna.storages.journal import JournalFileSymlinkLock
from optuna.storages.journal._storage import JournalOperation

from ..backends import ConfigError

# The keys Optuna's replay reads from each kind of record, besides op_code and worker_id (optuna.storages.journal).
_RECORD_KEYS = {
    "CREATE_STUDY": ("study_name", "directions"),
    "DELETE_STUDY": ("study_id",),
    "SET_STUDY_USER_ATTR": ("study_id", "user_attr"),
    "SET_STUDY_SYSTEM_ATTR": ("study_id", "system_attr"),
    "CREATE_TRIAL": ("study_id", "datetime_start"),
    "SET_TRIAL_PARAM": ("trial_id", "param_name", "param_value_internal", "distribution"),
    "SET_TRIAL_STATE_VALUES": ("trial_id", "state", "values"),
    "SET_TRIAL_INTERMEDIATE_VALUE": ("trial_id", "step", "intermediate_value"),
    "SET_TRIAL_USER_ATTR": ("trial_id", "user_attr"),
    "SET_TRIAL_SYSTEM_ATTR": ("trial_id", "system_attr"),
    "DISCARD_TRIALS": (),
}
KEYS_BY_OP_CODE = {int(op): _RECORD_KEYS[op.name] for op in JournalOperation}


def check_journal(path: Path) -> int:
    """Raise a one-line ConfigError naming the first complete line that is not an Optuna record; else the
    length in bytes of a cut-off last line (0 when the file ends with a newline)."""
    data = path.read_bytes()
    *lines, tail = data.split(b"\n")
    for number, line in enumerate(lines, 1):
        problem = _problem(line)
        if problem:
            raise ConfigError(
                f"storage: {path}:{number}: must be an Optuna journal record, got {problem}; nothing was changed"
            )
    return len(tail)


def _problem(line: bytes) -> str | None:
    """What keeps one line from being an Optuna journal record, or None when it is one."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes that are not UTF-8 text"
    try:
        record = json.loads(text)
    except json.JSONDecodeError:
        return f"text that is not JSON: {text.strip()[:40]!r}"
    if not isinstance(record, dict):
        return f"JSON that is not an object: {text.strip()[:40]!r}"
    op_code = record.get("op_code")
    keys = KEYS_BY_OP_CODE.get(op_code) if isinstance(op_code, int) else None
    if keys is None:
        return "a JSON line without Optuna's keys (op_code, worker_id)"
    missing = [key for key in ("worker_id", *keys) if key not in record]
    return f"a JSON line without Optuna's keys ({', '.join(missing)})" if missing else None


def recover_journal(path: Path) -> Path | None:
    """Cut a journal whose last line was cut off back to its complete lines, keeping the whole file beside it
    as `<name>.damaged-<UTC time>`; that copy, or None when the journal was whole (or is not there).

    Under Optuna's own lock on the file, so that no writer is midway through a record; a line that is not a
    record anywhere else is check_journal's error, and then nothing is changed.
    """
    if not path.is_file():
        return None
    lock = JournalFileSymlinkLock(str(path))
    lock.acquire()
    try:
        tail = check_journal(path)
        if not tail:
            return None
        backup = path.with_name(f"{path.name}.damaged-{datetime.now(UTC):%Y%m%dT%H%M%S%fZ}")
        shutil.copy2(path, backup)
        with path.open("r+b") as journal:
            journal.truncate(path.stat().st_size - tail)
            os.fsync(journal.fileno())
        return backup
    finally:
        lock.release()
