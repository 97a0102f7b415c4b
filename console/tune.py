"""`pipedeck tune`: search configs for SLO goodput with Optuna and report the best against the default."""

from __future__ import annotations

import json
import re
import time

import click
import optuna
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..backends.config import ServingConfig
from ..backends.errors import ConfigError
from ..backends.memory import kv_capacity_tokens, weight_bytes_per_device
from ..backends.tokens import format_tokens
from ..store import RunStore, default_db_path
from ..backends.policies.modes import MODES
from ..tuner.engines import get_engine
from ..tuner.objective import OBJECTIVES, TuneSpec
from ..tuner.slo import parse_slo
from ..tuner.space import SpaceContext, default_params, parse_fixes, suggest_config
from ..tuner.study import SAMPLERS, TuneOutcome, default_storage, make_sampler, open_store, run_study
from .export import export_best
from .options import scenario_from_options, workload_options


def default_devices(model: str, hardware: str) -> int:
    """The fewest devices (a power of two) that hold the weights with a tenth of memory left for KV cache."""
    profile = ServingConfig(model=model, hardware=hardware)
    m, hw = profile.model_profile, profile.hardware_profile
    devices = 1
    while devices <= 1024:
        per_device = weight_bytes_per_device(m, devices, m.num_layers) / 1e9
        if per_device <= hw.memory_gb * hw.memory_utilization - hw.activation_reserve_gb - 0.1 * hw.memory_gb:
            return devices
        devices *= 2
    raise ConfigError(f"devices: {model} does not fit on up to 1024 {hardware} devices")


@click.command()
@click.option("--model", default=ServingConfig.model, show_default=True, help="Model profile name, TOML file or HF config.json.")
@click.option("--hardware", default=ServingConfig.hardware, show_default=True, help="Hardware profile name or TOML file.")
@click.option("--devices", type=int, default=None, help="Devices to use (default: what the model needs on that hardware).")
@workload_options("azure-conv")
@click.option("--slo", default=None, help="Limits such as ttft=2s,tpot=200ms (percentile p90 unless ttft@p99=3s).")
@click.option("--objective", type=click.Choice(list(OBJECTIVES)), default=None,
              help="goodput (default with --slo), ttft (mean, for one-at-a-time long prompts) or throughput.")
@click.option("--fix", "fixes", multiple=True, metavar="KEY=VALUE",
              help="Pin a dimension with simulate's flag names: mode=vpp, chunk=24k, tp=8, pp=2, layer-split=31,30 ...")
@click.option("--trials", type=int, default=None, help="Finished trials the study should have (default 50 unless --timeout).")
@click.option("--timeout", type=float, default=None, help="Stop starting new trials after this many seconds.")
@click.option("--jobs", type=int, default=1, show_default=True, help="Trials run in parallel processes.")
@click.option("--study", default=None, help="Study name; running again resumes it (default: from the settings).")
@click.option("--storage", default=None, help="Optuna storage: a journal file (default beside --db) or an RDB URL.")
@click.option("--sampler", type=click.Choice(SAMPLERS), default="tpe", show_default=True)
@click.option("--db", default=None, help="Run store file (default: pipedeck.duckdb or $PIPEDECK_DB).")
@click.option("--export", "export_dir", default=None, help="Also write the best config's deployable files here.")
@click.option("--format", "export_format", default=None, help="Engine for --export (default: vllm-ascend on Ascend, else vllm).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
def tune(**opts: object) -> None:
    """Search pipeline mode, chunk size, layer split and parallelism for the best SLO goodput."""
    spec, jobs = _spec_from_options(opts)
    console = Console(stderr=True)
    RunStore.open(opts["db"]).close()  # a bad --db fails now, before any work
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=True, disable=bool(opts["as_json"])) as bar:
        task = bar.add_task("starting", total=spec.trials)

        def show(p) -> None:
            best = "no config meets the SLO yet" if p.best_value is None else \
                f"best {_value_text(spec.objective, p.best_value)} (trial {p.best_trial})"
            bar.update(task, completed=p.finished, description=f"{spec.study}: {best}")

        outcome = run_study(spec, opts["db"], jobs=jobs, on_progress=show)
    exported = _export(spec, outcome, opts) if opts["export_dir"] and outcome.best else []
    if opts["as_json"]:
        click.echo(json.dumps(_outcome_json(spec, outcome, exported), indent=2))
    else:
        _print_outcome(spec, outcome, exported)
    if outcome.interrupted:
        click.echo(f"interrupted: rerun the same command to resume study {spec.study!r}", err=True)
        raise SystemExit(130)


def _spec_from_options(opts: dict[str, object]) -> tuple[TuneSpec, int]:
    """Validate every option before any work and build the worker spec."""
    scenario = scenario_from_options(opts)
    objective = opts["objective"] or ("goodput" if opts["slo"] else None)
    if objective is None:
        raise click.BadParameter("give --slo (for goodput) or --objective ttft|throughput", param_hint="--slo")
    slo = parse_slo(opts["slo"]) if opts["slo"] else None
    if objective == "goodput":
        if slo is None:
            raise click.BadParameter("the goodput objective needs an SLO such as ttft=2s,tpot=200ms", param_hint="--slo")
        if not scenario.requires_rate:
            raise click.BadParameter(f"goodput searches Poisson rates; scenario {scenario.name} has no rate "
                                     "(use azure-conv, sharegpt, cnn, cnn-reversed or --objective ttft)",
                                     param_hint="--scenario")
    for name in ("trials", "jobs"):
        if opts[name] is not None and opts[name] < 1:
            raise click.BadParameter(f"must be a positive integer, got {opts[name]}", param_hint=f"--{name}")
    if opts["timeout"] is not None and not opts["timeout"] > 0:
        raise click.BadParameter(f"must be a positive number of seconds, got {opts['timeout']}", param_hint="--timeout")
    fixed = parse_fixes(list(opts["fixes"]))
    model, hardware = str(opts["model"]), str(opts["hardware"])
    devices = opts["devices"] or _devices_from_fixes(fixed) or default_devices(model, hardware)
    if devices < 1:
        raise click.BadParameter(f"must be a positive integer, got {devices}", param_hint="--devices")
    if "tp" in fixed and "pp" in fixed and int(fixed["tp"]) * int(fixed["pp"]) != devices:
        raise ConfigError(f"fix: tp x pp = {int(fixed['tp']) * int(fixed['pp'])} but --devices is {devices}")
    engine = _export_engine(opts, hardware)
    modes = tuple(m for m in MODES if m in get_engine(engine).modes) if engine else None
    ctx = SpaceContext(model, hardware, devices, modes=modes)
    default = suggest_config(optuna.trial.FixedTrial(default_params(ctx, fixed)), ctx, fixed)
    ServingConfig(**default).resolve()  # the pins must leave at least the engine default runnable
    db = opts["db"] or str(default_db_path())
    opts["db"] = db
    trials = opts["trials"] if opts["trials"] is not None else (None if opts["timeout"] else 50)
    name = opts["study"] or _default_study_name(scenario.name, model, hardware, devices, objective, slo.text() if slo else "")
    make_sampler(str(opts["sampler"]), 0)
    spec = TuneSpec(study=name, storage=opts["storage"] or default_storage(db), scenario=str(opts["scenario"]),
                    model=model, hardware=hardware, devices=devices, objective=objective,
                    slo=slo.text() if slo else None, seed=int(opts["seed"]), requests=opts["num_requests"],
                    fixed=fixed, sampler=str(opts["sampler"]), trials=trials,
                    deadline=None if opts["timeout"] is None else time.time() + float(opts["timeout"]), modes=modes)
    return spec, int(opts["jobs"])


def _export_engine(opts: dict[str, object], hardware: str) -> str | None:
    """The engine --export writes for (so only modes it can run are searched), or None without --export."""
    if not opts["export_dir"]:
        if opts["export_format"]:
            raise click.BadParameter("--format needs --export DIR", param_hint="--format")
        return None
    engine = str(opts["export_format"] or ("vllm-ascend" if hardware.startswith("ascend") else "vllm"))
    get_engine(engine)
    return engine


def _devices_from_fixes(fixed: dict[str, object]) -> int | None:
    return int(fixed["tp"]) * int(fixed["pp"]) if "tp" in fixed and "pp" in fixed else None


def _default_study_name(*parts: object) -> str:
    return re.sub(r"[^A-Za-z0-9.@=,-]+", "-", "-".join(str(p) for p in parts if p != ""))


def _value_text(objective: str, value: float) -> str:
    return {"goodput": f"{value:.3g} req/s", "ttft": f"{value:.4g} s mean TTFT",
            "throughput": f"{value:.4g} tok/s"}[objective]


def _print_outcome(spec: TuneSpec, outcome: TuneOutcome, exported: list) -> None:
    console = Console()
    console.print(f"[bold]{outcome.study}[/]: {outcome.trials} finished trials; {spec.model} on "
                  f"{spec.devices} x {spec.hardware}, {spec.scenario}" + (f", SLO {spec.slo}" if spec.slo else ""))
    shown = [(label, t) for label, t in (("best", outcome.best), ("default", outcome.default)) if t is not None]
    if not shown:
        console.print("no finished trial yet")
        return
    table = Table()
    table.add_column("")
    for label, trial in shown:
        table.add_column(f"{label} (trial {trial.number})", justify="right")
    for name, cell in _ROWS:
        if name == "attainment" and spec.slo is None:
            continue
        table.add_row(name, *(cell(spec, t) for _, t in shown))
    console.print(table)
    if outcome.ratio is not None:
        console.print(f"best / default: [bold]{outcome.ratio:.2f}x[/] {_objective_column(spec.objective)} on the same traffic")
    if outcome.best_run_id is not None:
        console.print(f"stored runs: best {outcome.best_run_id}, default {outcome.default_run_id} "
                      f"(pipedeck compare {outcome.best_run_id} {outcome.default_run_id} --out compare.html)")
    for path in exported:
        console.print(f"exported {path}")


def _metric(key: str, fmt: str):
    return lambda spec, t: format(t.metrics[key], fmt) if key in t.metrics else "-"


_ROWS = [
    ("mode", lambda spec, t: str(t.config["mode"])),
    ("tp x pp", lambda spec, t: f"{t.config['tp']} x {t.config['pp']}"),
    ("chunk", lambda spec, t: format_tokens(int(t.config["chunk"]))),
    ("layer split", lambda spec, t: ",".join(map(str, t.config["layer_split"]))),
    ("dcpp smooth / min chunk", lambda spec, t: f"{t.config['smooth_factor']:.2f} / {t.config['min_chunk']}"
     if t.config["mode"] == "dcpp" else "-"),
    ("objective", lambda spec, t: _value_text(spec.objective, t.value)),
    ("attainment", _metric("attainment", ".1%")),
    ("TTFT P90 (s)", _metric("ttft_p90_s", ".3f")),
    ("TPOT P90 (s)", _metric("tpot_p90_s", ".3f")),
]


def _objective_column(objective: str) -> str:
    return {"goodput": "goodput", "ttft": "mean TTFT", "throughput": "throughput"}[objective]


def _trial_json(trial) -> dict[str, object] | None:
    if trial is None:
        return None
    return {"trial": trial.number, "config": trial.config, "value": trial.value,
            "goodput_rps": trial.metrics.get("goodput_rps"), "attainment": trial.metrics.get("attainment"),
            "metrics": trial.metrics}


def _outcome_json(spec: TuneSpec, outcome: TuneOutcome, exported: list) -> dict[str, object]:
    return {"study": outcome.study, "trials": outcome.trials, "objective": spec.objective, "slo": spec.slo,
            "scenario": spec.scenario, "devices": spec.devices, "storage": spec.storage,
            "best": _trial_json(outcome.best), "default": _trial_json(outcome.default), "ratio": outcome.ratio,
            "best_run_id": outcome.best_run_id, "default_run_id": outcome.default_run_id,
            "interrupted": outcome.interrupted, "exported": [str(p) for p in exported]}


def _export(spec: TuneSpec, outcome: TuneOutcome, opts: dict[str, object]) -> list:
    with open_store(opts["db"]) as store:
        return export_best(store, spec.study, str(_export_engine(opts, spec.hardware)), str(opts["export_dir"]))
