"""`pipedeck tune`'s live server options: `--confirm live` after a simulated study, and `--backend live` trials.

`--confirm live` measures the simulated study's top configs and its
engine-default baseline on a live server (one pipedeck launches per config
with `--launch ENGINE --model-path W`, or one the operator runs at
`--endpoint URL`) and prints simulated against measured side by side;
`--backend live --launch ENGINE` runs every trial on a server launched for
it. Every option is checked before any work, and a bad one is one line
naming its flag.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import click
import optuna
from rich.console import Console
from rich.table import Table

from ..backends import (
    ENGINES,
    ConfigError,
    ExportError,
    ServingConfig,
    backend_entry,
    check_launch,
    format_tokens,
    plan_launch,
)
from ..store import default_db_path
from ..tuner import (
    DEFAULT_TOP,
    ConfirmRow,
    TuneSpec,
    confirm_study,
    default_params,
    knob_settings,
    open_storage,
    ranks,
    space_context,
    suggest_config,
)
from .backend_options import LaunchOptions, launch_options
from .db import DbOptions
from .output import output_console
from .progress import make_progress

_FLAGS = {"launch": "--launch", "model_path": "--model-path", "program": "--program"}


class ServerOptions(LaunchOptions):
    """The values `server_options` adds to `tune`'s options."""

    confirm: str | None
    confirm_top: int | None
    endpoint: str | None
    launch: str | None
    model_path: str | None


class LiveOptions(ServerOptions, DbOptions):
    """What `live_plan` reads: the server options and the tune options they are checked against."""

    backend: str
    jobs: int
    export_dir: str | None
    export_format: str | None


def server_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--confirm --confirm-top --endpoint --launch --model-path --program --health-timeout."""
    for option in reversed(
        (
            click.option(
                "--confirm",
                type=click.Choice(["live"]),
                default=None,
                help="After the simulated study, measure its top configs and the default on a live server.",
            ),
            click.option(
                "--confirm-top",
                type=int,
                default=None,
                help=f"Distinct configs --confirm measures, best simulated first (default {DEFAULT_TOP}).",
            ),
            click.option(
                "--endpoint",
                default=None,
                help="--confirm: a server you started (pipedeck serve --from pipedeck-best.json), measured once.",
            ),
            click.option(
                "--launch",
                type=click.Choice(list(ENGINES)),
                default=None,
                help="Start this engine for each config measured live (--confirm live or --backend live).",
            ),
            click.option(
                "--model-path", default=None, help="With --launch: the weights it loads (llama-server: a GGUF)."
            ),
            launch_options(when="With --launch: ", log=False),  # each server logs beside the run store
        )
    ):
        fn = option(fn)
    return fn


class ServerErrorJson(TypedDict):
    """A trial whose server failed, as `tune --json`'s server_errors lists it."""

    trial: int
    error: str


class ConfirmJson(TypedDict):
    """One config measured live, as `tune --json`'s confirm list has it."""

    trial: int
    role: str
    config: dict[str, object]
    simulated: float | None
    measured: float | None
    ratio: float | None
    rank_simulated: int | None
    rank_measured: int | None
    run_id: int | None
    error: str | None
    metrics: dict[str, object]


@dataclass(frozen=True)
class LivePlan:
    """What the live options ask for, checked."""

    confirm: bool = False
    top: int = DEFAULT_TOP
    options: dict[str, object] = field(default_factory=dict)  # make_backend("live", **options)
    engine: str | None = None  # the engine launched, whose modes alone are searched

    @property
    def trial_options(self) -> dict[str, object]:
        """The backend options of the study's trials (a live tune's), or none."""
        return {} if self.confirm else self.options

    def where(self) -> str:
        """Where the live measurements run, in words."""
        if self.engine is None:
            return f"the server at {self.options['endpoint']}"
        return f"{self.engine} launched per config (logs in {self.options['log_dir']})"

    def check(self, spec: TuneSpec) -> None:
        """Refuse, before any work, pins that leave the default config unlaunchable on the engine."""
        if self.engine is None:
            return
        ctx = space_context(spec)
        draft = suggest_config(optuna.trial.FixedTrial(default_params(ctx, spec.fixed)), ctx, spec.fixed)
        try:
            plan_launch(ServingConfig.of(**draft).resolve(), self.engine)
        except ExportError as err:
            raise click.BadParameter(f"{err}; pin what {self.engine} runs", param_hint="--fix") from None


def live_plan(opts: LiveOptions) -> LivePlan:
    """Check the live options against --backend, --jobs and --export; a one-line error naming the flag otherwise.

    With --launch and --export but no --format, the export is written for the launched engine.
    """
    backend, confirm = opts["backend"], opts["confirm"] is not None
    endpoint, launch = opts["endpoint"], opts["launch"]
    launch_only = (("--model-path", opts["model_path"]), ("--program", opts["program"]))  # flags only --launch takes
    if backend_entry(backend).capabilities.endpoint:  # every trial on a server
        if confirm:
            raise click.BadParameter(
                "confirms a simulated study; with --backend live every trial is measured live", param_hint="--confirm"
            )
        if endpoint:
            raise click.BadParameter(
                "a running server cannot apply each trial's config; give --launch ENGINE "
                "--model-path W (or --confirm live --endpoint URL to measure it beside the "
                "simulated best)",
                param_hint="--endpoint",
            )
        if not launch:
            raise click.BadParameter(
                "a live tune starts a server per trial: give --launch ENGINE --model-path W", param_hint="--launch"
            )
        if opts["jobs"] > 1:
            raise click.BadParameter("a live tune runs one server at a time: use --jobs 1", param_hint="--jobs")
    elif confirm:
        if endpoint and launch:
            raise click.BadParameter(
                "give either --endpoint (a server you started) or --launch (one pipedeck starts per config), not both",
                param_hint="--endpoint",
            )
        if not (endpoint or launch):
            raise click.BadParameter(
                "give --launch ENGINE --model-path W (pipedeck starts a server per config) "
                "or --endpoint URL (a server you started)",
                param_hint="--confirm",
            )
    else:
        given = next(
            (flag for flag, value in (("--endpoint", endpoint), ("--launch", launch), *launch_only) if value), None
        )
        if given:
            raise click.BadParameter("only with --confirm live or --backend live", param_hint=given)
    top = opts["confirm_top"]
    if top is not None and (not confirm or top < 1):
        raise click.BadParameter(
            "only with --confirm live" if not confirm else f"must be a positive integer, got {top}",
            param_hint="--confirm-top",
        )
    if not launch:
        given = next((flag for flag, value in launch_only if value), None)
        if given:
            raise click.BadParameter("only with --launch ENGINE", param_hint=given)
        return LivePlan(confirm, top or DEFAULT_TOP, {"endpoint": endpoint} if endpoint else {})
    try:
        check_launch(launch, opts["model_path"], opts["program"])
    except ConfigError as err:
        name, _, message = str(err).partition(": ")
        raise click.BadParameter(message, param_hint=_FLAGS[name]) from None
    if opts["export_dir"]:
        if opts["export_format"] and opts["export_format"] != launch:
            raise click.BadParameter(
                f"--export writes for {opts['export_format']} but --launch starts {launch}; give the same engine",
                param_hint="--format",
            )
        opts["export_format"] = launch
    model = Path(str(opts["model_path"]))
    options = {
        "launch": launch,
        "model_path": str(model.resolve()) if model.exists() else str(opts["model_path"]),
        "health_timeout_s": opts["health_timeout"],
        "log_dir": str(server_log_dir(opts["db"])),
    }
    if opts["program"]:
        options["program"] = str(opts["program"])
    return LivePlan(confirm, top or DEFAULT_TOP, options, launch)


def server_log_dir(db: str | None) -> Path:
    """The folder of launched servers' logs, beside the run store: pipedeck.duckdb -> pipedeck-servers/."""
    path = default_db_path(db)
    return path.with_name(f"{path.stem}-servers")


def run_confirm(
    spec: TuneSpec, plan: LivePlan, db: str | Path, best: int | None, progress_mode: str
) -> list[ConfirmRow]:
    """Measure the study's candidates live (the recommended trial `best` first), with progress on stderr."""
    with make_progress(progress_mode, Console(stderr=True), counted=False) as bar:
        task = bar.add_task("confirming", total=None)

        def show(index: int, total: int, role: str, trial: optuna.trial.FrozenTrial) -> None:
            bar.update(
                task,
                description=f"confirming {index + 1}/{total}: trial {trial.number} ({role}) "
                f"on {plan.engine or plan.options['endpoint']}",
            )

        return confirm_study(spec, db, plan.options, plan.top, best, on_row=show)


def server_errors(spec: TuneSpec) -> list[ServerErrorJson]:
    """The study's trials whose server failed (a live tune's), each with its one line."""
    if not backend_entry(spec.backend).capabilities.endpoint:  # no server to fail
        return []
    study = optuna.load_study(study_name=spec.study, storage=open_storage(spec.storage))
    return [
        {"trial": t.number, "error": t.user_attrs["error"]}
        for t in study.get_trials(deepcopy=False)
        if "error" in t.user_attrs
    ]


def print_live(spec: TuneSpec, plan: LivePlan, rows: list[ConfirmRow] | None, errors: list[ServerErrorJson]) -> None:
    """What the live options added to the tune's summary: trials whose server failed, the confirm table."""
    console = output_console()
    for failed in errors:
        console.print(f"[red]trial {failed['trial']} failed[/] (its server): {failed['error']}", soft_wrap=True)
    if rows is not None:
        print_confirm(spec, plan, rows, console)


def print_confirm(spec: TuneSpec, plan: LivePlan, rows: list[ConfirmRow], console: Console) -> None:
    """The 'simulated vs measured' table, then each failed row's one line."""
    console.print(f"[bold]simulated vs measured[/] {spec.objective.title} on {plan.where()}")
    if not rows:
        console.print("no completed trial to confirm")
        return
    by_sim = ranks(rows, spec.objective, lambda r: r.simulated)
    by_live = ranks(rows, spec.objective, lambda r: r.measured)
    shared = set.intersection(*(set(knob_settings(r.config)) for r in rows))  # shown once, above the table
    if shared:
        console.print(f"every row: {', '.join(s for s in knob_settings(rows[0].config) if s in shared)}")
    table = Table()
    for name in ("trial", "config", "simulated", "measured", "measured/sim", "rank sim", "rank live"):
        table.add_column(name, justify="left" if name in ("trial", "config") else "right")
    for row, sim_rank, live_rank in zip(rows, by_sim, by_live):
        table.add_row(
            f"{row.trial} {row.role}",
            describe(row.config, shared),
            _value(spec, row.simulated),
            "failed" if row.error else _value(spec, row.measured) + (" capped" if _capped(row) else ""),
            "-" if row.ratio is None else f"{row.ratio:.2f}x",
            _rank(sim_rank),
            _rank(live_rank),
        )
    console.print(table)
    for row in rows:
        if row.error:
            console.print(f"[red]trial {row.trial} failed[/]: {row.error}", soft_wrap=True)
    if any(_capped(r) for r in rows):
        console.print(
            "[yellow]capped[/]: the SLO still held with every request arriving within one TTFT limit; "
            "rerun with more --requests"
        )
    stored = [r.run_id for r in rows if r.run_id is not None]
    if stored:
        console.print(f"stored live runs: {', '.join(map(str, stored))} (label confirm)")


def confirm_json(spec: TuneSpec, rows: list[ConfirmRow] | None) -> list[ConfirmJson] | None:
    """`tune --json`'s `confirm` list (None without --confirm)."""
    if rows is None:
        return None
    by_sim = ranks(rows, spec.objective, lambda r: r.simulated)
    by_live = ranks(rows, spec.objective, lambda r: r.measured)
    return [
        {
            "trial": r.trial,
            "role": r.role,
            "config": r.config,
            "simulated": r.simulated,
            "measured": r.measured,
            "ratio": r.ratio,
            "rank_simulated": s,
            "rank_measured": m,
            "run_id": r.run_id,
            "error": r.error,
            "metrics": r.metrics,
        }
        for r, s, m in zip(rows, by_sim, by_live)
    ]


def describe(config: dict[str, Any], leave_out: AbstractSet[str] = frozenset()) -> str:
    """A config in a few words: mode, tp x pp, chunk, max running, and its active knobs but those in `leave_out`.

    `config` is ServingConfig.to_dict()'s, read back from the study's JSON (as TrialSummary.config is).
    """
    return " ".join(
        [
            str(config["mode"]),
            f"{config['tp']}x{config['pp']}",
            f"chunk {format_tokens(int(config['chunk']))}",
            f"max-running {config['max_running']}",
            *(s for s in knob_settings(config) if s not in leave_out),
        ]
    )


def _value(spec: TuneSpec, value: float | None) -> str:
    return "-" if value is None else spec.objective.value_text(value)


def _capped(row: ConfirmRow) -> bool:
    return bool(row.metrics.get("capped"))


def _rank(rank: int | None) -> str:
    return "-" if rank is None else str(rank)
