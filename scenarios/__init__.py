"""Workloads: requests, length models, arrival processes and the scenario catalog."""

from .errors import PipedeckError, ScenarioError
from .loader import catalog, load_scenario
from .request import Request, Workload
from .scenario import Scenario

__all__ = ["Request", "Scenario", "PipedeckError", "ScenarioError", "Workload", "catalog", "load_scenario"]
