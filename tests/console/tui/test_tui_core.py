"""The console's UI-free parts, and the rule that the core packages never import Textual."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import webbrowser
from dataclasses import replace
from datetime import UTC, datetime

import pytest
from textual.color import Color

from pipedeck.backends import ConfigError, RankTime, RequestRecord, RunResult, ServingConfig, Snapshot, Span
from pipedeck.console.cli import cli
from pipedeck.console.errors import run_cli
from pipedeck.console.tui.compare import gui_browser
from pipedeck.console.tui.fields import error_field, form_fields, parse, shown_for
from pipedeck.console.tui.livestats import LiveStats
from pipedeck.console.tui.pacing import Frame, PacedObserver
from pipedeck.console.tui.sources import FORM, source_options
from pipedeck.console.tui.widgets.timeline import (
    BLACK,
    DECODE_COLOUR,
    MEASURED_COLOUR,
    REQUEST_COLOURS,
    bubble_ratios,
    span_cells,
    span_style,
)
from pipedeck.store import RunRow
from tests.paths import ROOT

CORE = ("backends", "tuner", "store", "scenarios")
IMPORT_EACH = """
import importlib, json, pkgutil, sys
offenders = []
for package in %r:
    root = importlib.import_module("pipedeck." + package)
    for info in pkgutil.walk_packages(root.__path__, root.__name__ + "."):
        importlib.import_module(info.name)
        if "textual" in sys.modules and not offenders:
            offenders.append(info.name)
print(json.dumps({"offenders": offenders, "textual": "textual" in sys.modules}))
"""


def test_core_packages_import_without_textual():
    out = subprocess.run([sys.executable, "-c", IMPORT_EACH % (CORE,)], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == {"offenders": [], "textual": False}
    pattern = re.compile(r"^\s*(from|import)\s+textual\b", re.M)
    sources = [path for package in CORE for path in (ROOT / package).rglob("*.py")]
    assert sources and not [str(p) for p in sources if pattern.search(p.read_text(encoding="utf-8"))]


class FakeTime:
    """A clock that only moves when the observer waits, and a stop flag that records the waits."""

    def __init__(self) -> None:
        self.now, self.waits, self.stopped = 100.0, [], False

    def clock(self) -> float:
        return self.now

    def wait(self, seconds: float) -> bool:
        self.waits.append(round(seconds, 6))
        self.now += seconds
        return self.stopped

    def is_set(self) -> bool:
        return self.stopped


def test_pacing_sleeps_until_wall_time_catches_up_and_emits_in_order():
    time, frames = FakeTime(), []
    observer = PacedObserver(2.0, frames.append, time, clock=time.clock)  # type: ignore[arg-type]
    record = RequestRecord(0, 0.0, 10, 2, 0.4, 0.9)
    observer.request_done(record)
    observer.snapshot(Snapshot(0.5, 1, 0, 0, 0.1))
    time.now += 0.1  # the simulator itself took 0.1 s of wall time
    observer.snapshot(Snapshot(1.0, 1, 0, 0, 0.0))
    assert time.waits == [0.25, 0.15]  # 1.0 s simulated at 2x is 0.5 s of wall time in all
    assert [e for f in frames for e in f.events] == [record, Snapshot(0.5, 1, 0, 0, 0.1), Snapshot(1.0, 1, 0, 0, 0.0)]
    time.stopped = True
    assert observer.should_stop()


def test_max_speed_never_sleeps_and_batches_frames():
    time, frames = FakeTime(), []
    observer = PacedObserver(None, frames.append, time, clock=time.clock)  # type: ignore[arg-type]
    for step in range(1, 11):
        observer.snapshot(Snapshot(step * 0.5, 0, 1, 0, 0.0))
    observer.flush()
    assert time.waits == [] and len(frames) == 2  # the first at once, the rest when flushed (no wall time passed)
    assert sum(len(f.events) for f in frames) == 10


def test_live_stats_fold_frames_into_counts_percentiles_history_and_a_window():
    stats = LiveStats(ranks=2, total=2)
    spans = [Span(0, 0, 0, 0, 0, 0.0, 0.5, "prefill"), Span(1, 1, 0, 0, 0, 0.5, 1.0, "prefill")]
    stats.add(Frame((*spans, RequestRecord(0, 0.0, 100, 3, 1.0, 1.2), Snapshot(1.0, 1, 1, 0, 0.25))))
    stats.add(Frame((RequestRecord(1, 0.5, 100, 1, 2.5, 2.5), Snapshot(2.5, 2, 0, 0, 0.0))))
    assert stats.done == 2 and stats.now == 2.5 and stats.throughput == pytest.approx(204 / 2.5)
    assert stats.latency("ttft") == pytest.approx((1.5, 1.9, 1.99))
    assert list(stats.history["kv"]) == [0.25, 0.0] and list(stats.history["ttft_p90"]) == [1.0, 1.9]
    start, end, window = stats.window(2.0)
    assert (start, end) == (0.5, 2.5) and window == [[], [spans[1]]]


def test_the_strip_draws_the_span_covering_most_of_each_cell_and_bubbles_blank():
    a, b = Span(0, 0, 0, 7, 0, 0.0, 1.0, "prefill"), Span(0, 1, 1, 8, 0, 1.6, 2.0, "prefill")
    assert span_cells([a, b], 0.0, 2.0, 4) == [a, a, None, b]  # 1.0-1.5 idle; 1.5-2.0 mostly b
    other = [Span(1, 1, 0, 7, 0, 0.0, 2.0, "prefill")]
    assert bubble_ratios([[a, b], other], 0.0, 2.0) == pytest.approx([0.3, 0.0])


def test_a_measured_step_that_names_no_request_has_its_own_colour_and_decode_stays_grey():
    measured, decode = Span(0, 0, 3, -1, -1, 0.0, 1.0, "prefill"), Span(0, 0, 4, -1, -1, 1.0, 2.0, "decode")
    assert span_style(measured) == ("0", f"bold #000000 on {Color.parse(MEASURED_COLOUR).blend(BLACK, 0.3).hex}")
    assert span_style(decode)[1] == f"bold #000000 on {Color.parse(DECODE_COLOUR).blend(BLACK, 0.3).hex}"
    assert span_style(Span(0, 0, 0, 7, 0, 0.0, 1.0, "prefill"))[1] == f"bold #000000 on {REQUEST_COLOURS[7]}"


def test_a_timeline_that_comes_with_the_result_is_drawn_when_the_run_finishes():
    """A live server's profiler is read after the run: its spans come only with the result."""
    spans = [Span(rank, rank, 0, -1, -1, 1.0 + rank, 2.0 + rank, "prefill") for rank in (0, 1)]
    spans.append(Span(0, 0, 1, -1, -1, 100.0, 101.0, "decode"))  # and one 99 s later: the strip keeps 60 s
    result = RunResult(
        {}, "s", "live", 0, None, [], [RankTime(r, 1.0, 0.0, 0.0, 100.0) for r in (0, 1)], 102.0, 2, 1, 3, spans
    )
    stats = LiveStats(0, 1)
    stats.finish(result)
    assert stats.window(60.0) == (42.0, 102.0, [[spans[2]], []])
    assert stats.window(110.0)[2] == [[spans[2]], []]  # older than the widest window the strip shows: not kept


def test_the_form_has_every_config_field_and_maps_errors_to_them():
    fields = {f.name: f for f in form_fields()}
    assert list(fields) == list(ServingConfig().values())
    assert fields["mode"].kind == "choice" and "vpp" in fields["mode"].choices
    assert parse(fields["tp"], "4") == 4 and parse(fields["chunk"], "24k") == 24576
    with pytest.raises(ConfigError, match=r"^tp: must be a positive integer, got 'four'$"):
        parse(fields["tp"], "four")
    assert parse(fields["layer_split"], " ") is None and parse(fields["layer_split"], "31,30") == (31, 30)
    with pytest.raises(ConfigError, match=r"^layer_split: "):
        parse(fields["layer_split"], "31;30")
    assert error_field("tp: must divide 40", fields) == "tp" and error_field("pp stages: 3", fields) is None
    assert shown_for("smooth_factor", "dcpp", "sim") and not shown_for("smooth_factor", "cpp", "sim")
    assert shown_for("tp", "cpp", "live") and shown_for("smooth_factor", "dcpp", "live")  # vLLM-Ascend takes it
    assert shown_for("sticky_decodes", "cpp", "sim") and not shown_for("sticky_decodes", "cpp", "live")


def test_a_text_mode_browser_counts_as_none(monkeypatch):
    monkeypatch.setattr(webbrowser, "get", lambda: webbrowser.GenericBrowser("lynx"))
    assert gui_browser() is None
    monkeypatch.setattr(webbrowser, "get", lambda: webbrowser.BackgroundBrowser("firefox"))
    assert gui_browser() is not None


def test_console_command_refuses_a_bad_store_in_one_line(tmp_path, capsys):
    bad = tmp_path / "notes.duckdb"
    bad.write_text("not a database", encoding="utf-8")
    assert run_cli(cli, ["console", "--db", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pipedeck: error: db: ") and len(err.strip().splitlines()) == 1
    assert bad.read_text(encoding="utf-8") == "not a database"


def test_the_live_config_picker_offers_the_form_then_stored_runs_by_what_they_ran_and_marks_what_a_run_lacks():
    form = ServingConfig.of(model="qwen2.5-14b", hardware="a100-40g-pcie", tp=2, pp=2, chunk=8192)
    attached = RunRow(  # a run against a server started elsewhere: nothing known of its model, shape or mode
        id=7,
        created_at=datetime.now(UTC),
        backend="live",
        scenario="short-4k",
        mode=None,
        model=None,
        hardware=None,
        tp=None,
        pp=None,
        chunk=None,
        rate=None,
        seed=0,
        study=None,
        trial=None,
        label=None,
        requests=3,
        ttft_p90_s=None,
        tpot_p90_s=None,
        throughput_tok_s=0.0,
        makespan_s=1.0,
        bubble_ratio=None,
    )
    simulated = replace(attached, id=8, backend="sim", mode="dcpp", model="qwen2.5-14b", hardware="h100", tp=4, pp=2)
    options = source_options(form, [], [replace(simulated, chunk=6144), attached])
    assert options[:2] == [
        ("form: qwen2.5-14b a100-40g-pcie tp2 pp2 cpp 8k", FORM),
        ("run 8: qwen2.5-14b h100 tp4 pp2 dcpp 6k", "run:8"),
    ]
    assert options[2][0].startswith("run 7: ? ? ") and options[2][1] == "run:7"
