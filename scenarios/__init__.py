"""Workloads: requests, length models, arrival processes and the scenario catalog.

Names are imported from their modules on first use (PEP 562), so importing
the light ones (the errors) does not load numpy and the catalog.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports each name on first use
    from .arrivals import ClosedLoop as ClosedLoop
    from .arrivals import Poisson as Poisson
    from .errors import ScenarioError as ScenarioError
    from .lengths import LogNormal as LogNormal
    from .loader import catalog as catalog
    from .loader import load_scenario as load_scenario
    from .request import Request as Request
    from .request import Workload as Workload
    from .scenario import Scenario as Scenario

# each public name -> the module under this package that defines it (tests/test_layering.py: the same names as above)
_WHERE = {
    "ClosedLoop": "arrivals",
    "Poisson": "arrivals",
    "ScenarioError": "errors",
    "LogNormal": "lengths",
    "catalog": "loader",
    "load_scenario": "loader",
    "Request": "request",
    "Workload": "request",
    "Scenario": "scenario",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> object:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
