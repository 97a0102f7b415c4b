"""Custom widgets of the console: the pipeline strip and the trial chart."""

from .chart import TrialChart
from .timeline import PipelineStrip

__all__ = ["PipelineStrip", "TrialChart"]
