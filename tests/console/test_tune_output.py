"""What `tune` hands a person or a pipe: progress lines, why the winner wins, where things went, what next."""

from __future__ import annotations

import json
import shlex
from types import SimpleNamespace

import optuna
import pytest
from rich.console import Console

from pipedeck.backends import ServingConfig
from pipedeck.console.cli import cli
from pipedeck.console.effects import print_effects
from pipedeck.console.errors import run_cli
from pipedeck.console.output import PIPE_WIDTH, output_console
from pipedeck.console.progress import PlainProgress
from pipedeck.console.report import verdict_note
from pipedeck.console.tune import _print_outcome
from pipedeck.tuner import (
    GOODPUT,
    KnobEffect,
    TrialSummary,
    TuneOutcome,
    TuneSpec,
    Verdict,
    default_params,
    knob_effects,
    parse_slo,
    space_context,
    suggest_config,
)
from pipedeck.tuner.objective import Evaluator
from pipedeck.tuner.objectives import TTFT
from pipedeck.tuner.verdict import Finished
from tests.tune_support import SMALL
from tests.tune_support import spec as small_spec


def baseline_config(spec: TuneSpec) -> dict[str, object]:
    ctx = space_context(spec)
    draft = suggest_config(optuna.trial.FixedTrial(default_params(ctx, {})), ctx, {})
    return ServingConfig.of(**draft).resolve().to_dict()


def test_each_moved_knob_is_put_back_alone_and_measured(tmp_path):
    spec = small_spec(tmp_path)
    baseline = baseline_config(spec)
    winner = ServingConfig.from_dict({**baseline, "chunk": 512, "max_running": 32}).resolve().to_dict()
    evaluator = Evaluator(spec)
    value = evaluator.measure(ServingConfig.from_dict(winner).resolve()).value
    only_chunk_moved = evaluator.measure(
        ServingConfig.from_dict({**winner, "max_running": baseline["max_running"]}).resolve()
    ).value
    effects = knob_effects(spec, winner, value, baseline)
    assert sorted(e.knob for e in effects) == ["chunk", "max-running"], "only the knobs the winner moved"
    by_knob = {e.knob: e for e in effects}
    assert (by_knob["chunk"].winner, by_knob["chunk"].baseline) == (512, baseline["chunk"])
    # putting max-running back leaves the winner with only its chunk moved: the same config measured directly
    assert by_knob["max-running"].reverted == only_chunk_moved
    assert by_knob["max-running"].gain == pytest.approx(value / only_chunk_moved - 1)
    assert [abs(e.gain) for e in effects] == sorted((abs(e.gain) for e in effects), reverse=True)


def test_a_pipeline_depth_goes_back_with_its_layer_split(tmp_path):
    spec = small_spec(tmp_path)
    baseline = baseline_config(spec)
    assert (baseline["tp"], baseline["pp"]) == (4, 1)
    winner = (
        ServingConfig.from_dict({**baseline, "tp": 2, "pp": 2, "layer_split": None, "mode": "cpp"}).resolve().to_dict()
    )
    value = Evaluator(spec).measure(ServingConfig.from_dict(winner).resolve()).value
    effects = {e.knob: e for e in knob_effects(spec, winner, value, baseline)}
    assert effects["parallelism"].winner == (2, 2) and effects["parallelism"].note == "with layer-split"
    assert effects["parallelism"].reverted is not None
    assert "layer-split" not in effects, "the split went back with its depth, not on its own"


def test_a_large_effect_still_says_what_went_back_with_it(tmp_path):
    spec = small_spec(tmp_path)
    effect = KnobEffect("parallelism", (16, 1), (8, 2), 2.0, 0.53, "with layer-split")
    console = Console(record=True, width=200)
    print_effects(spec, SimpleNamespace(best=SimpleNamespace(number=7)), [effect], console)
    assert "parallelism 16x1 (default 8x2): +53% goodput, with layer-split" in console.export_text()


def test_piped_tune_prints_progress_lines_the_reason_the_files_and_the_next_commands(tmp_path, capsys):
    db = tmp_path / "r.duckdb"
    status = run_cli(cli, ["tune", *SMALL, "--trials", "4", "--repeats", "1", "--db", str(db)])
    out, err = capsys.readouterr()
    assert status == 0, err
    steps = [line for line in err.splitlines() if "] best " in line or "] no config" in line]
    counts = [int(line.split("[")[1].split("/")[0]) for line in steps]
    assert counts and counts[-1] == 4 and counts == sorted(set(counts)), err  # a line whenever trials finished
    lines = out.splitlines()
    assert f"run store: {db} (runs best " in out
    assert f"study: {tmp_path / 'r.optuna.jsonl'}" in lines
    nexts = lines[lines.index("next:") + 1 :]
    assert nexts[0].startswith("  pipedeck export --study ") and "--format vllm --out deploy --db " in nexts[0]
    assert nexts[-1].startswith("  pipedeck report --study ")
    assert (
        "Parameter importances need at least 10 completed trials (Optuna's fANOVA ranks noise on fewer); this "
        "study has " in out
    )
    # piped, nothing is folded: each sentence on one line, the table at its natural width with one line per row
    assert any(line.startswith("best / default: ") and line.endswith("on the same traffic") for line in lines)
    assert len({len(line) for line in lines if line[:1] in "┏┃┡│└"}) == 1


def test_every_next_command_tune_prints_runs_as_printed(tmp_path, capsys, monkeypatch):
    """On Ascend without --format the study is tuned for vLLM-Ascend, so its `next: pipedeck export` runs."""
    monkeypatch.chdir(tmp_path)
    ascend = [*SMALL[:2], "--hardware", "ascend-910c", *SMALL[4:]]
    status = run_cli(cli, ["tune", *ascend, "--trials", "8", "--repeats", "1", "--db", "r.duckdb"])
    out, err = capsys.readouterr()
    assert status == 0, err
    lines = out.splitlines()
    nexts = [line.strip() for line in lines[lines.index("next:") + 1 :]]
    assert nexts[0].startswith("pipedeck export ") and "--format vllm-ascend" in nexts[0]
    for step in nexts:
        assert run_cli(cli, shlex.split(step)[1:]) == 0, (step, capsys.readouterr().err)
    assert (tmp_path / "deploy" / "serve.sh").is_file() and (tmp_path / "study.html").is_file()


def test_tune_json_carries_the_effects(tmp_path, capsys):
    status = run_cli(
        cli, ["tune", *SMALL, "--trials", "4", "--repeats", "1", "--db", str(tmp_path / "r.duckdb"), "--json"]
    )
    captured = capsys.readouterr()
    assert status == 0, captured.err
    out = json.loads(captured.out)
    assert captured.err == "", "--json alone shows no progress"
    if out["best"]["trial"] == out["default"]["trial"]:
        assert out["effects"] == []
    for effect in out["effects"]:
        assert effect["winner"] != effect["baseline"]
        if effect["gain"] is not None:
            assert effect["gain"] == pytest.approx(out["best"]["value"] / effect["reverted"] - 1)


def test_plain_progress_prints_a_line_per_step_and_rate_limits_the_rest():
    console = Console(record=True, width=200)
    progress = PlainProgress(console)
    task = progress.add_task("starting", total=3)
    progress.update(task, description="best 1.0 req/s")  # no step, just after the last line: held back
    progress.update(task, completed=1, description="best 1.0 req/s")
    progress.update(task, advance=1)
    text = console.export_text().splitlines()
    assert [line.split("s ", 1)[1] for line in text] == ["[1/3] best 1.0 req/s", "[2/3] best 1.0 req/s"]


def test_a_pipe_gets_unbroken_lines_and_a_terminal_its_width(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    assert output_console().width == PIPE_WIDTH  # pytest's stdout is not a terminal
    monkeypatch.setenv("COLUMNS", "90")
    assert output_console().width == 90


def test_when_the_default_wins_nothing_suggests_comparing_it_with_itself(tmp_path, capsys):
    db = tmp_path / "r.duckdb"
    status = run_cli(cli, ["tune", *SMALL, "--trials", "1", "--repeats", "1", "--db", str(db)])  # the default only
    out, err = capsys.readouterr()
    assert status == 0, err
    lines = out.splitlines()
    run_store = next(line for line in lines if line.startswith("run store: "))
    assert run_store.endswith(": the default is the best)"), run_store
    nexts = lines[lines.index("next:") + 1 :]
    assert nexts and not [line for line in nexts if "pipedeck compare" in line], nexts


def test_a_minimised_objective_is_worded_as_a_reduction(tmp_path):
    assert TTFT.better_by(1.33) == "1.33x lower mean TTFT"
    assert GOODPUT.better_by(1.79) == "1.79x higher goodput"
    assert TTFT.better_by(1.33, percent=True) == "-25% mean TTFT"
    assert GOODPUT.better_by(1.056, percent=True) == "+5.6% goodput"
    spec = small_spec(tmp_path, objective=TTFT, slo=None)
    console = Console(record=True, width=200)
    print_effects(
        spec, SimpleNamespace(best=SimpleNamespace(number=7)), [KnobEffect("chunk", 512, 2048, 1.33, 0.33)], console
    )
    assert "chunk 512 (default 2k): -25% mean TTFT" in console.export_text()


def test_the_summary_shows_the_percentile_the_slo_names(tmp_path):
    spec = small_spec(tmp_path, slo=parse_slo("ttft@p99=3s,tpot=200ms"))
    config = ServingConfig.of(chunk=2048, max_running=256).resolve().to_dict()
    metrics = {
        "goodput_rps": 2.0,
        "attainment": 0.99,
        "ttft_p90_s": 1.0,
        "ttft_p99_s": 2.5,
        "tpot_p90_s": 0.1,
        "tpot_p99_s": 0.3,
    }
    trial = TrialSummary(0, config, metrics, 2.0)
    console = Console(record=True, width=200)
    _print_outcome(spec, TuneOutcome("t", GOODPUT, 1, trial, trial, None, None, False), console)
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in console.export_text().splitlines()
        if line.count("│") > 2
    }
    assert rows["TTFT P99 (s)"] == "2.500" and rows["TPOT P90 (s)"] == "0.100" and "TTFT P90 (s)" not in rows


def test_knobs_that_vary_among_ties_are_free_within_the_tie_set_not_said_to_not_matter(tmp_path):
    """A knob free among the ties may still beat the default: its effect line must not contradict it."""
    spec = small_spec(tmp_path)
    config = ServingConfig.of(chunk=2048, max_running=256).resolve().to_dict()
    metrics = {"goodput_rps": 2.0, "attainment": 0.99, "ttft_p90_s": 1.0, "tpot_p90_s": 0.1}
    best, other = TrialSummary(3, {**config, "chunk": 7072}, metrics, 2.0), TrialSummary(5, config, metrics, 1.99)
    outcome = TuneOutcome("t", GOODPUT, 6, best, other, None, None, False, ties=(best, other), free=("chunk",))
    console = Console(record=True, width=300)
    _print_outcome(spec, outcome, console)
    print_effects(
        spec,
        outcome,
        [KnobEffect("chunk", 7072, 2048, 1.894, 0.056), KnobEffect("max-running", 64, 256, 2.0, 0.001)],
        console,
    )
    text = console.export_text()
    assert "knobs free within the tie set" in text and ": chunk" in text
    assert "did not change the result" not in text and "did not matter" not in text
    assert "chunk 7072 (default 2k): +5.6% goodput" in text
    report = verdict_note(
        Verdict(
            Finished(3, best.config, metrics, 2.0),
            (Finished(3, best.config, metrics, 2.0), Finished(5, config, metrics, 1.99)),
            ("chunk",),
        )
    )
    assert (
        "Knobs free within the tie set (" in report and report.endswith("): chunk.") and "did not change" not in report
    )


def test_a_tune_refused_for_its_run_store_leaves_no_journal_behind(tmp_path, capsys):
    bad = tmp_path / "bad.duckdb"
    bad.write_text("not a store")
    assert run_cli(cli, ["tune", "--slo", "ttft=2s,tpot=200ms", "--trials", "1", "--db", str(bad)]) == 2
    assert capsys.readouterr().err.startswith("pipedeck: error: db: ")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.duckdb"] and bad.read_text() == "not a store"
