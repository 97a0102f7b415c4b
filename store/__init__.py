"""The DuckDB run store: runs, per-request records, timelines, studies and trials.

Names are imported from their modules on first use (PEP 562): the store's
path helpers do not load DuckDB, which only opening a store needs.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "StoreError": "errors",
    "StoreFailure": "errors",
    "StoreInputError": "errors",
    "ENV_VAR": "paths",
    "default_db_path": "paths",
    "ConfigRow": "rows",
    "RunRow": "rows",
    "StoredRun": "rows",
    "StudyRow": "rows",
    "TrialRow": "rows",
    "RunStore": "runstore",
    "SCHEMA_VERSION": "schema",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> object:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
