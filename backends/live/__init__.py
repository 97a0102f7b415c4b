"""Live backends: drive a real OpenAI-compatible server (vLLM, vLLM-Ascend, SGLang, llama-server) and read its metrics."""

from ..live_result import LiveRequest, LiveRun, MetricsTimeline
from .loadgen import LoadOptions, ServerUnreachable, replay, run_result, run_scenario
from .metrics import parse, poll

__all__ = [
    "LiveRequest",
    "LiveRun",
    "LoadOptions",
    "MetricsTimeline",
    "ServerUnreachable",
    "parse",
    "poll",
    "replay",
    "run_result",
    "run_scenario",
]
