"""The DuckDB run store: runs, per-request records, timelines, studies and trials.

Names are imported from their modules on first use (PEP 562): the store's
path helpers do not load DuckDB, which only opening a store needs.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports each name on first use
    from .errors import StoreError as StoreError
    from .errors import StoreFailure as StoreFailure
    from .errors import StoreInputError as StoreInputError
    from .paths import ENV_VAR as ENV_VAR
    from .paths import default_db_path as default_db_path
    from .rows import ConfigRow as ConfigRow
    from .rows import RunRow as RunRow
    from .rows import StoredRun as StoredRun
    from .rows import StudyRow as StudyRow
    from .rows import TrialRow as TrialRow
    from .runstore import RunStore as RunStore
    from .schema import SCHEMA_VERSION as SCHEMA_VERSION

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports each name on first use
    from .errors import StoreError as StoreError
    from .paths import ENV_VAR as ENV_VAR
    from .paths import default_db_path as default_db_path
    from .rows import ConfigRow as ConfigRow
    from .rows import RunRow as RunRow
    from .rows import StoredRun as StoredRun
    from .rows import StudyRow as StudyRow
    from .rows import TrialRow as TrialRow
    from .runstore import RunStore as RunStore
    from .schema import SCHEMA_VERSION as SCHEMA_VERSION

# each public name -> the module under this package that defines it (tests/test_layering.py: the same names as above)
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
