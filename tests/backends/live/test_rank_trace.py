"""The profiler-trace importer: vLLM's CPU traces recorded here (PP=2), a hand-made torch_npu trace_view.json, and
files it must refuse in one line naming them.

tests/backends/live/data/vllm-cpu-pp2 holds trimmed copies of the traces vLLM 0.32's CPU build wrote for 6
requests (200-token prompts, 16 output tokens, about 1/s) at PP=2: every step annotation, every shared-memory
send and receive, the process names and 40 other host ops of each rank. The figures below were read by hand
from the whole traces (about 24k events per rank). torch-npu-pp2 is a two-rank trace_view.json written by hand
in the layout Ascend PyTorch Profiler documents (docs/live.md, "What was checked").
"""

from __future__ import annotations

import gzip
import itertools
import json
import re
from pathlib import Path

import pytest

from pipedeck.backends.live.rank_timeline import measured_timeline, trace_window
from pipedeck.backends.live.rank_trace import TraceFileError, read_rank_trace
from tests.paths import TESTS

DATA = TESTS / "backends" / "live" / "data"
VLLM_CPU = DATA / "vllm-cpu-pp2"
TORCH_NPU = DATA / "torch-npu-pp2"


def vllm_cpu_traces():
    return [read_rank_trace(p) for p in sorted(VLLM_CPU.glob("rank*.pt.trace.json.gz"))]


def torch_npu_traces():
    traces = [read_rank_trace(p) for p in TORCH_NPU.glob("*/ASCEND_PROFILER_OUTPUT/trace_view.json")]
    return sorted(traces, key=lambda t: t.rank)


def test_vllm_cpu_traces_hold_each_rank_s_steps_and_transfers():
    first, second = vllm_cpu_traces()
    assert (first.rank, second.rank) == (0, 1)  # from the workers' process names, VLLM::Worker_PP0 and _PP1
    for trace in (first, second):
        assert len(trace.steps) == 96 and trace.empty_steps == 102
        assert [s.kind for s in trace.steps].count("prefill") == 6  # the six requests' 200-token prompts, whole
        assert {(s.context, s.context_tokens) for s in trace.steps if s.kind == "prefill"} == {(1, 200)}
        assert [s.kind for s in trace.steps].count(
            "decode"
        ) == 90  # 15 decode steps each: 16 tokens, the first from prefill
    assert (len(first.sends), len(first.receives), len(second.sends), len(second.receives)) == (96, 0, 0, 96)
    assert sum(c.end_us - c.start_us for c in first.sends) == pytest.approx(1370.2754, abs=1e-3)
    assert first.sends[0].end_us - first.sends[0].start_us == pytest.approx(217.524, abs=1e-3)
    assert sum(c.end_us - c.start_us for c in second.receives) == pytest.approx(326327.8008, abs=1e-3)


def test_rank_1_starts_its_first_step_after_rank_0_sent_it():
    first, second = vllm_cpu_traces()
    assert first.steps[0].end_us <= first.sends[0].start_us
    assert first.sends[0].end_us <= second.receives[0].end_us <= second.steps[0].start_us
    assert second.steps[0].start_us - first.sends[0].start_us == pytest.approx(16035.418, abs=1e-3)


def test_the_measured_time_split_adds_up_to_the_makespan_on_every_rank():
    traces = vllm_cpu_traces()
    start, end = trace_window(traces)
    timeline = measured_timeline(traces, start, end)
    makespan = (end - start) / 1e6
    assert makespan == pytest.approx(5.72687, abs=1e-5)
    for rank in timeline.ranks:
        assert rank.compute + rank.exposed_comm + rank.bubble + rank.idle == pytest.approx(makespan, abs=1e-9)
        assert min(rank) >= 0
    first, second = timeline.ranks
    assert first.compute == pytest.approx(0.264105, abs=1e-6)  # its steps: 206.01 ms decode + 58.09 ms prefill
    assert second.compute == pytest.approx(0.291882, abs=1e-6)  # 172.11 + 119.77 ms
    assert first.exposed_comm == pytest.approx(0.00137028, abs=1e-8)  # every send, whole
    # a receive counts from when its send started: the 326 ms rank 1 spent posted before that was waiting for
    # rank 0's work (bubble), not communication
    assert second.exposed_comm == pytest.approx(0.0203746, abs=1e-7)
    assert first.idle == second.idle and first.bubble > 0 and second.bubble > 0
    assert (timeline.steps, timeline.chunks, timeline.stage_executions) == (96, 6, 192)


def test_spans_are_each_rank_s_steps_and_transfers_numbered_by_micro_batch():
    traces = vllm_cpu_traces()
    timeline = measured_timeline(traces, *trace_window(traces))
    by_rank = {rank: [s for s in timeline.spans if s.rank == rank] for rank in (0, 1)}
    assert [s.kind for s in by_rank[0][:4]] == ["prefill", "send", "decode", "send"]
    assert [s.kind for s in by_rank[1][:4]] == ["recv", "prefill", "recv", "decode"]
    assert {s.batch for s in by_rank[0]} == {s.batch for s in by_rank[1]} == set(range(96))
    assert all(s.request == s.chunk == -1 and s.stage == s.rank for s in timeline.spans)  # the profiler names none
    for spans in by_rank.values():
        assert all(a.end <= b.start for a, b in itertools.pairwise(spans))  # one thing at a time on a rank


def test_a_run_window_clips_the_timeline_to_the_run():
    traces = vllm_cpu_traces()
    start, end = trace_window(traces)
    later = start + 1e6  # a run that started a second after the first step: the steps before it are not its
    timeline = measured_timeline(traces, later, end)
    makespan = (end - later) / 1e6
    assert all(0 <= s.start < s.end <= makespan for s in timeline.spans)
    assert timeline.steps < 96 and timeline.chunks < 6
    for rank in timeline.ranks:
        assert sum(rank[1:]) == pytest.approx(makespan, abs=1e-9)


def test_a_hand_made_torch_npu_trace_reads_as_its_layout_says():
    first, second = torch_npu_traces()
    assert (first.rank, second.rank) == (0, 1)  # profiler_info_0.json; vLLM's rank suffix dp0_pp1_tp0_...
    assert [s.kind for s in first.steps] == [s.kind for s in second.steps] == ["prefill", "mixed"]
    assert first.empty_steps == second.empty_steps == 1
    assert len(first.sends) == len(second.receives) == 2 and not first.receives and not second.sends
    timeline = measured_timeline([second, first], *trace_window([first, second]))  # in any order
    # the host's steps and HcclSend / HcclRecv calls; the device's rows (hcom_*, Ascend Hardware, Overlap
    # Analysis) are not read. Worked by hand from the file: a 9.1 ms window, busy somewhere for 8.7 ms of it
    assert [tuple(round(v * 1e6, 6) for v in rank[1:]) for rank in timeline.ranks] == [
        (6000.0, 55.0, 2645.0, 400.0),
        (4500.0, 200.0, 4000.0, 400.0),
    ]
    assert (timeline.steps, timeline.chunks, timeline.stage_executions) == (2, 2, 4)


def test_traces_of_tensor_parallel_peers_are_read_once_per_pipeline_rank(tmp_path):
    traces = []
    for pp, tp in ((0, 0), (0, 1), (1, 0), (1, 1)):
        path = tmp_path / f"dp0_pp{pp}_tp{tp}_dcp0_ep0_rank{2 * pp + tp}.1.pt.trace.json.gz"
        write_trace(path, [step(1000 * pp, 500)], process=f"VLLM::Worker_PP{pp}_TP{tp}")
        traces.append(read_rank_trace(path))
    timeline = measured_timeline(traces, 0, 2000)
    assert [r.rank for r in timeline.ranks] == [0, 1] and len(timeline.spans) == 2
    write_trace(tmp_path / "again.json", [step(0, 500)], process="VLLM::Worker_PP1_TP0")
    with pytest.raises(TraceFileError, match=r"^profile: .* and .*again\.json are both traces of pipeline rank 1 "):
        measured_timeline([*traces, read_rank_trace(tmp_path / "again.json")], 0, 2000)


def step(start_us: float, duration_us: float, name: str = "execute_context_1(8)_generation_0(0)") -> dict:
    return {"ph": "X", "cat": "user_annotation", "name": name, "pid": 1, "tid": 1, "ts": start_us, "dur": duration_us}


def write_trace(path: Path, events: list[dict], process: str | None = None, **header: object) -> Path:
    title = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": process}}] if process else []
    path.write_text(json.dumps({**header, "traceEvents": [*title, *events]}))
    return path


@pytest.mark.parametrize(
    "content, error",
    [
        (b"<html>not a trace</html>", r"is not a JSON trace \(JSONDecodeError: "),
        (gzip.compress(b'{"traceEvents": [')[:-6], r"is not a JSON trace \(EOFError: "),  # still being written
        (b'{"schemaVersion": 1}', r"is not a Chrome trace \(no traceEvents list\)$"),
        (json.dumps({"traceEvents": [step("soon", 1)]}).encode(), r"has a time that is not a number: 'soon'$"),
        (
            json.dumps({"traceEvents": [step(0, 5, "execute_context_0(0)_generation_0(0)")]}).encode(),
            r"has no scheduler step with a request in it \(vLLM's execute_context_\* annotations\)$",
        ),
        (
            json.dumps({"traceEvents": [step(0, 5)]}).encode(),
            r"does not say which pipeline rank wrote it \(no vLLM worker name, rank suffix, distributedInfo or "
            r"profiler_info_<rank>\.json\)$",
        ),
    ],
    ids=["not-json", "truncated-gzip", "no-events", "bad-time", "no-steps", "no-rank"],
)
def test_a_file_that_is_not_one_rank_s_trace_is_refused_in_one_line_naming_it(tmp_path, content, error):
    path = tmp_path / "worker.pt.trace.json"
    path.write_bytes(content)
    with pytest.raises(TraceFileError) as refused:
        read_rank_trace(path)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"profile: {path} ")
    assert refused.value.field == "profile"
    assert re.search(error, message), message


def test_the_global_rank_names_the_pipeline_rank_when_nothing_else_does(tmp_path):
    path = write_trace(tmp_path / "w.json", [step(0, 5)], distributedInfo={"rank": 1, "world_size": 2})
    assert read_rank_trace(path).rank == 1
    assert read_rank_trace(write_trace(tmp_path / "x.json", [step(0, 5)], process="VLLM::Worker")).rank == 0
