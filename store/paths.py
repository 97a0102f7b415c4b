"""Where the run store lives: an explicit path, else $PIPEDECK_DB, else ./pipedeck.duckdb."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "PIPEDECK_DB"
DEFAULT_NAME = "pipedeck.duckdb"


def default_db_path(path: str | Path | None = None) -> Path:
    """The store file: `path` if given, else $PIPEDECK_DB if set, else pipedeck.duckdb in the working directory."""
    if path is not None and str(path) != "":
        return Path(path).expanduser()
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        return Path(env).expanduser()
    return Path.cwd() / DEFAULT_NAME
