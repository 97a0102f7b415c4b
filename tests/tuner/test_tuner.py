"""The tuner: search space, study runs, resume after a killed process, the tune command."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import optuna
import pytest

from pipedeck.backends import ENGINES, ConfigError, ServingConfig, engine_defaults
from pipedeck.console.cli import cli
from pipedeck.console.errors import run_cli
from pipedeck.store import RunStore
from pipedeck.tuner import (
    GOODPUT,
    Objective,
    TuneInputs,
    TuneSpec,
    build_spec,
    clear_win,
    default_params,
    knob_settings,
    open_storage,
    parse_fixes,
    parse_slo,
    run_study,
    suggest_config,
)
from pipedeck.tuner.objective import PRUNED_VALUE, Evaluator
from pipedeck.tuner.objectives import TTFT
from pipedeck.tuner.space import SpaceContext, foreign_params, searched_flags
from pipedeck.tuner.study import create_or_resume
from tests.flags import assert_flags_give_back
from tests.tune_support import SMALL, spec


def sample(ctx: SpaceContext, fixed: dict, n: int = 40, seed: int = 0) -> list[dict]:
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=seed))
    drafts = []
    for _ in range(n):
        trial = study.ask()
        drafts.append(suggest_config(trial, ctx, fixed))
        study.tell(trial, 0.0)
    return drafts


def test_space_samples_valid_conditional_configs():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    ctx = SpaceContext("deepseek-v3.1", "ascend-910c", 16, engine="vllm-ascend", longest_prompt=24000)
    assert ctx.chunk_range == (64, 48000)  # 4 x matmul_half_tokens 16; twice the longest prompt; 16-token tiles
    drafts = sample(ctx, {})
    assert {d["mode"] for d in drafts} > {"cpp", "dcpp"}
    chunks = [d["chunk"] for d in drafts]
    assert min(chunks) < 512 and max(chunks) > 8192  # log-scaled: every octave is as likely
    for d in drafts:
        assert d["tp"] * d["pp"] == 16
        assert sum(d["layer_split"]) == 61 and min(d["layer_split"]) >= 1
        assert 64 <= d["chunk"] <= 48000 and d["chunk"] % 16 == 0
        assert 8 <= d["max_running"] <= min(1024, d["chunk"])  # vLLM needs max-num-seqs <= the token budget
        assert ("smooth_factor" in d) == (d["mode"] == "dcpp") == ("min_chunk" in d)
        assert ("load_alpha" in d) == d["delay_scheduling"]
        assert ("rls_forgetting" in d) == (d["mode"] == "fastpp-alp")
        if d["pp"] == 1:
            assert d["mode"] == "cpp"
        try:
            ServingConfig.of(**d).resolve()
        except ConfigError as err:  # an uneven split can overload a stage: the objective prunes it
            assert "GB of weights per device" in str(err)
    assert any(
        d["layer_split"] != ServingConfig.of(tp=d["tp"], pp=d["pp"], mode=d["mode"]).resolve().parallelism.layer_split
        for d in drafts
    )  # uneven splits around vLLM's are explored


def test_fix_pins_dimensions_and_pinning_everything_evaluates_one_config():
    ctx = SpaceContext("deepseek-v3.1", "ascend-910c", 16)
    fixed = parse_fixes(
        ["mode=vpp", "chunk=24k", "max-running=128", "tp=8", "pp=2", "layer-split=16,15,15,15", "delay-scheduling=off"]
    )
    drafts = sample(ctx, fixed, n=5)
    assert all(d == drafts[0] for d in drafts)
    assert drafts[0]["chunk"] == 24576 and drafts[0]["layer_split"] == (16, 15, 15, 15)
    assert all(d["tp"] == 4 for d in sample(ctx, parse_fixes(["pp=4"]), n=5))


def test_optuna_parameters_are_fix_names_and_the_flags_give_back_the_config():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    ctx = SpaceContext("deepseek-v3.1", "ascend-910c", 16, engine="vllm-ascend", longest_prompt=24000)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    names = set()
    for _ in range(40):
        trial = study.ask()
        draft = suggest_config(trial, ctx, parse_fixes(["max-running=64"]))
        flags = searched_flags(trial.params, draft)
        assert_flags_give_back(flags, draft)
        assert {"tp", "pp", "chunk"} <= set(flags) and "max-running" not in flags  # pinned, so not searched
        if any(name.startswith("layer-split[") for name in trial.params):  # a split with room to move
            assert flags["layer-split"] == ",".join(map(str, draft["layer_split"]))
        names |= set(trial.params)
        study.tell(trial, 0.0)
    assert foreign_params(names) == []
    assert {"tp", "mode", "chunk", "layer-split[0] of 2", "layer-split[2] of 4", "delay-scheduling"} <= names
    assert foreign_params(["parallelism", "split4_0", "max_running", "layer-split[0]", "chunk"]) == [
        "layer-split[0]",
        "max_running",
        "parallelism",
        "split4_0",
    ]


def test_the_parallelism_and_layer_split_keep_their_search_distributions():
    """tp: the same choices as the old `TPxPP` categorical; each stage's layers: vLLM's +- the same reach."""
    ctx = SpaceContext("deepseek-v3.1", "ascend-910c", 16)
    trial = optuna.create_study().ask({})
    suggest_config(trial, ctx, parse_fixes(["tp=8", "mode=vpp"]))  # 2 x 2 stages of 61 layers: vLLM's 15,15,16,15
    assert {k: v for k, v in trial.distributions.items() if k.startswith("layer-split")} == {
        f"layer-split[{i}] of 4": optuna.distributions.IntDistribution(base - 2, base + 2)  # was a shift in [-2, 2]
        for i, base in enumerate((15, 15, 16))
    }
    trial = optuna.create_study().ask({})
    suggest_config(trial, ctx, {})
    assert trial.distributions["tp"] == optuna.distributions.CategoricalDistribution(ctx.tp_options)
    assert all(16 % tp == 0 for tp in ctx.tp_options) and ctx.tp_options[0] == 16


def test_knob_settings_list_what_the_config_activates():
    dcpp = ServingConfig.of(mode="dcpp", smooth_factor=0.75).to_dict()
    assert knob_settings(dcpp) == ["smooth-factor=0.75", "min-chunk=4096", "delay-scheduling=off"]
    alp = ServingConfig.of(mode="fastpp-alp", delay_scheduling=True, rls_forgetting=0.9975, delay_mode="e2e_first")
    assert knob_settings(alp.to_dict()) == [
        "alp-window-s=10",
        "slo-tpot-coeff=1.05",
        "rls-forgetting=0.9975",
        "controller-min-chunk=128",
        "delay-scheduling=on",
        "waiting-tok-threshold=1024",
        "load-alpha=0.4",
        "base-unit=128",
        "delay-mode=e2e_first",
    ]


def test_default_params_are_the_engine_default():
    ctx = SpaceContext("deepseek-v3.1", "ascend-910c", 16, engine="vllm-ascend")
    assert default_params(ctx, {}) == {
        "tp": 8,
        "mode": "cpp",
        "chunk": 2048,
        "max-running": 256,
        "layer-split[0] of 2": 31,
        "delay-scheduling": False,
    }  # vLLM's 31,30
    assert default_params(ctx, parse_fixes(["mode=dcpp"]))["smooth-factor"] == 1.0
    h100 = SpaceContext("qwen2.5-32b", "h100-sxm", 2, engine="vllm")
    assert (h100.baseline.chunk, h100.baseline.max_running) == (8192, 1024)
    assert SpaceContext("qwen2.5-32b", "a100-40g-pcie", 4, engine="sglang").baseline.chunk == 4096


@pytest.mark.parametrize(
    ("hardware", "engine", "budget"),
    [
        ("a100-40g-pcie", "vllm", (2048, 256)),
        ("ascend-910c", "vllm-ascend", (2048, 256)),
        ("h100-sxm", "vllm", (8192, 1024)),
        ("h200-sxm", "vllm", (8192, 1024)),
        ("a100-40g-pcie", "sglang", (4096, 4096)),
        ("h100-sxm", "sglang", (8192, 4096)),
    ],
)
def test_each_engine_defaults_as_it_does_on_that_hardware(hardware, engine, budget):
    defaults = engine_defaults(engine, ServingConfig.of(hardware=hardware).hardware_profile)
    assert (defaults.chunk, defaults.max_running) == budget and defaults.source


def test_study_runs_seeds_the_default_and_syncs_the_store(tmp_path):
    outcome = run_study(spec(tmp_path), tmp_path / "runs.duckdb")
    with RunStore.open(tmp_path / "runs.duckdb") as store:
        trials = store.trials("t")
        runs = store.list_runs(study="t")
        best_run = store.get_run(outcome.best_run_id).result
    assert outcome.trials == 6  # exactly --trials
    assert outcome.default is not None and outcome.default.number == 0
    assert (outcome.default.config["mode"], outcome.default.config["chunk"], outcome.default.config["max_running"]) == (
        "cpp",
        2048,
        256,
    )  # `vllm serve` on an A100 40GB
    assert outcome.best.value >= outcome.default.value
    assert outcome.ratio == pytest.approx(outcome.best.value / outcome.default.value)
    assert len({t.number for t in trials}) == len(trials) >= 6
    assert {r.label for r in runs} >= {"best"} and best_run.spans
    assert best_run.config == outcome.best.config
    for t in trials:  # when each started, and the worker (host:pid) that ran it
        assert t.worker == f"{socket.gethostname()}:{os.getpid()}" and t.started_at <= t.completed_at
    linked = {t.number: t.run_id for t in trials if t.run_id is not None}
    assert linked == {outcome.best.number: outcome.best_run_id, 0: outcome.default_run_id}
    for t in trials:
        assert (t.objective is not None) == (t.state == "COMPLETE")  # a pruned trial has no objective
        if t.config is not None:  # params: --fix names and values that pin what the trial ran
            assert {"tp", "pp", "chunk"} <= set(t.params)
            assert_flags_give_back(t.params, t.config)
    study = optuna.load_study(study_name="t", storage=open_storage(str(tmp_path / "journal.jsonl")))
    assert study.metric_names == [f"goodput (req/s); a pruned trial: {PRUNED_VALUE}"]
    assert study.user_attrs["objective"] == "goodput (req/s), maximized"
    assert foreign_params({name for t in study.trials for name in t.params}) == []
    pruned = [t for t in study.trials if t.state == optuna.trial.TrialState.PRUNED and t.intermediate_values]
    assert pruned, "the study prunes configs that fail below the best so far"
    for t in pruned:  # a pruned trial reports the requests/s it served within the SLO where it failed
        metrics = t.user_attrs["metrics"]
        assert t.intermediate_values[0] == metrics["fails_slo_at_rps"] * metrics["attainment_at_fail"]
        assert t.user_attrs["value_is"] == PRUNED_VALUE  # optuna-dashboard shows that figure as its value


def test_the_dashboard_reads_the_values_that_ran_and_one_attribute_of_worker_processes(tmp_path):
    """optuna-dashboard shows what the study holds: each trial's parameters as they ran, readable study attributes."""
    run_study(spec(tmp_path, trials=6), tmp_path / "runs.duckdb", jobs=2)
    study = optuna.load_study(study_name="t", storage=open_storage(str(tmp_path / "journal.jsonl")))
    measured = [t for t in study.trials if "config" in t.user_attrs and "chunk" in t.params]
    assert any("chunk" in t.user_attrs.get("params_as_run", {}) for t in measured)  # a chunk snapped to its tile
    for t in measured:
        ran = {**t.params, **t.user_attrs.get("params_as_run", {})}
        assert (ran["chunk"], ran["max-running"]) == (
            t.user_attrs["config"]["chunk"],
            t.user_attrs["config"]["max_running"],
        )
        assert set(t.user_attrs.get("params_as_run", {})) <= set(t.params)
    assert set(study.user_attrs) == {"pipedeck", "objective", "workers", "worker_processes"}
    processes = study.user_attrs["worker_processes"]
    assert len(processes) == study.user_attrs["workers"] == 2 and all({"host", "pid"} <= set(p) for p in processes)


def test_stop_request_interrupts_and_the_study_resumes(tmp_path):
    stop = threading.Event()
    seen = []

    def progress(p):
        seen.append(p.finished)
        if p.finished >= 2:
            stop.set()

    first = run_study(spec(tmp_path, trials=200), tmp_path / "runs.duckdb", on_progress=progress, stop_requested=stop)
    assert first.interrupted and 2 <= first.trials < 200
    again = run_study(spec(tmp_path, trials=first.trials + 2), tmp_path / "runs.duckdb")
    assert not again.interrupted and again.trials == first.trials + 2


def test_two_tunes_finishing_one_study_at_once_store_its_best_and_default_once(tmp_path, monkeypatch):
    """Both tunes simulate the finalists' runs, then both store them: the store keeps one copy of each."""
    run_study(spec(tmp_path, trials=3), tmp_path / "first.duckdb")  # the finished study, in the shared journal
    both_simulated = threading.Barrier(2, timeout=60)
    simulate = Evaluator.run

    def simulate_then_wait(self, config, rate, timeline=False):
        result = simulate(self, config, rate, timeline=timeline)
        if timeline:  # a finalist's run, before it is stored: the other tune has checked the store too
            both_simulated.wait()
        return result

    monkeypatch.setattr(Evaluator, "run", simulate_then_wait)
    db, outcomes = tmp_path / "runs.duckdb", []
    tunes = [
        threading.Thread(target=lambda: outcomes.append(run_study(spec(tmp_path, trials=3), db))) for _ in range(2)
    ]
    for tune in tunes:
        tune.start()
    for tune in tunes:
        tune.join()
    assert len(outcomes) == 2
    with RunStore.open(db) as store:
        runs = store.list_runs(study="t")
    assert sorted((r.trial, r.label) for r in runs) == sorted(
        {(o.best.number, "best") for o in outcomes} | {(o.default.number, "default") for o in outcomes}
    )
    assert {r.id for r in runs} == {o.best_run_id for o in outcomes} | {o.default_run_id for o in outcomes}


def measured_configs(tmp_path, name: str = "t") -> list[str]:
    """The configs a study's finished trials measured (answers to a repeated config excluded), as JSON."""
    study = optuna.load_study(study_name=name, storage=open_storage(str(tmp_path / "journal.jsonl")))
    return [
        json.dumps(t.user_attrs["config"], sort_keys=True)
        for t in study.get_trials(states=finished_states())
        if "config" in t.user_attrs and "duplicate_of" not in t.user_attrs
    ]


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_a_resumed_study_never_measures_a_finished_config_again(tmp_path, sampler):
    db = tmp_path / "runs.duckdb"
    for target in (4, 8, 12):  # three sessions; each new one used to replay the first one's proposals
        run_study(spec(tmp_path, trials=target, sampler=sampler), db)
    configs = measured_configs(tmp_path)
    assert len(configs) == 12 and len(set(configs)) == len(configs)


def test_a_space_smaller_than_the_trials_asked_for_ends(tmp_path):
    pinned = parse_fixes(["tp=4", "pp=1", "chunk=2k", "max-running=256", "delay-scheduling=off"])
    outcome = run_study(spec(tmp_path, trials=3, fixed=pinned), tmp_path / "runs.duckdb")
    study = optuna.load_study(study_name="t", storage=open_storage(str(tmp_path / "journal.jsonl")))
    assert len(measured_configs(tmp_path)) == 1 and outcome.trials == 1  # the one config, measured once
    repeats = [t for t in study.trials if "duplicate_of" in t.user_attrs]
    assert repeats and all(t.value == outcome.best.value for t in repeats) and len(study.trials) <= 1 + 3 * 3


def test_resume_after_a_killed_tune_keeps_every_finished_trial_once(tmp_path):
    db = tmp_path / "runs.duckdb"
    argv = [sys.executable, "-m", "pipedeck.console", "tune", *SMALL, "--study", "killed", "--db", str(db)]
    proc = subprocess.Popen([*argv, "--trials", "400"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    storage = open_storage(str(tmp_path / "runs.optuna.jsonl"))
    finished_before: dict[int, dict] = {}
    deadline = time.time() + 60
    while time.time() < deadline and len(finished_before) < 4:
        time.sleep(0.2)
        try:
            study = optuna.load_study(study_name="killed", storage=storage)
        except KeyError:
            continue
        finished_before = {
            t.number: t.params
            for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED))
        }
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert len(finished_before) >= 4

    target = len(finished_before) + 3
    result = subprocess.run([*argv, "--trials", str(target), "--json"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    study = optuna.load_study(study_name="killed", storage=open_storage(str(tmp_path / "runs.optuna.jsonl")))
    finished = {
        t.number: t for t in study.get_trials(states=(optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED))
    }
    assert out["trials"] == len(finished) >= target
    for number, params in finished_before.items():  # nothing finished was lost or redone
        assert finished[number].params == params
    running = study.get_trials(states=(optuna.trial.TrialState.RUNNING,))
    assert running == []
    abandoned = [t for t in study.trials if t.state == optuna.trial.TrialState.FAIL]
    retried = {t.user_attrs["retry_of"]: t for t in study.trials if "retry_of" in t.user_attrs}
    assert len(retried) == len([t for t in study.trials if "retry_of" in t.user_attrs])  # each retried once
    for t in abandoned:  # the trial the kill interrupted is queued again with its parameters
        retry = retried[t.number]
        assert retry.state in (optuna.trial.TrialState.WAITING, *finished_states())
        if retry.state != optuna.trial.TrialState.WAITING:  # what was sampled before the kill is kept
            assert {k: retry.params[k] for k in t.params} == t.params
    with RunStore.open(db) as store:
        stored = store.trials("killed")
    assert len({t.number for t in stored}) == len(stored)
    assert {t.number for t in stored if t.state in ("COMPLETE", "PRUNED")} == set(finished)


def finished_states():
    return (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)


def test_tune_json_reports_best_default_ratio_ties_and_intervals(tmp_path, capsys):
    status = run_cli(
        cli, ["tune", *SMALL, "--trials", "8", "--repeats", "3", "--db", str(tmp_path / "r.duckdb"), "--json"]
    )
    out = json.loads(capsys.readouterr().out)
    assert status == 0
    assert out["trials"] >= 8 and out["study"] and out["baseline_engine"] == "vllm"
    for key in ("best", "default"):
        assert set(out[key]) >= {"config", "goodput_rps", "attainment", "goodput_ci"}
        assert 0 <= out[key]["attainment"] <= 1
        ci = out[key]["goodput_ci"]
        assert ci["seeds"] == [0, 1, 2] and ci["values"][0] == out[key]["goodput_rps"]  # its own seed first
        assert ci["low"] <= ci["mean"] <= ci["high"] and ci["mean"] == pytest.approx(sum(ci["values"]) / 3)
    assert out["ratio"] == pytest.approx(out["best"]["goodput_rps"] / out["default"]["goodput_rps"])
    assert out["clear_win"] == clear_win(out["best"]["goodput_ci"], out["default"]["goodput_ci"], GOODPUT)
    tied = [t["goodput_rps"] for t in out["ties"]]
    assert out["best"]["trial"] in [t["trial"] for t in out["ties"]]
    assert max(tied) <= min(tied) * 1.02  # every tie within the precision of the best
    assert set(out["free_in_ties"]) <= {
        "parallelism",
        "mode",
        "chunk",
        "max-running",
        "layer-split",
        "delay-scheduling",
        "waiting-tok-threshold",
        "load-alpha",
        "base-unit",
        "delay-mode",
        "smooth-factor",
        "min-chunk",
        "kv-free-threshold",
        "tpot-violation",
        "ttft-low",
        "ttft-high",
        "tpot-safe",
        "alp-window-s",
        "slo-tpot-coeff",
        "rls-forgetting",
        "controller-min-chunk",
        "adaptive-threshold",
        "adaptive-fit-chunks",
    }


def test_tune_summary_shows_the_knobs_of_the_chosen_mode(tmp_path, capsys):
    args = [
        "tune",
        *SMALL,
        "--trials",
        "2",
        "--db",
        str(tmp_path / "r.duckdb"),
        "--export",
        str(tmp_path / "out"),
        "--format",
        "fastpp",
        "--fix",
        "mode=fastpp-greedy",
        "--fix",
        "ttft-low=0.05",
        "--fix",
        "delay-scheduling=on",
        "--fix",
        "delay-mode=tpot_first",
    ]
    assert run_cli(cli, args) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if "=" in line]
    text = " ".join(rows)
    for setting in ("ttft-low=0.05", "kv-free-threshold=", "delay-scheduling=on", "delay-mode=tpot_first"):
        assert setting in text
    assert "alp-window-s" not in text  # a knob of another mode


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--slo", "ttft=2"], "pipedeck: error: slo: 'ttft=2' needs a unit: s or ms"),
        (["--fix", "colour=red"], "pipedeck: error: fix: unknown dimension 'colour'"),
        (["--fix", "tp=3"], "pipedeck: error: tp: must divide the 4 devices, got 3"),
        (["--scenario", "long-64k"], "pipedeck: error: Invalid value for --scenario: goodput searches Poisson rates"),
        (["--jobs", "0"], "pipedeck: error: Invalid value for --jobs: must be a positive integer, got 0"),
        (["--sampler", "grid"], "pipedeck: error: Invalid value for '--sampler'"),
        (
            ["--export", "out", "--format", "vllm", "--fix", "delay-scheduling=on"],
            "pipedeck: error: fix: delay scheduling cannot run on vllm, the engine tuned for (--format)",
        ),
        (
            ["--fix", "mode=dcpp"],
            "pipedeck: error: fix: mode dcpp cannot run on vllm, the engine tuned for (--format); engines that can: "
            "vllm-ascend, sglang",
        ),
    ],
)
def test_tune_rejects_bad_input_with_one_line(tmp_path, capsys, extra, message):
    status = run_cli(cli, ["tune", *SMALL, "--trials", "2", "--db", str(tmp_path / "r.duckdb"), *extra])
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith(message) and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r.optuna.jsonl").exists()


def test_a_study_from_before_the_backend_setting_resumes_on_the_simulator(tmp_path):
    """Studies created before `backend` was a setting ran on the simulator; they resume, and no other backend may."""
    old = spec(tmp_path)
    study, created = create_or_resume(old)
    assert created
    study.set_user_attr("pipedeck", {k: v for k, v in old.settings().items() if k != "backend"})
    assert create_or_resume(old)[1] is False
    with pytest.raises(ConfigError, match="was created with backend='sim', not 'live'"):
        create_or_resume(spec(tmp_path, backend="live"))


def test_a_study_an_older_pipedeck_made_is_not_resumed(tmp_path, capsys):
    """Its trials' parameter names (`parallelism`, `split4_0`) are not this space's: one line, exit 2."""
    old = spec(tmp_path)
    study = optuna.create_study(study_name="t", storage=open_storage(old.storage), direction="maximize")
    study.set_user_attr("pipedeck", old.settings())
    trial = study.ask()
    trial.suggest_categorical("parallelism", ("4x1", "2x2"))
    trial.suggest_int("split2_0", -2, 2)
    study.tell(trial, 1.0)
    study.enqueue_trial({"parallelism": "2x2", "max_running": 64})  # a queued retry, not run yet
    message = (
        "study: 't' was made by an older pipedeck, whose parameter names (max_running, parallelism, split2_0) "
        "this one does not use; start a new --study"
    )
    with pytest.raises(ConfigError) as err:
        create_or_resume(old)
    assert str(err.value) == message
    status = run_cli(
        cli,
        ["tune", *SMALL, "--study", "t", "--storage", old.storage, "--trials", "2", "--db", str(tmp_path / "r.duckdb")],
    )
    assert (status, capsys.readouterr().err.strip()) == (2, f"pipedeck: error: {message}")
    assert [t.state.name for t in study.trials] == ["COMPLETE", "WAITING"]  # nothing was run


def test_report_and_compare_show_the_finalists_intervals(tmp_path, capsys):
    db = str(tmp_path / "r.duckdb")
    assert run_cli(cli, ["tune", *SMALL, "--trials", "4", "--repeats", "2", "--db", db, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    page = tmp_path / "compare.html"
    assert (
        run_cli(cli, ["compare", str(out["best_run_id"]), str(out["default_run_id"]), "--db", db, "--out", str(page)])
        == 0
    )
    text = page.read_text()
    for key in ("best", "default"):
        ci = out[key]["goodput_ci"]
        assert f"goodput {ci['mean']:.3g} req/s (95% {ci['low']:.3g}-{ci['high']:.3g} over 2 seeds)" in text
    report = tmp_path / "report.html"
    assert run_cli(cli, ["report", "--study", out["study"], "--db", db, "--out", str(report)]) == 0
    assert "Goodput over arrival traces (mean and 95% interval)" in report.read_text()


def test_a_tune_searches_only_what_its_engine_can_run(tmp_path):
    """No --format: the engine is the hardware's default (vLLM-Ascend on Ascend), and so are the modes searched."""
    inputs = TuneInputs(
        scenario="azure-conv",
        model="qwen2.5-14b",
        hardware="ascend-910c",
        devices=4,
        slo=parse_slo("ttft=2s,tpot=200ms"),
        requests=20,
    )
    spec = build_spec(inputs, tmp_path / "x.duckdb")
    assert spec.engine == "vllm-ascend"
    assert set(spec.modes) == set(ENGINES["vllm-ascend"].modes) and "fastpp-alp" not in spec.modes
    assert spec.fixed["delay_scheduling"] is False  # vLLM-Ascend has no delay scheduling
    with pytest.raises(ConfigError, match=r"^fix: mode fastpp-alp cannot run on vllm-ascend, the engine tuned for"):
        build_spec(dataclasses.replace(inputs, fixes=("mode=fastpp-alp",)), tmp_path / "x.duckdb")
    fastpp = build_spec(dataclasses.replace(inputs, hardware="a100-40g-pcie", engine="fastpp"), tmp_path / "x.duckdb")
    assert "delay_scheduling" not in fastpp.fixed and "fastpp-greedy" in fastpp.modes


def sampled(ctx: SpaceContext, fixed: dict) -> set[str]:
    """The parameters one trial of `ctx`'s space samples with `fixed` pinned."""
    trial = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0)).ask()
    suggest_config(trial, ctx, fixed)
    return set(trial.params)


def test_a_live_tune_searches_and_pins_only_the_knobs_a_server_is_launched_with(tmp_path):
    """FastPP's controllers and the delay settings come from the fork's own config, never its launch: trials on a
    live server could not move them, so a live study leaves them at their defaults and refuses a pin of one."""
    fastpp = {"mode": "fastpp-greedy", "tp": 2, "delay_scheduling": True}
    sim, live = (SpaceContext("qwen2.5-14b", "a100-40g-pcie", 4, backend=backend) for backend in ("sim", "live"))
    assert {"kv-free-threshold", "ttft-low", "load-alpha", "delay-mode"} <= sampled(sim, fastpp)
    assert sampled(live, fastpp) == {"chunk", "max-running", "layer-split[0] of 2"}
    assert set(default_params(live, fastpp)) == {"chunk", "max-running", "layer-split[0] of 2"}
    dcpp = {"mode": "dcpp", "tp": 2, "delay_scheduling": False}
    assert {"smooth-factor", "min-chunk"} <= sampled(live, dcpp)  # vLLM-Ascend is launched with DCPP's settings
    inputs = TuneInputs(
        scenario="azure-conv",
        model="qwen2.5-14b",
        hardware="a100-40g-pcie",
        devices=4,
        slo=parse_slo("ttft=2s,tpot=200ms"),
        requests=20,
        engine="fastpp",
        backend="live",
        fixes=("kv-free-threshold=0.2",),
    )
    with pytest.raises(ConfigError, match=r"^kv_free_threshold: set to 0.2, but the live backend does not read it"):
        build_spec(inputs, tmp_path / "x.duckdb")
    assert (
        build_spec(dataclasses.replace(inputs, backend="sim"), tmp_path / "x.duckdb").fixed["kv_free_threshold"] == 0.2
    )


def test_a_goodput_search_on_a_live_server_draws_fresh_prompts_for_each_rate_unless_told():
    def options(objective: Objective, **backend_options: object):
        spec = TuneSpec(
            study="s",
            storage="",
            model="qwen2.5-14b",
            hardware="a100-40g-pcie",
            devices=1,
            scenario="sharegpt",
            objective=objective,
            slo=parse_slo("ttft=2s") if objective == GOODPUT else None,
            backend="live",
            backend_options={"endpoint": "http://127.0.0.1:9", **backend_options},
        )
        return Evaluator(spec).backend.options

    assert options(GOODPUT).fresh_prompts and not options(TTFT).fresh_prompts
    assert not options(GOODPUT, fresh_prompts=False).fresh_prompts


def test_a_live_rate_that_served_nothing_fails_in_one_line_counting_the_failures_by_kind():
    import socket

    from pipedeck.backends import ServerError

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # free once closed: nothing listens there
    spec = TuneSpec(
        study="s",
        storage="",
        model="qwen2.5-14b",
        hardware="a100-40g-pcie",
        devices=1,
        scenario="sharegpt",
        slo=parse_slo("ttft=2s"),
        requests=3,
        backend="live",
        backend_options={"endpoint": f"http://127.0.0.1:{port}", "model": "m", "metrics_interval_s": None},
    )
    with pytest.raises(ServerError, match=r"^server: 0 of 3 requests served: 3 connection refused \(at 50 req/s\)$"):
        Evaluator(spec).run(ServingConfig.of(model="qwen2.5-14b", hardware="a100-40g-pcie"), 50.0)
