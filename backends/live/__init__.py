"""Live backends: drive a real OpenAI-compatible server (vLLM, SGLang, llama-server) and read its metrics."""

from .metrics import MetricsTimeline, parse, poll

__all__ = ["MetricsTimeline", "parse", "poll"]
