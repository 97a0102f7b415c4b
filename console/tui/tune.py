"""The Tune view: run, pause, resume and stop an Optuna study, watch its trials, export the best config."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from pathlib import Path

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.widget import Widget
from textual.widgets import Button, DataTable, Input, Label, Select, Static
from textual.worker import get_current_worker

from ...backends import ENGINES, ServingConfig, hardware_names, model_names, setting_text
from ...scenarios import catalog
from ...store import TrialRow
from ...tuner import (
    DEFAULT_TRIALS,
    GOODPUT,
    OBJECTIVES,
    Objective,
    Progress,
    SLOError,
    TuneInputError,
    TuneInputs,
    TuneSpec,
    build_spec,
    default_engine,
    export_best,
    knob_settings,
    objective_named,
    open_store,
    parse_slo,
    run_study,
)
from ..options import DEFAULT_SCENARIO
from ..plots.config_text import split_text, tokens_text
from ..tunespec import stored_runs_text
from .fields import error_field, form_fields
from .messages import Exported, TrialsUpdated, TuneEnded, TuneFailed, WorkFailed
from .view import DEFAULT_SLO, Session, View, choose, cursor_key, one_line, shown_path, typed_number
from .widgets import TrialChart

SHOWN_PARAMS = ("tp", "pp", "mode", "chunk", "layer-split")  # trial parameters (--fix names) the view names itself
STATES = {"COMPLETE": "done", "PRUNED": "pruned", "FAIL": "failed", "RUNNING": "running", "WAITING": "queued"}
ALIASES = {"num_requests": "requests"}
# Columns whose headers fit whole at 80 columns; a trial's layer split and other knobs go under the table.
TRIAL_COLUMNS = ("#", "state", "{unit}", "tp×pp", "chunk", "mode")
NO_DETAIL = "a trial's layer split and other knobs show here"


def trial_settings(trial: TrialRow) -> dict[str, object]:
    """What a trial ran, by config field: its config, or the parameters of one whose config could not run."""
    return {**{k.replace("-", "_"): v for k, v in trial.params.items()}, **(trial.config or {})}


def trial_cells(trial: TrialRow, objective: Objective) -> tuple[str, ...]:
    """A trial as table cells, figures first: number, state, objective (its unit in the header), tp x pp, chunk,
    mode."""
    value = (
        "-"
        if trial.objective is None or trial.state != "COMPLETE"
        else objective.value_text(trial.objective).partition(" ")[0]
    )
    known = trial_settings(trial)
    return (
        str(trial.number),
        STATES.get(trial.state, trial.state.lower()),
        value,
        f"{known['tp']}×{known['pp']}" if "tp" in known and "pp" in known else "-",
        tokens_text(known["chunk"]) if "chunk" in known else "-",
        str(known.get("mode", "-")),
    )


def trial_detail(trial: TrialRow) -> str:
    """What the trials table has no room for: the trial's layer split and its other parameters by their --fix
    names (spaces between them, so that the line wraps between knobs)."""
    split = trial_settings(trial).get("layer_split")
    other = [f"{k}={setting_text(v)}" for k, v in trial.params.items() if k not in SHOWN_PARAMS]
    split_text = ",".join(map(str, split)) if isinstance(split, list) else str(split or "-")
    return " ".join([f"trial {trial.number}: split {split_text}", *other])


def engine_for(mode: str, preferred: str) -> str:
    """The preferred engine if it runs `mode`, else the first that does (else the preferred, which will say why)."""
    if mode in ENGINES[preferred].modes:
        return preferred
    return next((name for name, engine in ENGINES.items() if mode in engine.modes), preferred)


def best_text(trial: TrialRow | None, objective: Objective, ratio: float | None) -> Text:
    """The best trial so far, how it compares with the default (when known), its config and latencies, then its
    other knobs: the most telling first, since a short panel shows the rest by scrolling."""
    if trial is None or trial.objective is None:
        return Text("no completed trial yet", style="dim")
    config, metrics = trial.config or {}, trial.metrics or {}
    text = Text.assemble((f"trial {trial.number}: ", "bold"), (objective.value_text(trial.objective), "bold green"))
    if ratio is not None:
        text.append(f"\n{objective.better_by(ratio)} than the default config", style="bold")
    split = split_text(config.get("layer_split") or [])
    text.append(
        f"\n{config.get('mode')} {config.get('tp')}×{config.get('pp')} chunk "
        f"{tokens_text(config.get('chunk', 0))}\nsplit {split}"
    )
    for key, label, fmt in (
        ("attainment", "attainment", "{:.1%}"),
        ("ttft_p90_s", "TTFT P90", "{:.3g} s"),
        ("tpot_p90_s", "TPOT P90", "{:.3g} s"),
    ):
        if key in metrics:
            text.append(f"\n{label} {'n/a' if metrics[key] is None else fmt.format(metrics[key])}")
    knobs = knob_settings(config) if config else []
    if knobs:
        text.append("\n" + " ".join(knobs), style="dim")  # spaces, not commas: it wraps between knobs
    return text


class TuneScreen(View):
    """Study settings, start / pause / resume / stop, the trials table, the best so far, a chart, and export."""

    MODE = "tune"
    BINDINGS = [
        Binding("s", "start", "Start/Resume"),
        Binding("p", "pause", "Pause"),
        Binding("x", "stop", "Stop"),
        Binding("e", "export", "Export"),
    ]
    INPUTS = ("scenario", "objective", "slo", "requests", "model", "hardware", "devices", "trials", "fix", "study")

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.spec: TuneSpec | None = None  # the study last started (Export writes its best); None before any
        self.phase = "idle"  # idle, running, paused, finalising
        self.finalise = False  # set by Stop: after the interruption, store the best and default runs
        self.trials: dict[int, TrialRow] = {}
        self.finished = 0
        self.best: int | None = None

    def body(self) -> ComposeResult:
        defaults = ServingConfig()
        with Grid(id="tune-controls", classes="controls"):
            yield Label("scenario")
            yield Select(
                [(name, name) for name in catalog()],
                value=DEFAULT_SCENARIO,
                allow_blank=False,
                compact=True,
                id="scenario",
            )
            yield Label("objective")
            yield Select(
                [(name, name) for name in OBJECTIVES],
                value=GOODPUT.name,
                allow_blank=False,
                compact=True,
                id="objective",
            )
            yield Label("SLO")
            yield Input(DEFAULT_SLO, compact=True, id="slo")
            yield Label("requests")
            yield Input(placeholder="scenario's", compact=True, id="requests")
            yield Label("model")
            yield Select(
                [(n, n) for n in model_names()], value=defaults.model, allow_blank=False, compact=True, id="model"
            )
            yield Label("hardware")
            yield Select(
                [(n, n) for n in hardware_names()],
                value=defaults.hardware,
                allow_blank=False,
                compact=True,
                id="hardware",
            )
            yield Label("devices")
            yield Input(placeholder="what the model needs", compact=True, id="devices")
            yield Label("trials")
            yield Input(str(DEFAULT_TRIALS), compact=True, id="trials")
            yield Label("fix")
            yield Input(placeholder="mode=vpp chunk=24k tp=8 ...", compact=True, id="fix")
            yield Label("study")
            yield Input(placeholder="named from the settings", compact=True, id="study")
        with Horizontal(classes="actions"):
            yield Button("Start", id="start", variant="success", compact=True)
            yield Button("Pause", id="pause", variant="warning", compact=True, disabled=True)
            yield Button("Stop", id="stop", variant="error", compact=True, disabled=True)
            yield Static("set the SLO and scenario, then Start (s)", id="tune-status")
        with Horizontal(id="tune-main"):
            with Vertical(id="tune-trials"):
                yield DataTable(id="trials-table", cursor_type="row", zebra_stripes=True, classes="panel")
                yield Static(Text(NO_DETAIL, style="dim"), id="trial-detail")
            with Vertical(id="tune-side"):
                yield Static(best_text(None, GOODPUT, None), id="best", classes="panel")
                yield TrialChart(id="chart")
        with Horizontal(classes="actions", id="export-row"):
            yield Label("export")
            yield Select(
                [(name, name) for name in ENGINES],
                value=default_engine(defaults.hardware),
                allow_blank=False,
                compact=True,
                id="engine",
            )
            yield Input("deploy", compact=True, id="out")
            yield Button("Export", id="export", compact=True)
            yield Static("", id="export-status")

    def on_mount(self) -> None:
        self._trial_columns()
        self.query_one("#trials-table").border_title = "trials"
        self.query_one("#best").border_title = "best so far"
        self.query_one("#chart").border_title = "objective by trial"

    def palette_commands(self) -> Iterable[SystemCommand]:
        yield SystemCommand("Start or resume study", "Run the study the Tune settings describe", self.action_start)
        yield SystemCommand("Pause study", "Stop starting trials; Start resumes the same study", self.action_pause)
        yield SystemCommand("Stop study", "End the study and store its best and default runs", self.action_stop)
        yield SystemCommand(
            "Export best config", "Write serve.sh, engine YAML and pipedeck-best.json", self.action_export
        )

    def use_config(self, config: ServingConfig) -> None:
        """Tune around a config: its model and hardware, its devices, and its tp x pp pinned."""
        if self.phase != "idle":
            self.error("a study is running or paused: stop it before tuning another config")
            return
        choose(self.query_one("#model", Select), model_names(), config.model)
        choose(self.query_one("#hardware", Select), hardware_names(), config.hardware)
        shape = config.parallelism
        self.query_one("#devices", Input).value = str(shape.tp * shape.pp)
        self.query_one("#fix", Input).value = f"tp={shape.tp} pp={shape.pp}"

    # -- start, pause, stop ------------------------------------------------------------

    def action_start(self) -> None:
        """Start a study from the settings, or resume the paused one."""
        if self.phase == "paused":
            self._launch(self.spec, resume=True)
        elif self.phase == "idle":
            try:
                spec = build_spec(self._inputs(), self.session.db)
            except (ValueError, SLOError) as err:
                self._invalid(err)
                return
            self.trials, self.best = {}, None
            self._launch(spec, resume=True)
            self._trial_columns()

    def action_pause(self) -> None:
        """Stop starting trials; the trial in progress is abandoned and retried when the study resumes."""
        if self.phase == "running":
            self.finalise = False
            self.workers.cancel_group(self, "tune")
            self._status("pausing: abandoning the trial in progress...")

    def action_stop(self) -> None:
        """End the study where it is: no more trials; the best and default configs are measured and stored."""
        if self.phase == "running":
            self.finalise = True
            self.workers.cancel_group(self, "tune")
            self._status("stopping...")
        elif self.phase == "paused":
            self._launch(self.spec, resume=False)

    def action_export(self) -> None:
        """Export the study's best completed trial for the chosen engine."""
        try:
            study = self.spec.study if self.spec else build_spec(self._inputs(), self.session.db).study
        except (ValueError, SLOError) as err:
            self._invalid(err)
            return
        self._export(study, str(self.query_one("#engine", Select).value), Path(self.query_one("#out", Input).value))

    def _launch(self, spec: TuneSpec | None, resume: bool) -> None:
        assert spec is not None
        self.spec, self.finalise = spec, False
        self.query_one("#trials-table").border_title = f"trials of {spec.study}"
        self._set_phase("running" if resume else "finalising")
        self._status("starting..." if resume else "storing the best and default runs...")
        self._tune(spec, resume)

    def _inputs(self) -> TuneInputs:
        text = {
            name: self.query_one(f"#{name}", Input).value.strip()
            for name in ("slo", "requests", "devices", "trials", "fix", "study")
        }
        return TuneInputs(
            scenario=str(self.query_one("#scenario", Select).value),
            model=str(self.query_one("#model", Select).value),
            hardware=str(self.query_one("#hardware", Select).value),
            devices=typed_number(text["devices"], int, "devices"),
            slo=parse_slo(text["slo"]) if text["slo"] else None,
            objective=objective_named(self.query_one("#objective", Select).value),
            fixes=tuple(text["fix"].split()),
            trials=typed_number(text["trials"], int, "trials"),
            study=text["study"] or None,
            requests=typed_number(text["requests"], int, "requests"),
        )

    def _invalid(self, err: Exception) -> None:
        """Show an input error and mark the field it names (a config field can only come from the pins)."""
        message = f"{err.field}: {err}" if isinstance(err, TuneInputError) else one_line(err)
        config_fields = [f.name for f in form_fields()]
        name = (
            ALIASES.get(message.partition(": ")[0])
            or error_field(message, self.INPUTS)
            or ("fix" if error_field(message, config_fields) else None)
        )
        if name is not None:
            self.query_one(f"#{name}", Widget).add_class("-invalid")
        self.error(message)

    @on(Input.Changed)
    @on(Select.Changed)
    def _edited(self, event: Input.Changed | Select.Changed) -> None:
        event.control.remove_class("-invalid")
        if event.control.id == "hardware" and event.value != Select.NULL:
            self.query_one("#engine", Select).value = default_engine(str(event.value))

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        actions = {
            "start": self.action_start,
            "pause": self.action_pause,
            "stop": self.action_stop,
            "export": self.action_export,
        }
        actions[str(event.button.id)]()

    # -- workers --------------------------------------------------------------------------

    @work(thread=True, group="tune")
    def _tune(self, spec: TuneSpec, resume: bool) -> None:
        """Run the study (resume) or store its best and default runs without new trials (not resume)."""
        stop = get_current_worker().cancelled_event
        shown: Progress | None = None
        trials: list[TrialRow] = []

        def progress(p: Progress) -> None:
            nonlocal shown, trials
            # the store gains trials as they finish, and may lag the study's count by a sync
            if shown is None or p.finished != shown.finished or len(trials) < p.finished:
                with open_store(self.session.db) as store:
                    fresh = store.trials(spec.study)
                if len(fresh) != len(trials):
                    trials, shown = fresh, None
            if p != shown:
                shown = p
                self.post_message(TrialsUpdated(p, trials))

        try:
            outcome = run_study(spec, self.session.db, on_progress=progress, stop_requested=stop) if resume else None
            if outcome is None or (outcome.interrupted and self.finalise):
                done = self.finished if outcome is None else outcome.trials
                outcome = run_study(dataclasses.replace(spec, trials=done), self.session.db, on_progress=progress)
        except Exception as err:  # noqa: BLE001 - a tuner failure becomes a notification
            self.post_message(TuneFailed(one_line(err)))
            return
        self.post_message(TuneEnded(outcome))

    @work(thread=True, group="export")
    def _export(self, study: str, engine: str, out: Path) -> None:
        """Write the study's best config for `engine` into `out`."""
        warnings: list[str] = []
        try:
            with open_store(self.session.db) as store:
                paths = export_best(store, study, engine, out, warn=warnings.append)
        except Exception as err:  # noqa: BLE001 - ExportError, StoreError, ConfigError: shown, never a crash
            self.post_message(WorkFailed(one_line(err)))
            return
        self.post_message(Exported(paths, warnings))

    # -- messages ---------------------------------------------------------------------------

    def on_trials_updated(self, message: TrialsUpdated) -> None:
        p, objective = message.progress, self._objective
        table = self.query_one(DataTable)
        for trial in message.trials:
            if trial.number not in self.trials:
                table.add_row(*trial_cells(trial, objective), key=str(trial.number))
            self.trials[trial.number] = trial
        self._show_detail()
        self.finished, self.best = p.finished, p.best_trial
        self._show_best(None)
        target = f"/{p.target}" if p.target else ""
        running = f", {p.running} running" if p.running else ""
        best = "" if p.best_value is None else f"; best {objective.value_text(p.best_value)} (trial {p.best_trial})"
        if self.phase == "running":
            self._status(f"{p.finished}{target} trials{running}{best}")

    def on_tune_ended(self, message: TuneEnded) -> None:
        outcome = message.outcome
        self.finished = outcome.trials
        if outcome.best is not None:  # the recommended trial: ties are broken as `pipedeck tune` breaks them
            self.best = outcome.best.number
        self._show_best(outcome.ratio)
        if outcome.interrupted:
            self._set_phase("paused")
            self._status(f"paused after {outcome.trials} trials: Resume (s) continues, Stop (x) ends the study")
            return
        self._set_phase("idle")
        runs = stored_runs_text(outcome.best_run_id, outcome.default_run_id)
        runs = f"; stored {runs}" if runs else ""
        self._status(f"finished: {outcome.trials} trials{runs}")

    def on_tune_failed(self, message: TuneFailed) -> None:
        self.spec = None
        self._set_phase("idle")
        self._status(f"failed: {message.error}")
        self.error(message.error)

    @on(DataTable.RowHighlighted, "#trials-table")
    def _show_detail(self) -> None:
        """Under the table, the split and knobs of the trial under its cursor."""
        key = cursor_key(self.query_one("#trials-table", DataTable))
        trial = self.trials.get(int(key)) if key is not None else None
        self.query_one("#trial-detail", Static).update(
            Text(trial_detail(trial)) if trial else Text(NO_DETAIL, style="dim")
        )

    def on_exported(self, message: Exported) -> None:
        folder = shown_path(message.paths[0].parent)
        self.query_one("#export-status", Static).update(
            Text(f"wrote {folder}/: {', '.join(p.name for p in message.paths)}")
        )
        for warning in message.warnings:  # as serve.sh opens with them
            self.notify(warning.removeprefix("WARNING: "), severity="warning", timeout=12, markup=False)

    def on_work_failed(self, message: WorkFailed) -> None:
        """Only an export fails so here; View's handler (called after this one) shows why."""
        self.query_one("#export-status", Static).update(Text("not exported: see the message", style="bold red"))

    # -- drawing ------------------------------------------------------------------------------

    @property
    def _objective(self) -> Objective:
        return self.spec.objective if self.spec else objective_named(self.query_one("#objective", Select).value)

    def _show_best(self, ratio: float | None) -> None:
        objective = self._objective
        best = self.trials.get(self.best) if self.best is not None else None
        self.query_one("#best", Static).update(best_text(best, objective, ratio))
        if best is not None and best.config:
            engine = self.query_one("#engine", Select)
            engine.value = engine_for(str(best.config["mode"]), str(engine.value))
        points = [(n, t.objective if t.state == "COMPLETE" else None) for n, t in sorted(self.trials.items())]
        self.query_one(TrialChart).show(points, self.best)

    def _trial_columns(self) -> None:
        """Empty the trials table and head its columns, the objective's with its unit."""
        table = self.query_one(DataTable)
        table.clear(columns=True)
        table.add_columns(*(name.format(unit=self._objective.unit) for name in TRIAL_COLUMNS))
        self._show_detail()

    def _set_phase(self, phase: str) -> None:
        self.phase = phase
        start = self.query_one("#start", Button)
        start.label = "Resume" if phase == "paused" else "Start"
        start.disabled = phase not in ("idle", "paused")
        self.query_one("#pause", Button).disabled = phase != "running"
        self.query_one("#stop", Button).disabled = phase not in ("running", "paused")
        for name in self.INPUTS:
            self.query_one(f"#{name}", Widget).disabled = phase != "idle"

    def _status(self, text: str) -> None:
        self.query_one("#tune-status", Static).update(Text(text))
