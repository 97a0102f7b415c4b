"""`pipedeck tune`: search configs for SLO goodput with Optuna and report the best against the default."""

from __future__ import annotations

import dataclasses
import json
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict, Unpack

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..backends import ServingConfig, backend_entry, format_tokens, get_engine, interrupted_by_signals
from ..store import RunStore, default_db_path
from ..tuner import (
    DEFAULT_REPEATS,
    FREE_KNOBS,
    GOODPUT,
    GRACE_BEATS,
    HEARTBEAT_S,
    METRICS,
    MIN_TRIALS,
    OBJECTIVES,
    SAMPLERS,
    Interval,
    KnobEffect,
    Limit,
    Objective,
    Progress,
    Slo,
    TrialSummary,
    TuneInputError,
    TuneInputs,
    TuneOutcome,
    TuneSpec,
    build_spec,
    default_engine,
    effects_json,
    export_best,
    knob_effects,
    knob_settings,
    open_store,
    parse_fixes,
    run_study,
    saved_settings,
    shown,
    too_few_text,
    win_text,
)
from .backend_options import backend_option
from .confirm import (
    ConfirmJson,
    LiveOptions,
    LivePlan,
    ServerErrorJson,
    confirm_json,
    live_plan,
    print_live,
    run_confirm,
    server_errors,
    server_options,
)
from .effects import print_effects
from .export import warn_on_stderr
from .options import WorkloadOptions, workload_options
from .output import output_console
from .progress import ProgressOptions, make_progress, progress_mode, progress_option
from .tunespec import objective_option, slo_option, stored_runs_text


class TuneOptions(WorkloadOptions, LiveOptions, ProgressOptions):
    """`pipedeck tune`'s options (--slo and --objective parsed by their callbacks)."""

    model: str
    hardware: str
    devices: int | None
    slo: Slo | None
    objective: Objective | None
    fixes: tuple[str, ...]
    trials: int | None
    timeout: float | None
    repeats: int | None
    study: str | None
    storage: str | None
    heartbeat: int
    sampler: str
    engine_version: str | None


@click.command()
@click.option(
    "--model", default=ServingConfig.model, show_default=True, help="Model profile name, TOML file or HF config.json."
)
@click.option(
    "--hardware", default=ServingConfig.hardware, show_default=True, help="Hardware profile name or TOML file."
)
@click.option(
    "--devices", type=int, default=None, help="Devices to use (default: what the model needs on that hardware)."
)
@workload_options
@click.option(
    "--slo",
    default=None,
    callback=slo_option,
    help="Limits such as ttft=2s,tpot=200ms (percentile p90 unless ttft@p99=3s).",
)
@click.option(
    "--objective",
    type=click.Choice(list(OBJECTIVES)),
    default=None,
    callback=objective_option,
    help="goodput (default with --slo), ttft (mean, for one-at-a-time long prompts) or throughput.",
)
@click.option(
    "--fix",
    "fixes",
    multiple=True,
    metavar="KEY=VALUE",
    help="Pin a dimension with simulate's flag names: mode=vpp, chunk=24k, tp=8, pp=2, layer-split=31,30 ...",
)
@click.option(
    "--trials", type=int, default=None, help="Finished trials the study should have (default 50 unless --timeout)."
)
@click.option("--timeout", type=float, default=None, help="Stop starting new trials after this many seconds.")
@click.option("--jobs", type=int, default=1, show_default=True, help="Trials run in parallel processes.")
@click.option(
    "--repeats",
    type=int,
    default=None,
    help=f"Arrival traces (seeds) the best and the default are measured on, for 95% goodput intervals "
    f"(default {DEFAULT_REPEATS} on the simulator, 1 on a live backend).",
)
@backend_option(help="Backend every trial runs on (live: a server launched per trial, see --launch).")
@server_options
@click.option("--study", default=None, help="Study name; running again resumes it (default: from the settings).")
@click.option(
    "--storage",
    default=None,
    help="Optuna storage: a journal file (default beside --db), sqlite:///FILE, or postgresql://USER@HOST/DB "
    "shared by workers on several hosts.",
)
@click.option(
    "--heartbeat",
    type=int,
    default=HEARTBEAT_S,
    show_default=True,
    help="On a database storage: seconds between a running trial's heartbeats; a trial whose worker "
    f"misses {GRACE_BEATS} is failed and retried by another worker.",
)
@click.option("--sampler", type=click.Choice(SAMPLERS), default="tpe", show_default=True)
@click.option("--db", default=None, help="Run store file (default: pipedeck.duckdb or $PIPEDECK_DB).")
@click.option("--export", "export_dir", default=None, help="Also write the best config's deployable files here.")
@click.option(
    "--format", "export_format", default=None, help="Engine for --export (default: vllm-ascend on Ascend, else vllm)."
)
@click.option(
    "--engine-version",
    default=None,
    help="Engine release for --export (default: the installed one, else its newest known release).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@progress_option
@interrupted_by_signals()
def tune(**opts: Unpack[TuneOptions]) -> None:
    """Search pipeline mode, chunk size, layer split and parallelism for the best SLO goodput."""
    live = live_plan(opts)
    db = opts["db"] or str(default_db_path())
    spec, jobs = _spec_from_options(opts, live, db)
    console = Console(stderr=True)
    with make_progress(progress_mode(opts), console) as bar:
        task = bar.add_task(f"study {spec.study}: starting", total=spec.trials)

        def show(p: Progress) -> None:
            best = (
                "no config meets the SLO yet"
                if p.best_value is None
                else f"best {spec.objective.value_text(p.best_value)} (trial {p.best_trial})"
            )
            bar.update(task, completed=p.finished, description=f"{best}; {p.running} running")

        outcome = run_study(spec, db, jobs=jobs, on_progress=show, on_notice=warn_on_stderr)
    if outcome.interrupted:  # one line, no result: the study is half done
        click.echo(f"interrupted: rerun the same command to resume study {spec.study!r}", err=True)
        raise SystemExit(130)
    confirmed = (
        run_confirm(spec, live, db, outcome.best.number if outcome.best else None, progress_mode(opts))
        if live.confirm
        else None
    )
    exported = _export(spec, opts, db) if opts["export_dir"] and outcome.best else []
    errors = server_errors(spec)
    effects = _effects(spec, outcome, progress_mode(opts))
    if opts["as_json"]:
        printed: TuneJson = {
            **_outcome_json(spec, outcome, exported),
            "effects": effects_json(effects or []),
            "confirm": confirm_json(spec, confirmed),
            "server_errors": errors,
        }
        click.echo(json.dumps(printed, indent=2))
    else:
        out = output_console()
        _print_outcome(spec, outcome, out)
        print_live(spec, live, confirmed, errors)
        if effects is not None:
            print_effects(spec, outcome, effects, out)
        _print_files_and_next(spec, outcome, db, exported, out)


def _spec_from_options(opts: TuneOptions, live: LivePlan, db: str) -> tuple[TuneSpec, int]:
    """Validate every option before any work and build the worker spec (its run store: `db`)."""
    if opts["jobs"] is not None and opts["jobs"] < 1:
        raise click.BadParameter(f"must be a positive integer, got {opts['jobs']}", param_hint="--jobs")
    RunStore.check_writable(db)  # a bad --db fails now, before the study's storage is opened or created
    inputs = TuneInputs(
        scenario=str(opts["scenario"]),
        model=str(opts["model"]),
        hardware=str(opts["hardware"]),
        devices=opts["devices"],
        slo=opts["slo"],
        objective=opts["objective"],
        fixes=tuple(opts["fixes"]),
        trials=opts["trials"],
        timeout=opts["timeout"],
        study=opts["study"],
        storage=opts["storage"],
        sampler=str(opts["sampler"]),
        seed=int(opts["seed"]),
        rate=opts["rate"],
        requests=opts["num_requests"],
        engine=_export_engine(opts, str(opts["hardware"])) or live.engine,
        backend=str(opts["backend"]),
        backend_options=live.trial_options,
        repeats=_repeats(opts),
        heartbeat_s=int(opts["heartbeat"]),
    )
    try:
        spec = build_spec(inputs, db)
    except TuneInputError as err:
        raise click.BadParameter(str(err), param_hint=f"--{err.field}") from None
    live.check(spec)
    return _resumed_search(spec, inputs.fixes), int(opts["jobs"])  # last: it opens the study's storage


def _resumed_search(spec: TuneSpec, fixes: tuple[str, ...]) -> TuneSpec:
    """A study that exists keeps the search it was created with; --export then only picks what its winner is
    written for (refused in one line if that engine cannot run it).

    The engine tuned for (--format, else the hardware's default) chooses the baseline engine, the modes
    searched and, for an engine without delay scheduling, a delay_scheduling=off pin of a new study; those
    would not match a study created for another --format (or by a pipedeck that searched every mode), which
    resumes with its own.
    """
    saved: dict[str, Any] | None = saved_settings(spec)
    if saved is None:
        return spec
    fixed = dict(spec.fixed)
    if "delay_scheduling" not in parse_fixes(list(fixes)):
        fixed.pop("delay_scheduling", None)
        if "delay_scheduling" in (saved.get("fixed") or {}):
            fixed["delay_scheduling"] = saved["fixed"]["delay_scheduling"]
    modes = saved.get("modes")
    return dataclasses.replace(
        spec, engine=saved.get("engine", spec.engine), modes=tuple(modes) if modes else None, fixed=fixed
    )


def _repeats(opts: TuneOptions) -> int:
    """--repeats as given, else 5 seeds on the simulator and 1 on a live server (each is a goodput search)."""
    if opts["repeats"] is not None:
        return int(opts["repeats"])
    return (
        DEFAULT_REPEATS
        if backend_entry(str(opts["backend"])).capabilities.simulated and opts["objective"] in (None, GOODPUT)
        else 1
    )


def _export_engine(opts: TuneOptions, hardware: str) -> str | None:
    """The engine --export writes for (so only modes it can run are searched), or None without --export."""
    if not opts["export_dir"]:
        for option, value in (("--format", opts["export_format"]), ("--engine-version", opts["engine_version"])):
            if value:
                raise click.BadParameter(f"{option} needs --export DIR", param_hint=option)
        return None
    engine = str(opts["export_format"] or default_engine(hardware))
    get_engine(engine).release(opts["engine_version"])  # an unknown engine or release fails before any work
    return engine


def _effects(spec: TuneSpec, outcome: TuneOutcome, mode: str) -> list[KnobEffect] | None:
    """Each knob the winner moved, put back alone (simulated studies only: live, each costs a goodput search)."""
    if (
        outcome.interrupted
        or outcome.best is None
        or outcome.default is None
        or outcome.best.value is None
        or not backend_entry(spec.backend).capabilities.simulated
        or outcome.best.number == outcome.default.number
    ):
        return None
    with make_progress(mode, Console(stderr=True), counted=False) as bar:
        bar.add_task("why the best wins: putting each knob it moved back to the default", total=None)
        return knob_effects(spec, outcome.best.config, outcome.best.value, outcome.default.config)


def _print_outcome(spec: TuneSpec, outcome: TuneOutcome, console: Console) -> None:
    console.print(
        f"[bold]{outcome.study}[/]: {outcome.trials} finished trials; {spec.model} on "
        f"{spec.devices} x {spec.hardware}, {spec.scenario}" + (f", SLO {spec.slo.text()}" if spec.slo else "")
    )
    shown = [(label, t) for label, t in (("best", outcome.best), ("default", outcome.default)) if t is not None]
    if not shown:
        console.print("no finished trial yet")
        return
    table = Table()
    table.add_column("")
    for label, trial in shown:
        name = f"{spec.engine} default" if label == "default" else label  # the baseline is that engine's own
        table.add_column(f"{name} (trial {trial.number})", justify="right")
    for name, cell in [*_ROWS, *_latency_rows(spec)]:
        if name == "attainment" and spec.slo is None:
            continue
        table.add_row(name, *(cell(spec, t) for _, t in shown))
        if name == "objective" and (outcome.best_ci or outcome.default_ci):
            table.add_row(f"mean (95%), {spec.repeats} seeds", *(_interval_cell(spec, outcome, t) for _, t in shown))
    console.print(table)
    for label, trial in shown:
        if trial.metrics.get("capped"):
            console.print(
                f"[yellow]{label}: goodput capped by the workload[/]: the SLO still held with every request "
                "arriving within one TTFT limit; rerun with more --requests"
            )
    if len(outcome.ties) > 1 and outcome.best is not None:  # ties include the best
        console.print(
            f"{len(outcome.ties)} configs tie within the search's {spec.precision:.0%} precision (trials "
            f"{', '.join(str(t.number) for t in outcome.ties)}); trial {outcome.best.number} has the most "
            "latency headroom, then the fewest changes from the default"
        )
        console.print(f"{FREE_KNOBS}: {', '.join(outcome.free) or 'none'}")
    if outcome.ratio is not None:
        console.print(
            f"best / default: [bold]{spec.objective.better_by(outcome.ratio)}[/] on the "
            f"same traffic{_win_text(outcome)}"
        )
    importances = _importances_text(outcome)
    if importances:
        console.print(importances, highlight=False)


def _importances_text(outcome: TuneOutcome) -> str:
    """The parameter importances with the trials they rest on, or why there are none ("" when Optuna has none)."""
    if outcome.importances is not None:
        shares = ", ".join(f"{name} {share:.0%}" for name, share in outcome.importances.items())
        return f"parameter importances over {outcome.completed} completed trials (fANOVA): {escape(shares)}"
    return too_few_text(outcome.completed) if outcome.completed < MIN_TRIALS else ""


def _win_text(outcome: TuneOutcome) -> str:
    """Whether the paired seeds call it a win, as the report says it (nothing without intervals)."""
    text = win_text(outcome.best_ci, outcome.default_ci, outcome.objective)
    return f"; {escape(text)}" if text else ""


Cell = Callable[[TuneSpec, TrialSummary], str]  # a result table cell: a trial's figure as the spec reads it


def _interval_cell(spec: TuneSpec, outcome: TuneOutcome, trial: TrialSummary) -> str:
    ci = outcome.best_ci if outcome.best is not None and trial.number == outcome.best.number else outcome.default_ci
    return "-" if ci is None else f"{ci['mean']:.3g} ({ci['low']:.3g}-{ci['high']:.3g})"


def _metric(key: str, fmt: str) -> Cell:
    """A trial's metric; n/a where it was measured to have none (TPOT of one-token outputs)."""
    return lambda spec, t: (
        "-" if key not in t.metrics else "n/a" if t.metrics[key] is None else format(t.metrics[key], fmt)
    )


_ROWS: list[tuple[str, Cell]] = [
    ("mode", lambda spec, t: str(t.config["mode"])),
    ("tp x pp", lambda spec, t: f"{t.config['tp']} x {t.config['pp']}"),
    ("chunk", lambda spec, t: format_tokens(int(t.config["chunk"]))),
    ("max running", lambda spec, t: str(t.config["max_running"])),
    ("layer split", lambda spec, t: ",".join(map(str, t.config["layer_split"]))),
    ("knobs", lambda spec, t: ", ".join(knob_settings(t.config)) or "-"),
    ("objective", lambda spec, t: "-" if t.value is None else spec.objective.value_text(t.value)),
    ("attainment", _metric("attainment", ".1%")),
]


def _latency_rows(spec: TuneSpec) -> list[tuple[str, Cell]]:
    """TTFT and TPOT rows at the percentile the SLO limits (P90 where it names none)."""
    limits = {limit.metric: limit for limit in spec.slo.limits} if spec.slo else {}
    rows: list[tuple[str, Cell]] = []
    for metric in METRICS:
        limit = limits.get(metric, Limit(metric, 0.0))
        rows.append((f"{metric.upper()} P{limit.percentile:g} (s)", _metric(limit.key, ".3f")))
    return rows


class TrialJson(TypedDict):
    """A trial as `tune --json` prints it: the best, the default and each tie."""

    trial: int
    config: dict[str, Any]  # as ServingConfig.to_dict() gives it
    value: float | None
    goodput_rps: float | None
    attainment: float | None
    goodput_ci: Interval | None
    metrics: dict[str, Any]


class OutcomeJson(TypedDict):
    """What `tune --json` says of the study's outcome."""

    study: str
    trials: int
    objective: str
    slo: str | None
    scenario: str
    devices: int
    storage: str
    baseline_engine: str
    precision: float
    best: TrialJson | None
    default: TrialJson | None
    ties: list[TrialJson]
    free_in_ties: list[str]
    clear_win: bool | None
    ratio: float | None
    completed: int
    importances: dict[str, float] | None
    best_run_id: int | None
    default_run_id: int | None
    interrupted: bool
    exported: list[str]


class TuneJson(OutcomeJson):
    """The JSON object `tune --json` prints: the outcome, then what the winner's knobs did and the live parts."""

    effects: list[dict[str, object]]
    confirm: list[ConfirmJson] | None  # None without --confirm
    server_errors: list[ServerErrorJson]


def _trial_json(trial: TrialSummary, ci: Interval | None = None) -> TrialJson:
    return {
        "trial": trial.number,
        "config": trial.config,
        "value": trial.value,
        "goodput_rps": trial.metrics.get("goodput_rps"),
        "attainment": trial.metrics.get("attainment"),
        "goodput_ci": ci,
        "metrics": trial.metrics,
    }


def _outcome_json(spec: TuneSpec, outcome: TuneOutcome, exported: list[Path]) -> OutcomeJson:
    return {
        "study": outcome.study,
        "trials": outcome.trials,
        "objective": spec.objective.name,
        "slo": spec.slo.text() if spec.slo else None,
        "scenario": spec.scenario,
        "devices": spec.devices,
        "storage": shown(spec.storage),
        "baseline_engine": spec.engine,
        "precision": spec.precision,
        "best": None if outcome.best is None else _trial_json(outcome.best, outcome.best_ci),
        "default": None if outcome.default is None else _trial_json(outcome.default, outcome.default_ci),
        "ties": [_trial_json(t) for t in outcome.ties],
        "free_in_ties": list(outcome.free),
        "clear_win": outcome.clear_win,
        "ratio": outcome.ratio,
        "completed": outcome.completed,
        "importances": outcome.importances,
        "best_run_id": outcome.best_run_id,
        "default_run_id": outcome.default_run_id,
        "interrupted": outcome.interrupted,
        "exported": [str(p) for p in exported],
    }


def _export(spec: TuneSpec, opts: TuneOptions, db: str) -> list[Path]:
    with open_store(db) as store:
        return export_best(
            store,
            spec.study,
            str(_export_engine(opts, spec.hardware)),
            str(opts["export_dir"]),
            opts["engine_version"],
            warn_on_stderr,
        )


def _print_files_and_next(
    spec: TuneSpec, outcome: TuneOutcome, db: str, exported: list[Path], console: Console
) -> None:
    """Where the study, its runs and any exported files went, and the commands that use them."""
    best, default = outcome.best_run_id, outcome.default_run_id
    runs = stored_runs_text(best, default)
    console.print(f"run store: {db}" + (f" ({runs})" if runs else ""))
    console.print(f"study: {shown(spec.storage)}")
    for path in exported:
        console.print(f"exported {path}")
    if outcome.best is None:
        return
    study = shlex.quote(spec.study)
    db_flag = "" if db == str(default_db_path()) else f" --db {shlex.quote(db)}"
    steps = []
    if not exported:
        steps.append(f"pipedeck export --study {study} --format {spec.engine} --out deploy{db_flag}")
    if best is not None and default is not None and best != default:  # nothing to compare when the default won
        steps.append(f"pipedeck compare {best} {default} --out compare.html{db_flag}")
    steps.append(f"pipedeck report --study {study} --out study.html{db_flag}")
    console.print("next:")
    for step in steps:
        console.print(f"  {step}", highlight=False, markup=False, soft_wrap=True)
