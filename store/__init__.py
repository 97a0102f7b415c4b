"""The DuckDB run store: runs, per-request records, timelines, studies and trials."""

from .errors import StoreError
from .paths import ENV_VAR, default_db_path
from .rows import ConfigRow, RunRow, StoredRun, StudyRow, TrialRow
from .runstore import RunStore
from .schema import SCHEMA_VERSION

__all__ = ["ENV_VAR", "SCHEMA_VERSION", "ConfigRow", "RunRow", "RunStore", "StoreError", "StoredRun", "StudyRow",
           "TrialRow", "default_db_path"]
