"""Plotly figures for runs and studies: pure functions from data to figures, no I/O."""

from .breakdown import time_breakdown
from .cdf import latency_cdfs
from .common import PlotRun
from .gantt import timelines
from .html import Section, page
from .naming import legend_names, mismatch_warnings
from .study import best_vs_default, chunk_vs_objective, history_from_trials, optuna_history, optuna_importances
from .table import metrics_table

__all__ = [
    "PlotRun",
    "Section",
    "best_vs_default",
    "chunk_vs_objective",
    "history_from_trials",
    "latency_cdfs",
    "legend_names",
    "metrics_table",
    "mismatch_warnings",
    "optuna_history",
    "optuna_importances",
    "page",
    "time_breakdown",
    "timelines",
]
