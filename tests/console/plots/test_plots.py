"""`pipedeck compare` and `pipedeck report`: one self-contained HTML page each, holding the expected figures."""

from __future__ import annotations

import base64
import colorsys
import dataclasses
import json
import re
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import optuna
import pytest
from plotly.colors import unlabel_rgb

from pipedeck.backends import RankTime, RunResult, Sample, ServingConfig, Span
from pipedeck.backends.live.metrics import MetricsTimeline
from pipedeck.backends.sim import SimBackend
from pipedeck.console import comparison as comparison_module
from pipedeck.console.cli import cli
from pipedeck.console.errors import run_cli
from pipedeck.console.plots import PlotRun, legend_names
from pipedeck.console.plots.gantt import DECODE_COLOUR, MEASURED_COLOUR, common_window, timelines
from pipedeck.console.plots.server import scraped, server_gauges
from pipedeck.console.plots.study import optuna_importances
from pipedeck.console.plots.table import CELL_PX, CHAR_PX, LINE_PX, PAD_PX, PLANNED_PX
from pipedeck.scenarios import load_scenario
from pipedeck.store import RunStore, StoredRun
from pipedeck.tuner import GOODPUT, TuneSpec, parse_slo, run_study, stored_verdict
from pipedeck.tuner.importance import param_importances
from pipedeck.tuner.space import foreign_params
from tests.run_kinds import live, served

QWEN = dict(model="qwen2.5-14b", hardware="a100-40g-pcie", tp=2, pp=2)
SLO = {"ttft": {"limit_s": 2.0, "percentile": 90.0}, "tpot": {"limit_s": 0.2, "percentile": 90.0}}
COMPARE_FIGURES = {"cdf", "breakdown", "metrics", "timeline"}
DELTA = re.compile(r"\([+-][\d.]+(%| pp)")  # a metrics cell's delta against the first run


@dataclass(frozen=True)
class Runs:
    """A store with a few small runs: results and stored ids by name."""

    db: Path
    ids: dict[str, int]
    results: dict[str, RunResult]

    def argv(self, *names: str) -> list[str]:
        return [str(self.ids[n]) for n in names] + ["--db", str(self.db)]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    sim = SimBackend()
    results = {
        "cpp": sim.run(load_scenario("long-64k"), ServingConfig.of(mode="cpp")),
        "vpp": sim.run(load_scenario("long-64k"), ServingConfig.of(mode="vpp", layer_split=(16, 15, 15, 15))),
        "short": sim.run(load_scenario("short-4k"), ServingConfig.of(**QWEN), num_requests=8),
    }
    db = tmp_path_factory.mktemp("plots") / "runs.duckdb"
    with RunStore.open(db) as store:
        ids = {
            name: store.save_run(result, label=name if name == "short" else None) for name, result in results.items()
        }
        ids["bare"] = store.save_run(results["short"], label="bare", keep_timeline=False)
        store.save_study("tuned", scenario="long-64k", objective="goodput", slo=SLO, settings={}, storage="")
        ids["studied"] = store.save_run(results["vpp"], study="tuned", trial=0, label="best")
    results["bare"], results["studied"] = results["short"], results["vpp"]
    return Runs(db, ids, results)


def cli_run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str, str]:
    status = run_cli(cli, argv)
    out, err = capsys.readouterr()
    return status, out, err


def figures(page: Path) -> dict[str, dict]:
    """Every figure embedded in a page, by div id: {"data": [...], "layout": {...}}."""
    text = page.read_text(encoding="utf-8")
    decoder = json.JSONDecoder()
    found = {}
    for match in re.finditer(r'Plotly\.newPlot\(\s*"([^"]+)",\s*', text):
        data, end = decoder.raw_decode(text, match.end())
        layout, _ = decoder.raw_decode(text, end + re.match(r"\s*,\s*", text[end:]).end())
        found[match.group(1)] = {"data": data, "layout": layout}
    return found


def values(array: object) -> np.ndarray:
    """A trace array, decoding plotly's base64 typed-array form."""
    if isinstance(array, dict):
        flat = np.frombuffer(base64.b64decode(array["bdata"]), dtype=array["dtype"])
        shape = array.get("shape")
        return flat.reshape([int(n) for n in shape.split(",")]) if shape else flat
    return np.asarray(array)


def compare(capsys, runs: Runs, tmp_path: Path, *names: str, extra: tuple[str, ...] = ()) -> dict[str, dict]:
    out = tmp_path / "compare.html"
    status, stdout, err = cli_run(capsys, ["compare", *runs.argv(*names), "--out", str(out), *extra])
    assert status == 0, err
    assert stdout.splitlines()[0] == f"wrote {out}"
    return figures(out)


LABELS = {"short": "short", "bare": "bare", "studied": "best"}


def name(runs: Runs, key: str, among: tuple[str, ...]) -> str:
    """The legend name of run `key` in a comparison of the runs `among` (they name what differs among them)."""
    names = legend_names([runs.ids[k] for k in among], [runs.results[k] for k in among], [LABELS.get(k) for k in among])
    return names[among.index(key)]


# -- the page ---------------------------------------------------------------------------


def test_compare_page_is_self_contained_and_holds_every_figure(capsys, runs, tmp_path):
    found = compare(capsys, runs, tmp_path, "cpp", "vpp", "short", extra=("--slo", "ttft=2s,tpot=200ms"))
    text = (tmp_path / "compare.html").read_text(encoding="utf-8")
    assert set(found) == COMPARE_FIGURES
    assert "plotly.js v" in text  # the library itself, inlined once
    assert not re.search(r"<script[^>]+src=", text)  # no CDN (or any other) script to fetch
    assert len(text) < 5_000_000


def test_cdfs_draw_each_run_in_both_panels_with_slo_lines(capsys, runs, tmp_path):
    cdf = compare(capsys, runs, tmp_path, "vpp", "short", extra=("--slo", "ttft=2s,tpot=200ms"))["cdf"]
    for key in ("vpp", "short"):
        lines = [t for t in cdf["data"] if t["name"] == name(runs, key, ("vpp", "short"))]
        ttft = lines[0]
        assert np.allclose(values(ttft["x"]), np.sort(runs.results[key].ttfts()))
        assert values(ttft["y"])[-1] == 1.0
    [tpot] = [t for t in cdf["data"] if t["name"] == name(runs, "short", ("vpp", "short"))][1:]
    assert np.allclose(values(tpot["x"]), np.sort(runs.results["short"].tpots()) * 1e3)  # TPOT in ms
    labels = [a["text"] for a in cdf["layout"]["annotations"]]
    # long-64k has one output token a request: no TPOT line, a note instead (not a line at 0)
    assert len([t for t in cdf["data"] if t["name"] == name(runs, "vpp", ("vpp", "short"))]) == 1
    assert f"no TPOT (one output token each): {name(runs, 'vpp', ('vpp', 'short'))}" in labels
    assert "SLO P90 ≤ 2 s" in labels and "SLO P90 ≤ 200 ms" in labels
    limits = sorted(s["x0"] for s in cdf["layout"]["shapes"] if s["type"] == "line" and s["x0"] == s["x1"])
    assert limits == [2.0, 200.0]


def test_slo_lines_come_from_the_runs_study_or_are_absent(capsys, runs, tmp_path):
    with_study = compare(capsys, runs, tmp_path, "cpp", "studied")["cdf"]
    assert any(a["text"] == "SLO P90 ≤ 200 ms" for a in with_study["layout"]["annotations"])
    without = compare(capsys, runs, tmp_path, "cpp", "vpp")["cdf"]
    assert not without["layout"].get("shapes")


def test_breakdown_stacks_the_four_parts_as_shares_of_each_runs_makespan(capsys, runs, tmp_path):
    """Runs of different lengths compare as shares of their own makespans; hover carries the seconds."""
    bars = compare(capsys, runs, tmp_path, "cpp", "short")["breakdown"]["data"]
    mean = {t["name"]: t for t in bars if t.get("showlegend") is not False}
    assert set(mean) == {"compute", "exposed communication", "bubble", "idle (waiting for work)"}
    among = ("cpp", "short")
    assert [x.replace("<br>", " ") for x in mean["bubble"]["x"]] == [name(runs, k, among) for k in among]
    seconds = [runs.results[k].breakdown()["bubble"] for k in ("cpp", "short")]
    makespans = [runs.results[k].makespan_s for k in ("cpp", "short")]
    assert np.allclose(values(mean["bubble"]["y"]), np.divide(seconds, makespans))
    assert np.allclose(values(mean["bubble"]["customdata"]), seconds)
    assert np.allclose(np.sum([values(t["y"]) for t in mean.values()], axis=0), 1.0)
    per_rank = [t for t in bars if t.get("showlegend") is False]
    totals = np.sum([values(t["y"]) for t in per_rank], axis=0)
    assert np.allclose(totals, 1.0)  # the four parts of a rank add up to its whole makespan


def test_metrics_table_shows_config_and_deltas_against_the_first_run(capsys, runs, tmp_path):
    table = compare(capsys, runs, tmp_path, "cpp", "vpp", extra=("--slo", "ttft=15s"))["metrics"]["data"][0]
    header = table["header"]["values"]
    assert header[1:] == [f"<b>{name(runs, k, ('cpp', 'vpp'))}</b>" for k in ("cpp", "vpp")]
    labels, first, second = table["cells"]["values"]
    rows = {re.sub("<.*?>", "", label): (a, b) for label, a, b in zip(labels, first, second)}
    assert rows["mode"] == ("cpp", "vpp")
    assert rows["layer split"] == ("31,30", "16,15,15,15")
    assert rows["tp × pp"] == ("8 × 2", "8 × 2")
    ttft = [runs.results[k].summary()["ttft_s"]["p90"] for k in ("cpp", "vpp")]
    assert rows["TTFT P90 (s)"][0] == f"{ttft[0]:.4g}"
    verdict = "better" if ttft[1] < ttft[0] else "worse"  # lower latency is better
    assert rows["TTFT P90 (s)"][1] == f"{ttft[1]:.4g} ({(ttft[1] - ttft[0]) / ttft[0]:+.1%}, {verdict})"
    assert {"P50", "P99"} <= {label.split()[1] for label in rows if label.startswith("TPOT")}
    for label in ("throughput (tok/s)", "makespan (s)", "bubble ratio", "steps", "chunks", "SLO attainment"):
        assert label in rows


def test_metrics_table_says_na_where_a_run_has_no_tpot_never_0_or_minus_100_percent(capsys, runs, tmp_path):
    table = compare(capsys, runs, tmp_path, "short", "vpp", extra=("--slo", "ttft=60s,tpot=200ms"))["metrics"]
    labels, short, prefill_only = table["data"][0]["cells"]["values"]
    rows = {re.sub("<.*?>", "", label): (a, b) for label, a, b in zip(labels, short, prefill_only)}
    for p in ("P50", "P90", "P99"):
        assert rows[f"TPOT {p} (ms)"][1] == "n/a" and rows[f"TPOT {p} (ms)"][0] != "n/a"
    assert rows["SLO ttft=60s,tpot=200ms"][1] == "met (tpot n/a)"
    assert "-100" not in " ".join(prefill_only)


def test_every_delta_says_better_or_worse_in_words_and_colour_by_its_metrics_direction(capsys, runs, tmp_path):
    table = compare(capsys, runs, tmp_path, "cpp", "vpp", extra=("--slo", "ttft=15s"))["metrics"]["data"][0]
    labels, _, second = table["cells"]["values"]
    colours = dict(zip(labels, table["cells"]["font"]["color"][2]))
    rows = dict(zip((re.sub("<.*?>", "", label) for label in labels), zip(second, colours.values())))
    summaries = [runs.results[k].summary() for k in ("cpp", "vpp")]
    for label, read, lower_is_better in (
        ("TTFT P90 (s)", lambda s: s["ttft_s"]["p90"], True),
        ("makespan (s)", lambda s: s["makespan_s"], True),
        ("throughput (tok/s)", lambda s: s["throughput_tok_s"], False),
    ):
        base, value = (read(s) for s in summaries)
        better = (value < base) == lower_is_better
        text, colour = rows[label]
        assert text.endswith(", better)" if better else ", worse)"), (label, text)
        assert colour == ("#1e8449" if better else "#c0392b")
    for label in ("steps", "chunks"):  # no better way round: neither word nor colour
        text, colour = rows[label]
        assert "better" not in text and "worse" not in text and colour == "#222"


def study_page(capsys, study: tuple[Path, TuneSpec], tmp_path: Path) -> dict[str, dict]:
    """The figures of `compare --study` on a copy of the study's store: best and default, each at both rates."""
    db, spec = study
    out = tmp_path / "c.html"
    status, _, err = cli_run(
        capsys, ["compare", "--study", spec.study, "--db", str(copy_of(db, tmp_path)), "--out", str(out)]
    )
    assert status == 0, err
    return figures(out)


def test_the_metrics_table_is_as_tall_as_its_rows_wrapped_on_a_narrow_page(capsys, study, tmp_path):
    """Long run names wrap the header over lines; the figure grows with them and the SLO rows stay in view."""
    metrics = study_page(capsys, study, tmp_path)["metrics"]
    table, layout = metrics["data"][0], metrics["layout"]
    labels, *columns = table["cells"]["values"]
    assert re.sub("<.*?>", "", labels[-1]) == "SLO attainment"
    shares = table["columnwidth"]
    chars = [
        int(((PLANNED_PX - layout["margin"]["l"] - layout["margin"]["r"]) * share / sum(shares) - PAD_PX) / CHAR_PX)
        for share in shares
    ]
    rows = [table["header"]["values"], *zip(labels, *columns)]
    needed = sum(
        CELL_PX
        + LINE_PX * (max(len(textwrap.wrap(re.sub("<.*?>", "", text), width)) for text, width in zip(row, chars)) - 1)
        for row in rows
    )
    assert any(len(textwrap.wrap(re.sub("<.*?>", "", h), chars[1])) > 1 for h in rows[0][1:])  # the names wrap
    assert layout["height"] - layout["margin"]["t"] - layout["margin"]["b"] >= needed


def test_one_config_keeps_one_hue_its_other_rates_a_darker_dashed_shade(capsys, study, tmp_path):
    found = study_page(capsys, study, tmp_path)
    names = header_names(found)  # best and default at the best's rate, then both at the default's
    lines = {t["name"]: t["line"] for t in found["cdf"]["data"] if t.get("showlegend")}
    hsv = {n: colorsys.rgb_to_hsv(*(c / 255 for c in unlabel_rgb(lines[n]["color"]))) for n in names}
    best, default = (names[0], names[2]), (names[1], names[3])
    for first, second in (best, default):
        assert hsv[first][0] == pytest.approx(hsv[second][0], abs=0.02)  # one hue
        assert hsv[second][2] < hsv[first][2]  # the other rate darker
        assert (lines[first]["dash"], lines[second]["dash"]) == ("solid", "dashdot")
    assert abs(hsv[best[0]][0] - hsv[default[0]][0]) > 0.1  # the two configs apart


# -- timelines ----------------------------------------------------------------------------


def gantt_bars(timeline: dict, run_name: str) -> dict[int, list[dict]]:
    """The run's bar traces by rank (one trace per rank and span kind, decode-only batches apart)."""
    by_rank: dict[int, list[dict]] = {}
    for trace in timeline["data"]:
        match = re.fullmatch(re.escape(run_name) + r" rank (\d+) (\w+)( \(decode-only\))?", trace.get("name", ""))
        if match:
            by_rank.setdefault(int(match.group(1)), []).append(trace)
    return by_rank


def test_gantt_draws_every_span_on_its_rank_row(capsys, runs, tmp_path):
    timeline = compare(capsys, runs, tmp_path, "cpp", "vpp", "short")["timeline"]
    for key in ("cpp", "vpp", "short"):
        result = runs.results[key]
        by_rank = gantt_bars(timeline, name(runs, key, ("cpp", "vpp", "short")))
        assert sorted(by_rank) == [r.rank for r in result.ranks]
        for rank, traces in by_rank.items():
            spans = sorted((s for s in result.spans if s.rank == rank), key=lambda s: (s.start, s.end))
            starts = np.concatenate([values(t["base"]) for t in traces])
            widths = np.concatenate([values(t["x"]) for t in traces])
            assert len(starts) == len(spans) and all(t["orientation"] == "h" for t in traces)
            assert all(set(values(t["y"])) == {rank} for t in traces)
            order = np.argsort(starts, kind="stable")
            assert np.allclose(starts[order], [s.start for s in spans], atol=1e-5)
            assert np.allclose(starts[order] + widths[order], [s.end for s in spans], atol=1e-5)
    titles = [a["text"] for a in timeline["layout"]["annotations"]]
    cpp = name(runs, "cpp", ("cpp", "vpp", "short"))
    assert f"{cpp}: all 32 spans, {runs.results['cpp'].makespan_s:.4g} s" in titles


def test_gantt_labels_stage_and_chunk_and_colours_transfers_dark(capsys, runs, tmp_path):
    timeline = compare(capsys, runs, tmp_path, "cpp", "vpp")["timeline"]
    traces = {t["name"]: t for t in timeline["data"]}
    prefill = traces[f"{name(runs, 'vpp', ('cpp', 'vpp'))} rank 0 prefill"]
    assert prefill["text"][:5] == ["s0 c0", "s0 c1", "s0 c2", "s3 c0", "s0 c3"]  # the fold-back: s3 runs on rank 0
    send = traces[f"{name(runs, 'cpp', ('cpp', 'vpp'))} rank 0 send"]
    assert send["marker"]["color"] == "#2e2e2e" and "text" not in send
    assert "request %{customdata[2]} chunk %{customdata[3]}" in prefill["hovertemplate"]
    assert "virtual stage %{customdata[0]} · batch %{customdata[1]}" in prefill["hovertemplate"]
    assert values(prefill["customdata"])[3].tolist() == [3, 0, 0, 0]  # stage, batch, request, chunk


def test_a_measured_timeline_is_drawn_as_measured_not_as_decode_only_batches():
    """A live run's spans from the engine's profiler name no request: not grey decode-only batches."""
    spans = [
        Span(0, 0, 0, -1, -1, 0.0, 0.1, "prefill"),
        Span(0, 0, 0, -1, -1, 0.1, 0.11, "send"),
        Span(1, 1, 0, -1, -1, 0.1, 0.12, "recv"),
        Span(1, 1, 0, -1, -1, 0.12, 0.2, "prefill"),
        Span(0, 0, 1, -1, -1, 0.2, 0.25, "decode"),
    ]
    ranks = [RankTime(rank, 0.2, 0.01, 0.0, 0.09) for rank in (0, 1)]
    measured = dataclasses.replace(live([served(0)]), spans=spans, ranks=ranks)
    assert measured.measured_timeline
    figure = timelines([PlotRun("run 9 live", measured)]).to_plotly_json()
    traces = {t["name"]: t for t in figure["data"] if t.get("name", "").startswith("run 9")}
    prefill = traces["run 9 live rank 0 prefill"]
    assert prefill["marker"]["color"] == MEASURED_COLOUR and list(prefill["text"]) == ["s0 p"]
    assert "prefill (measured by the engine's profiler, which names no request)" in prefill["hovertemplate"]
    assert "send (measured" in traces["run 9 live rank 0 send"]["hovertemplate"]  # no "decode-only" made up
    assert traces["run 9 live rank 0 decode"]["marker"]["color"] == DECODE_COLOUR
    assert "run 9 live (measured): all 5 spans, 0.3 s" in [a["text"] for a in figure["layout"]["annotations"]]
    keys = [t["name"] for t in figure["data"] if t.get("type") == "scatter"]
    assert "measured prefill / mixed step: no request named" in keys


def drawn_starts(timeline: dict, run_name: str) -> np.ndarray:
    return np.concatenate([values(t["base"]) for traces in gantt_bars(timeline, run_name).values() for t in traces])


def test_gantt_draws_every_run_over_one_window(capsys, runs, tmp_path):
    """All runs share one x range, the longest makespan, so a short run is short and a long one long."""
    timeline = compare(capsys, runs, tmp_path, "cpp", "short")["timeline"]
    longest = max(runs.results[k].makespan_s for k in ("cpp", "short"))
    ranges = [v["range"] for k, v in timeline["layout"].items() if k.startswith("xaxis")]
    assert len(ranges) == 2 and all(r == pytest.approx([0, longest]) for r in ranges)


def test_gantt_caps_long_runs_to_one_window_of_their_first_spans_and_says_so(capsys, runs, tmp_path):
    timeline = compare(capsys, runs, tmp_path, "cpp", "short", extra=("--max-spans", "100"))["timeline"]
    starts = np.sort(np.concatenate([[s.start for s in runs.results[k].spans] for k in ("cpp", "short")]))
    window = starts[100]  # the 101st span of both runs together, in time, is the first left out
    drawn = {k: drawn_starts(timeline, name(runs, k, ("cpp", "short"))) for k in ("cpp", "short")}
    assert sum(map(len, drawn.values())) == 100 and all((d < window + 1e-4).all() for d in drawn.values())
    for k in ("cpp", "short"):
        assert len(drawn[k]) == sum(s.start < window for s in runs.results[k].spans)
    titles = [a["text"] for a in timeline["layout"]["annotations"]]
    short = runs.results["short"]
    assert (
        f"{name(runs, 'short', ('cpp', 'short'))}: first {len(drawn['short'])} of {len(short.spans)} spans "
        f"(0–{window:.4g} s of {short.makespan_s:.4g} s)" in titles
    )
    ranges = [v["range"] for k, v in timeline["layout"].items() if k.startswith("xaxis")]
    assert all(r == pytest.approx([0, window]) for r in ranges)
    longest = max(runs.results[k].makespan_s for k in ("cpp", "short"))
    assert f"0–{window:.4g} s of runs up to {longest:.4g} s long" in timeline["layout"]["title"]["text"]
    whole = compare(capsys, runs, tmp_path, "cpp", "short")["timeline"]
    assert "whole runs" in whole["layout"]["title"]["text"]


def test_common_window_fits_the_budget_across_runs():
    def spans(*starts):
        return [Span(0, 0, 0, 0, 0, t, t + 0.5, "prefill") for t in starts]

    assert common_window([spans(0, 1, 2), spans(0.5, 1.5)], [3.0, 2.0], 10) == 3.0  # all fit: the longest makespan
    assert common_window([spans(0, 1, 2), spans(0.5, 1.5)], [3.0, 2.0], 3) == 1.5  # 0, 0.5, 1 drawn; 1.5 is not
    assert common_window([[], []], [0.0, 0.0], 10) == 0.0


def test_a_run_stored_without_timeline_says_so(capsys, runs, tmp_path):
    timeline = compare(capsys, runs, tmp_path, "cpp", "bare")["timeline"]
    assert not gantt_bars(timeline, name(runs, "bare", ("cpp", "bare")))
    texts = [a["text"] for a in timeline["layout"]["annotations"]]
    assert f"{name(runs, 'bare', ('cpp', 'bare'))}: stored without a timeline" in texts
    assert any("no timeline was stored" in t for t in texts)


# -- like with like ------------------------------------------------------------------------


def header_names(found: dict[str, dict]) -> list[str]:
    return [re.sub("<.*?>", "", h) for h in found["metrics"]["data"][0]["header"]["values"][1:]]


def test_legends_name_the_settings_that_differ_and_nothing_else(capsys, runs, tmp_path):
    found = compare(capsys, runs, tmp_path, "cpp", "vpp")
    assert header_names(found) == [
        f"run {runs.ids['cpp']} · cpp · split 31,30",
        f"run {runs.ids['vpp']} · vpp · split 16,15,15,15",
    ]
    assert {t["name"] for t in found["cdf"]["data"]} == set(header_names(found))
    same = compare(capsys, runs, tmp_path, "short", "bare")  # one result stored twice: only the labels differ
    assert header_names(same) == [f"run {runs.ids['short']} short", f"run {runs.ids['bare']} bare"]


def test_runs_of_different_scenarios_warn_on_stderr_and_on_the_page_and_get_no_deltas(capsys, runs, tmp_path):
    out = tmp_path / "c.html"
    status, stdout, err = cli_run(capsys, ["compare", *runs.argv("cpp", "short"), "--out", str(out)])
    assert status == 0 and stdout.splitlines() == [f"wrote {out}"]
    cpp, short = runs.ids["cpp"], runs.ids["short"]
    assert err.splitlines() == [
        f"pipedeck: warning: the runs differ in scenario (run {cpp}: long-64k; run {short}: short-4k): "
        "their latencies are not comparable",
        f"pipedeck: warning: the runs differ in model (run {cpp}: deepseek-v3.1; run {short}: qwen2.5-14b): "
        "their latencies are not comparable",
        f"pipedeck: warning: the runs differ in hardware (run {cpp}: ascend-910c; run {short}: a100-40g-pcie): "
        "their latencies are not comparable",
    ]
    text = out.read_text(encoding="utf-8")
    assert f'<p class="warn">warning: the runs differ in scenario (run {cpp}: long-64k; run {short}: short-4k)' in text
    _, first, second = figures(out)["metrics"]["data"][0]["cells"]["values"]
    assert not any(DELTA.search(cell) for cell in first + second)  # no delta across scenarios


def copy_of(db: Path, tmp_path: Path) -> Path:
    copy = tmp_path / db.name
    shutil.copy(db, copy)
    return copy


def labelled(db: Path, study: str) -> dict[str, StoredRun]:
    with RunStore.open(db, read_only=True) as store:
        return {r.label: store.get_run(r.id) for r in store.list_runs(study=study)}


def test_a_studys_best_and_default_are_compared_at_both_rates(capsys, study, tmp_path):
    """Both configs at the best's goodput and both at the default's: the missing two simulated once and stored."""
    db, spec = study
    db = copy_of(db, tmp_path)
    before = labelled(db, spec.study)
    best, default = before["best"], before["default"]
    assert best.result.rate != default.result.rate
    out = tmp_path / "c.html"
    status, stdout, err = cli_run(
        capsys, ["compare", str(best.id), str(default.id), "--db", str(db), "--out", str(out)]
    )
    assert status == 0, err
    after = labelled(db, spec.study)
    cross_best, cross_default = after["best@default-rate"], after["default@best-rate"]
    assert stdout.splitlines()[1].startswith(
        f"Like with like: study {spec.study}'s best (trial {best.trial}) and "
        f"default (trial {default.trial}) are each shown at both"
    )
    assert f"simulated now and stored as runs {cross_best.id} and {cross_default.id}" in stdout
    assert err == ""  # runs paired at each rate: no warning about rates
    for cross, same, other in ((cross_best, best, default), (cross_default, default, best)):
        assert (cross.result.config, cross.trial, cross.result.seed) == (
            same.result.config,
            same.trial,
            same.result.seed,
        )
        assert cross.result.rate == other.result.rate and cross.result.spans
        again = SimBackend().run(
            load_scenario(spec.scenario),
            ServingConfig.from_dict(same.result.config),
            rate=other.result.rate,
            seed=same.result.seed,
            num_requests=spec.requests,
        )
        assert np.array_equal(cross.result.ttfts(), again.ttfts())  # exactly that config at that rate
    table = figures(out)["metrics"]["data"][0]
    names = header_names(figures(out))
    assert [n.split(" · ")[0] for n in names] == [
        f"run {best.id} best",
        f"run {cross_default.id} default@best-rate",
        f"run {cross_best.id} best@default-rate",
        f"run {default.id} default",
    ]
    labels, *columns = table["cells"]["values"]
    rates = dict(zip(labels, zip(*columns)))["<b>rate (req/s)</b>"]
    assert rates[0] == rates[1] != rates[2] == rates[3]
    ttft = dict(zip(labels, zip(*columns)))["<b>TTFT P90 (s)</b>"]
    assert DELTA.search(ttft[1]) and DELTA.search(ttft[3]) and not DELTA.search(ttft[2])  # only at the same rate
    status, stdout, _ = cli_run(capsys, ["compare", "--study", spec.study, "--db", str(db), "--out", str(out)])
    assert status == 0 and "stored by an earlier comparison" in stdout
    assert labelled(db, spec.study).keys() == after.keys()  # nothing simulated or stored twice
    assert header_names(figures(out)) == names


def test_a_live_best_and_default_are_not_measured_again_and_the_page_says_so(capsys, study, tmp_path):
    db, spec = study
    db = copy_of(db, tmp_path)
    runs = labelled(db, spec.study)
    with RunStore.open(db) as store:
        ids = [
            store.save_run(
                dataclasses.replace(runs[label].result, backend="live"), study=spec.study, trial=0, label=label
            )
            for label in ("best", "default")
        ]
    out = tmp_path / "c.html"
    status, stdout, err = cli_run(capsys, ["compare", *map(str, ids), "--db", str(db), "--out", str(out)])
    assert status == 0, err
    assert "cannot be measured again at the other run's rate from here" in stdout
    assert "the runs differ in rate" in err and len(header_names(figures(out))) == 2


# -- PNG and errors -------------------------------------------------------------------------


def test_png_without_kaleido_prints_one_hint_and_still_writes_html(capsys, runs, tmp_path, monkeypatch):
    monkeypatch.setattr(comparison_module, "kaleido_installed", lambda: False)
    out = tmp_path / "c.html"
    status, stdout, _err = cli_run(capsys, ["compare", *runs.argv("cpp", "vpp"), "--out", str(out), "--png"])
    assert status == 0 and out.is_file() and not list(tmp_path.glob("*.png"))
    assert stdout.splitlines() == [
        f"wrote {out}",
        "png: skipped: PNG export needs kaleido: pip install 'pipedeck[png]'",
    ]


@pytest.mark.parametrize(
    "argv, message",
    [
        (["cpp"], "at least two run ids"),
        (["cpp", "cpp"], "given twice"),
        (["cpp", 999], "no run 999"),
        (["cpp", "vpp", "--slo", "ttft=fast"], "slo:"),
        (["cpp", "x"], "'x' is not a valid integer"),
        (["cpp", "vpp", "--study", "tuned"], "give run ids or --study, not both"),
        (["--study", "nope"], "study: nope has no stored best or default run"),
    ],
)
def test_compare_errors_are_one_line_with_status_2(capsys, runs, tmp_path, argv, message):
    ids = [str(runs.ids.get(a, a)) for a in argv]
    out = tmp_path / "c.html"
    status, _stdout, err = cli_run(capsys, ["compare", *ids, "--db", str(runs.db), "--out", str(out)])
    assert status == 2 and not out.exists()
    assert len(err.strip().splitlines()) == 1 and message in err and err.startswith("pipedeck: error:")


def test_unwritable_out_is_refused_before_reading_any_run(capsys, runs, tmp_path):
    out = tmp_path / "missing" / "c.html"
    status, _, err = cli_run(capsys, ["compare", str(runs.ids["cpp"]), "999", "--db", str(runs.db), "--out", str(out)])
    assert status == 2 and "--out" in err and "does not exist" in err and len(err.strip().splitlines()) == 1


# -- report -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, TuneSpec]:
    folder = tmp_path_factory.mktemp("study")
    spec = TuneSpec(
        study="small",
        storage=str(folder / "small.optuna.jsonl"),
        scenario="azure-conv",
        requests=60,
        model="qwen2.5-14b",
        hardware="a100-40g-pcie",
        devices=4,
        objective=GOODPUT,
        slo=parse_slo("ttft=2s,tpot=200ms"),
        trials=4,
    )
    run_study(spec, folder / "runs.duckdb")
    return folder / "runs.duckdb", spec


def report(capsys, db: Path, out: Path, name: str = "small") -> tuple[dict[str, dict], str]:
    status, stdout, err = cli_run(capsys, ["report", "--study", name, "--db", str(db), "--out", str(out)])
    assert status == 0, err
    assert stdout.strip() == f"wrote {out}"
    return figures(out), out.read_text(encoding="utf-8")


def test_report_shows_history_importances_chunks_and_best(capsys, study, tmp_path):
    db, spec = study
    found, text = report(capsys, db, tmp_path / "report.html")
    assert not re.search(r"<script[^>]+src=", text) and "plotly.js v" in text
    with RunStore.open(db, read_only=True) as store:
        trials = store.trials(spec.study)
        best = stored_verdict(store.get_study(spec.study), trials).winner  # the trial `tune` recommends
    done = [t for t in trials if t.state == "COMPLETE"]
    assert {"Best Value"} <= {t.get("name") for t in found["history"]["data"]}
    objective = next(t for t in found["history"]["data"] if t.get("name") == "goodput (req/s)")
    assert sorted(values(objective["y"])) == sorted(t.objective for t in done)
    assert "importances" in found or "Parameter importances need" in text
    if "importances" in found:  # Optuna's parameters, by their --fix names
        names = list(found["importances"]["data"][0]["y"])
        assert names and foreign_params(names) == [] and "tp" in names
    by_mode = {t["name"]: t for t in found["chunk"]["data"] if t["name"] in {str(d.config["mode"]) for d in done}}
    for mode, trace in by_mode.items():
        assert sorted(values(trace["x"])) == sorted(t.config["chunk"] for t in done if t.config["mode"] == mode)
    assert found["chunk"]["layout"]["xaxis"]["type"] == "log"
    table = found["best"]["data"][0]
    assert table["header"]["values"][1:3] == [f"<b>best (trial {best.number})</b>", "<b>default (trial 0)</b>"]
    assert "higher goodput" in " ".join(table["cells"]["values"][3])


def test_report_builds_the_history_from_the_store_when_optuna_storage_is_gone(capsys, study, tmp_path):
    db, spec = study
    moved = Path(spec.storage).rename(tmp_path / "elsewhere.jsonl")
    try:
        found, text = report(capsys, db, tmp_path / "report.html")
    finally:
        moved.rename(spec.storage)
    assert {t["name"] for t in found["history"]["data"]} == {"goodput (req/s)", "best value"}
    assert "is gone" in text and "importances" not in found
    assert {"history", "chunk", "best"} <= set(found)


def test_report_of_a_study_without_completed_trials_says_so(capsys, tmp_path):
    db = tmp_path / "runs.duckdb"
    with RunStore.open(db) as store:
        store.save_study("empty", scenario="azure-conv", objective="goodput", slo=SLO, settings={}, storage="")
    found, text = report(capsys, db, tmp_path / "r.html", "empty")
    assert not found and "has no completed trial" in text


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--study", "nope"], "no study 'nope'"),
        ([], "--study"),
    ],
)
def test_report_errors_are_one_line_with_status_2(capsys, study, tmp_path, argv, message):
    db, _ = study
    status, _, err = cli_run(capsys, ["report", *argv, "--db", str(db), "--out", str(tmp_path / "r.html")])
    assert status == 2 and message in err and len(err.strip().splitlines()) == 1


def test_importances_are_hidden_below_ten_completed_trials_and_say_what_they_rest_on():
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=0))

    def objective(trial: optuna.Trial) -> float:
        return 2 * trial.suggest_float("chunk", 0, 1) + 0.1 * trial.suggest_float("tp", 0, 1)

    study.optimize(objective, n_trials=9)
    note = optuna_importances(study)
    assert note == (
        "Parameter importances need at least 10 completed trials (Optuna's fANOVA ranks noise on fewer); "
        "this study has 9."
    )
    assert param_importances(study) is None
    study.optimize(objective, n_trials=3)
    figure = optuna_importances(study)
    assert not isinstance(figure, str) and "over 12 completed trials" in figure.layout.title.text
    assert list(param_importances(study)) == ["chunk", "tp"]


def test_server_gauges_draw_each_gauge_a_run_reported_where_it_reported_it_and_skip_runs_never_scraped():
    watched, unwatched = live([served(0)]), live([served(1)])
    watched.live.server = MetricsTimeline(
        "vllm",
        [
            Sample(0.0, {"running": 1.0, "kv_usage": 0.25}),
            Sample(1.0, {"running": 2}),  # a whole number, as a store's JSON may give it back
            Sample(2.0, {"kv_usage": 0.5}),
        ],
    )
    runs = [PlotRun("unwatched", unwatched), PlotRun("watched", watched)]
    assert [(index, run.name, len(samples)) for index, run, samples in scraped(runs)] == [(1, "watched", 3)]
    fig = server_gauges(runs)
    assert [a.text for a in fig.layout.annotations] == ["running requests", "KV cache used"]  # no waiting: never said
    assert [(t.name, list(t.x), list(t.y)) for t in fig.data] == [
        ("watched", [0.0, 1.0], [1.0, 2.0]),
        ("watched", [0.0, 2.0], [0.25, 0.5]),
    ]
