"""One pipeline rank's profiler trace: the engine's scheduler steps and the stage-to-stage transfers, read from the
Chrome-trace JSON that torch's profiler writes (vLLM on CPU or GPU) or torch_npu's (vLLM-Ascend).

Two layouts are read, gzipped or plain:

- torch (`<name>.pt.trace.json.gz`, what vLLM's `--profiler-config` torch profiler writes per worker): an object
  with `traceEvents`; `ts` is in microseconds from `baseTimeNanoseconds` (wall-clock nanoseconds), so an
  event's wall-clock time is baseTimeNanoseconds / 1000 + ts microseconds.
- torch_npu (`<worker>_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json`, Ascend PyTorch Profiler's parsed
  timeline): a list of events (or the same object); `ts` is already wall-clock microseconds, a number or a
  string. Host events sit in the "Python" process as `cpu_op`; the CANN, Ascend Hardware, HCCL and Overlap
  Analysis rows are the device's and are not read.

Only the host's events are read (category `cpu_op` or `user_annotation`): each scheduler step is vLLM's
`execute_context_<n>(<tokens>)_generation_<n>(<tokens>)` annotation (gpu_worker.py's annotate_profile; its
detailed variant too) and each transfer a blocking send or receive call of the stage-to-stage channel: vLLM's
CPU shared-memory `_C::shm_send_tensor_list` / `_C::shm_recv_tensor_list`, torch's NCCL `nccl:send` /
`nccl:recv` (ProcessGroupNCCL's record names) or torch_npu's HCCL `HcclSend` / `HcclRecv` (ProcessGroupHCCL's).
Steps with no request in them (`context_0(0)_generation_0(0)`, empty micro-batches) are counted, not kept.

The pipeline rank comes from, in order: the worker's process name (vLLM's `Worker_PP<n>_TP<n>`), vLLM's rank
suffix in the file or folder name (`dp0_pp1_tp0_..._rank1`), the trace's `distributedInfo.rank` or torch_npu's
`profiler_info_<rank>.json` beside ASCEND_PROFILER_OUTPUT (a global rank, taken as the pipeline rank: right
when tensor parallelism is 1).
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from ...errors import InputError

HOST_CATEGORIES = frozenset({"cpu_op", "user_annotation"})
STEP = re.compile(r"execute_(?:\d+_)?context_(\d+)\((?:sq)?(\d+)[^)]*\)_generation_(\d+)\((?:sq)?(\d+)[^)]*\)")
SENDS = ("_C::shm_send_tensor_list", "nccl:send", "HcclSend")
RECEIVES = ("_C::shm_recv_tensor_list", "nccl:recv", "HcclRecv")
WORKER = re.compile(r"\bWorker((?:_[A-Z]+\d+)*)$")  # vLLM's worker process title, e.g. Worker_PP1_TP0
RANK_SUFFIX = re.compile(r"(?:^|_)pp(\d+)_tp(\d+)(?:_|$)")  # vLLM's get_worker_rank_suffix: dp0_pp1_tp0_dcp0_...
PROFILER_INFO = re.compile(r"profiler_info_(\d+)\.json$")


class TraceFileError(InputError):
    """A profiler trace file that cannot be read as one rank's timeline; one line naming the file."""


class Step(NamedTuple):
    """One scheduler step on one rank: its microseconds from the trace's base time, and what it ran."""

    start_us: float
    end_us: float
    context: int  # requests in their prefill (context) phase
    context_tokens: int
    generation: int  # requests decoding
    generation_tokens: int

    @property
    def kind(self) -> str:
        """prefill, decode or mixed, as pipedeck's spans say."""
        if self.context and self.generation:
            return "mixed"
        return "prefill" if self.context else "decode"


class Call(NamedTuple):
    """One blocking send or receive call, in microseconds from the trace's base time."""

    start_us: float
    end_us: float


@dataclass(frozen=True)
class RankTrace:
    """What one rank's trace holds: its non-empty steps and its transfer calls, each in time order.

    Their times count from `base_us`, the trace's own base on the wall clock (torch's baseTimeNanoseconds,
    torch_npu's 0): a float cannot hold today's microseconds since 1970 to better than a quarter of one.
    """

    path: Path
    base_us: float  # wall-clock microseconds
    rank: int  # pipeline rank
    tp_rank: int
    steps: tuple[Step, ...]
    empty_steps: int
    sends: tuple[Call, ...]
    receives: tuple[Call, ...]


def read_rank_trace(path: Path) -> RankTrace:
    """The rank trace in the file at `path` (gzipped or plain JSON); TraceFileError naming the file otherwise."""
    try:
        raw = path.read_bytes()
        text = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
        data = json.loads(text)
    except OSError as err:
        raise TraceFileError(f"profile: cannot read {path}: {err.strerror or err}") from None
    except (EOFError, gzip.BadGzipFile, UnicodeDecodeError, ValueError) as err:
        raise TraceFileError(f"profile: {path} is not a JSON trace ({type(err).__name__}: {err})") from None
    return parse_rank_trace(data, path)


def parse_rank_trace(data: Any, path: Path) -> RankTrace:  # Any: JSON from disk
    """The rank trace in parsed trace JSON `data` (from the file at `path`, which names the rank where the data
    does not)."""
    if isinstance(data, dict) and isinstance(data.get("traceEvents"), list):
        events, header = data["traceEvents"], data
    elif isinstance(data, list):
        events, header = data, {}
    else:
        raise TraceFileError(f"profile: {path} is not a Chrome trace (no traceEvents list)")
    base_us = _number(header.get("baseTimeNanoseconds", 0), path) / 1000
    steps: list[Step] = []
    sends: list[Call] = []
    receives: list[Call] = []
    empty = 0
    for event in events:
        if not isinstance(event, dict) or event.get("ph") != "X" or event.get("cat") not in HOST_CATEGORIES:
            continue
        name = str(event.get("name", ""))
        start = _number(event.get("ts"), path)
        end = start + _number(event.get("dur"), path)
        if step := STEP.fullmatch(name):
            context, context_tokens, generation, generation_tokens = map(int, step.groups())
            if context or generation:
                steps.append(Step(start, end, context, context_tokens, generation, generation_tokens))
            else:
                empty += 1
        elif name.startswith(SENDS):
            sends.append(Call(start, end))
        elif name.startswith(RECEIVES):
            receives.append(Call(start, end))
    if not steps:
        raise TraceFileError(
            f"profile: {path} has no scheduler step with a request in it (vLLM's execute_context_* annotations)"
        )
    rank, tp_rank = _ranks(events, header, path)
    return RankTrace(
        path, base_us, rank, tp_rank, tuple(sorted(steps)), empty, tuple(sorted(sends)), tuple(sorted(receives))
    )


def _number(value: object, path: Path) -> float:
    """A trace's time field as a float (torch_npu writes some as strings); TraceFileError when it is none."""
    if isinstance(value, int | float | str):
        try:
            return float(value)
        except ValueError:
            pass
    raise TraceFileError(f"profile: {path} has a time that is not a number: {value!r}")


def _ranks(events: list[Any], header: dict[str, Any], path: Path) -> tuple[int, int]:
    """The pipeline and tensor-parallel rank of the trace's worker; TraceFileError when nothing names them."""
    for event in events:
        if isinstance(event, dict) and event.get("ph") == "M" and event.get("name") == "process_name":
            title = str((event.get("args") or {}).get("name", ""))
            if worker := WORKER.search(title):
                parts = dict(re.findall(r"_([A-Z]+)(\d+)", worker.group(1)))
                return int(parts.get("PP", 0)), int(parts.get("TP", 0))
    for part in reversed(path.parts):
        if suffix := RANK_SUFFIX.search(part):
            return int(suffix.group(1)), int(suffix.group(2))
    distributed = header.get("distributedInfo")
    if isinstance(distributed, dict) and isinstance(distributed.get("rank"), int):
        return distributed["rank"], 0
    folder = path.parent.parent  # torch_npu: <worker>_ascend_pt/ASCEND_PROFILER_OUTPUT/trace_view.json
    infos = [int(m.group(1)) for p in folder.glob("profiler_info_*.json") if (m := PROFILER_INFO.search(p.name))]
    if len(infos) == 1:
        return infos[0], 0
    raise TraceFileError(
        f"profile: {path} does not say which pipeline rank wrote it (no vLLM worker name, rank suffix, "
        "distributedInfo or profiler_info_<rank>.json)"
    )
