"""Live backends: drive a real OpenAI-compatible server (vLLM, vLLM-Ascend, SGLang, llama-server) and read its metrics."""

from .loadgen import LoadOptions, ServerUnreachable, replay, run_result, run_scenario
from .metrics import MetricsTimeline, parse, poll
from .records import LiveRequest, LiveRun

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
