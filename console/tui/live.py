"""The Live view: run a scenario on a backend, paced to wall time, and watch its metrics and pipeline."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.widget import Widget
from textual.widgets import Button, Input, Label, Select, Sparkline, Static
from textual.worker import Worker, get_current_worker

from ...backends import (
    ENGINES,
    RunCancelled,
    RunResult,
    ServerLaunch,
    backend_entry,
    backends,
    check_footprint,
    check_knobs_read,
    open_backend,
    serving,
)
from ...scenarios import Scenario, catalog, load_scenario
from ...store import ConfigRow, RunRow, StoreError
from ...tuner import Slo, SLOError, open_store, parse_slo
from .livestats import PERCENTILES, LiveStats
from .messages import RunFailed, RunFinished, RunProgress, RunStarted, RunStopped, StoreListed
from .pacing import PacedObserver
from .sources import FORM, describe, load_source, source_options
from .view import DEFAULT_SLO, Session, View, offer, one_line, shown_path, typed_number
from .widgets import PipelineStrip

SPEEDS = (("0.5x", "0.5"), ("1x", "1"), ("2x", "2"), ("5x", "5"), ("10x", "10"), ("max", "max"))
LIVE_SCENARIO = "long-64k"
ENDPOINT_HINT = "http://127.0.0.1:8080"
WINDOWS_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
PROGRESS_ROWS = (("running", "running"), ("waiting", "waiting"), ("throughput", "throughput"), ("kv", "KV cache"))
ATTACH = "attach"  # the server picker's value for "a server already running at the endpoint"
SERVE_LOG = "pipedeck-serve.log"  # a server the console launches logs here, beside the run store
STRIP_KEY = "digit: stage · colour: request · grey: decode · ─ transfer · blank: bubble"  # fits 80 columns
NO_TIMELINE = "no per-rank timeline while it runs; with a profile folder, its measured one when it ends"
JOB_CONTROLS = (
    "backend",
    "speed",
    "scenario",
    "requests",
    "scenario-file",
    "rate",
    "config",
    "server",
    "target",
    "profile",
)


@dataclass(frozen=True)
class LiveJob:
    """One run as the controls ask for it."""

    backend: str
    scenario: Scenario
    source: str  # FORM, named:<name> or run:<id>
    rate: float | None
    requests: int | None
    total: int
    speed: float | None  # None: as fast as it can (or, for a paced backend, in its own time)
    server: str = ATTACH  # for a backend that drives a server: ATTACH, or the engine to launch
    target: str = ""  # the endpoint to attach to, or the weights to launch the engine with
    profile_dir: str = ""  # where the server's profiler writes (profile the run); "": no profile
    seed: int = 0

    @property
    def paced(self) -> bool:
        return backend_entry(self.backend).capabilities.paced


def seconds(value: float) -> str:
    """A latency with a unit that keeps three digits: 45.6 ms, 1.23 s, 123 s (1,234 s, never 1.23e+03 s)."""
    if value < 1:
        return f"{value * 1e3:.3g} ms"
    return f"{value:.3g} s" if value < 1000 else f"{value:,.0f} s"


def latency_table(stats: LiveStats | None, slo: Slo | None) -> Group:
    """TTFT and TPOT P50/P90/P99 so far, then a line per SLO limit saying whether it holds.

    The limit's percentile is green when met and red when not. The verdicts sit under the table, not in a
    column beside it, so that every figure fits in half of an 80-column terminal.
    """
    table = Table(box=None, padding=(0, 0, 0, 2), pad_edge=False, expand=False)
    table.add_column("", no_wrap=True)
    for pct in PERCENTILES:
        table.add_column(f"P{pct:g}", justify="right", no_wrap=True)
    lines: list[Text] = []
    limits = {limit.metric: limit for limit in slo.limits} if slo else {}
    for metric in ("ttft", "tpot"):
        values = stats.latency(metric) if stats else None
        absent = "n/a" if stats is not None and stats.done and not values else "-"  # finished, none decoded: no TPOT
        cells = [Text(seconds(v)) for v in values] if values else [Text(absent) for _ in PERCENTILES]
        limit = limits.get(metric)
        if limit is not None:
            line = Text(f"SLO {metric.upper()} P{limit.percentile:g} ≤ {seconds(limit.limit_s)}")
            if absent == "n/a":
                line.append(": n/a (one-token outputs)", style="dim")
            elif stats is not None and values:
                actual = stats.percentile(metric, limit.percentile)
                met = actual <= limit.limit_s
                style = "bold green" if met else "bold red"
                if limit.percentile in PERCENTILES:
                    cells[PERCENTILES.index(limit.percentile)].stylize(style)
                    line.append(": ")
                else:  # a percentile the table has no column for: its value, here
                    line.append(": ").append(f"{seconds(actual)} ", style=style)
                line.append("pass" if met else "FAIL", style=style)
            lines.append(line)
        table.add_row(metric.upper(), *cells)
    return Group(table, *(lines or [Text("no SLO: type one in the SLO field", style="dim")]))


def known(value: float | None, show: Callable[[float], str]) -> str:
    """A figure as `show` writes it; n/a when the backend cannot see it (a server without the series)."""
    return "n/a" if value is None else show(value)


def finished(result: RunResult, clock: str) -> str:
    """What a finished run did, on one line: requests, time, and the bubble or the server it ran on."""
    summary = result.summary()
    line = f"{len(result.records)} requests, {result.makespan_s:.4g} s {clock}"
    if summary["bubble_ratio"] is not None:
        line += f", bubble {summary['bubble_ratio']:.1%}"
    live = summary.get("live")
    if live:
        line += f", {live['failed']} failed" if live["failed"] else ""
        if live["prefix_cache_hit_rate"] is not None:
            line += f", prefix cache hit rate {live['prefix_cache_hit_rate']:.1%}"
        line += f", {live['engine_version'] or live['engine'] or 'engine unknown'}"
    return line


class LiveScreen(View):
    """Controls for one run, its progress and latencies against the SLO, and the per-rank pipeline strip."""

    MODE = "live"
    BINDINGS = [
        Binding("s", "start", "Start"),
        Binding("x", "stop", "Stop"),
        Binding("[", "zoom(-1)", "Zoom in"),
        Binding("]", "zoom(1)", "Zoom out"),
    ]

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.stats: LiveStats | None = None
        self.slo: Slo | None = parse_slo(DEFAULT_SLO)
        self.window = WINDOWS_S.index(5.0)
        self.worker: Worker[None] | None = None
        self.running = ""  # what the status line says while a run goes (the locked controls show its config)
        self.named: list[ConfigRow] = []  # the store's named configs and runs, as last listed
        self.stored: list[RunRow] = []

    def body(self) -> ComposeResult:
        with Grid(id="live-controls", classes="controls"):
            yield Label("backend")
            yield Select(
                [(f"{e.name}: {e.title}", e.name) for e in backends().values()],
                value="sim",
                allow_blank=False,
                compact=True,
                id="backend",
            )
            yield Label("speed")
            yield Select(SPEEDS, value="1", allow_blank=False, compact=True, id="speed")
            yield Label("scenario")
            yield Select(
                [(name, name) for name in catalog()],
                value=LIVE_SCENARIO,
                allow_blank=False,
                compact=True,
                id="scenario",
            )
            yield Label("requests")
            yield Input(placeholder="scenario's", compact=True, id="requests")
            yield Label("or file")
            yield Input(placeholder=".toml, .csv or .jsonl scenario", compact=True, id="scenario-file")
            yield Label("rate")
            yield Input(placeholder="scenario's (req/s)", compact=True, id="rate")
            yield Label("config")  # the whole row: a config's label is long, and it must show what Config handed over
            yield Select(
                [(f"form: {describe(self.session.config)}", FORM)],
                value=FORM,
                allow_blank=False,
                compact=True,
                id="config",
            )
            yield Label("SLO")
            yield Input(DEFAULT_SLO, compact=True, id="slo")
        with Grid(id="live-server", classes="controls"):
            yield Label("server")
            yield Select(
                [("attach", ATTACH)] + [(f"launch {name}", name) for name in ENGINES],
                value=ATTACH,
                allow_blank=False,
                compact=True,
                id="server",
            )
            yield Label("endpoint", id="target-label")
            yield Input(placeholder=ENDPOINT_HINT, compact=True, id="target")
            yield Label("profile")
            yield Input(
                placeholder="folder the server's profiler writes to (vLLM); blank: none", compact=True, id="profile"
            )
        with Horizontal(classes="actions"):
            yield Button("Start", id="start", variant="success", compact=True)
            yield Button("Stop", id="stop", variant="error", compact=True, disabled=True)
            yield Static("ready: pick a scenario and a config, then Start (s)", id="live-status")
        with Horizontal(id="live-panels"):
            with Grid(id="progress", classes="panel"):
                yield Label("done")
                yield Static("-", id="v-done")
                yield Static()
                for key, label in PROGRESS_ROWS:
                    yield Label(label)
                    yield Static("-", id=f"v-{key}")
                    yield Sparkline([], id=f"s-{key}")
            with Vertical(id="latency-panel", classes="panel"):
                yield Static(id="latency")
                with Grid(id="latency-history"):
                    for key, label in (("ttft_p90", "TTFT P90"), ("tpot_p90", "TPOT P90")):
                        yield Label(label)
                        yield Sparkline([], id=f"s-{key}")
        yield PipelineStrip(id="strip")

    def on_mount(self) -> None:
        self._backend_chosen()
        self.query_one("#progress").border_title = "progress"
        self.query_one("#latency-panel").border_title = "latency vs SLO"
        self._title_strip()
        self._show_latency()

    def on_screen_resume(self) -> None:
        self.list_store()

    def palette_commands(self) -> Iterable[SystemCommand]:
        yield SystemCommand("Start run", "Start the run the Live controls describe", self.action_start)
        yield SystemCommand("Stop run", "Cancel the running run (nothing is stored)", self.action_stop)

    def use_form(self) -> None:
        """Pick the Config form's config for the next run, its label showing that config at once."""
        self._offer_sources(FORM)

    def on_store_listed(self, message: StoreListed) -> None:
        self.named, self.stored = message.configs, message.runs
        self._offer_sources(str(self.query_one("#config", Select).value))

    def _offer_sources(self, chosen: str) -> None:
        """Offer the form's config (as it is now), the named configs and the newest runs; keep `chosen` if offered."""
        offer(self.query_one("#config", Select), source_options(self.session.config, self.named, self.stored), chosen)

    # -- starting and stopping ------------------------------------------------------

    def action_start(self) -> None:
        """Start the run the controls describe (refused while one runs)."""
        if self.worker is not None:
            return
        try:
            job = self._job()
        except (ValueError, SLOError) as err:  # ConfigError, ScenarioError and our own parse errors are ValueErrors
            self.error(one_line(err))
            return
        self.stats = None
        self._lock(True)
        self._status(f"starting {job.scenario.name}...")
        self.worker = self._run(job)

    def action_stop(self) -> None:
        """Cancel the run: the backend raises RunCancelled at its next snapshot and nothing is stored."""
        if self.worker is not None:
            self.worker.cancel()
            self._status("stopping...")

    def action_zoom(self, step: int) -> None:
        """Show a shorter or longer window of the pipeline strip."""
        self.window = max(0, min(len(WINDOWS_S) - 1, self.window + step))
        self._show_strip()

    def _job(self) -> LiveJob:
        path = self.query_one("#scenario-file", Input).value.strip()
        scenario = load_scenario(path or str(self.query_one("#scenario", Select).value))
        rate = typed_number(self.query_one("#rate", Input).value, float, "rate")
        requests = typed_number(self.query_one("#requests", Input).value, int, "requests")
        backend = str(self.query_one("#backend", Select).value)
        total = check_footprint(
            backend, scenario, None, num_requests=requests, rate=rate
        )  # as the CLI checks it, drawing nothing
        speed = str(self.query_one("#speed", Select).value)
        server, target = str(self.query_one("#server", Select).value), self.query_one("#target", Input).value.strip()
        if backend_entry(backend).capabilities.endpoint and not target:
            raise ValueError(
                f"endpoint: give the server's URL, e.g. {ENDPOINT_HINT}"
                if server == ATTACH
                else f"model: give the weights {server} serves (a path or hub id)"
            )
        paced = backend_entry(backend).capabilities.paced  # a real server keeps wall time itself
        return LiveJob(
            backend,
            scenario,
            str(self.query_one("#config", Select).value),
            rate,
            requests,
            total,
            None if speed == "max" or paced else float(speed),
            server,
            target,
            self.query_one("#profile", Input).value.strip(),
        )

    @work(thread=True, group="live-run")
    def _run(self, job: LiveJob) -> None:
        """Resolve the config, launch its server if asked, run the backend, and store the finished run.

        A server the console launched is stopped, and the backend closed, however the run ends.
        """
        cancelled = get_current_worker().cancelled_event
        observer = PacedObserver(job.speed, lambda frame: self.post_message(RunProgress(frame)), cancelled)
        try:
            config = load_source(job.source, self.session.config, self.session.db).resolve()
            check_knobs_read(job.backend, config.values())  # as `pipedeck run` refuses it
            with contextlib.ExitStack() as stack:
                options = {}
                if backend_entry(job.backend).capabilities.endpoint:
                    options["endpoint"] = job.target
                    if job.profile_dir:
                        options["profile_dir"] = job.profile_dir
                    if job.server != ATTACH:
                        log = self.session.db.parent / SERVE_LOG
                        self.app.call_from_thread(self._status, f"launching {job.server} (log {shown_path(log)})...")
                        launch = ServerLaunch(
                            job.server, job.target, log, profile_dir=Path(job.profile_dir) if job.profile_dir else None
                        )
                        options["endpoint"] = stack.enter_context(
                            serving(launch, config, cancelled=cancelled.is_set)
                        ).url
                ranks = config.parallelism.pp if backend_entry(job.backend).capabilities.timeline else 0  # strip rows
                self.post_message(RunStarted(job.scenario.name, ranks, job.total))
                backend = stack.enter_context(open_backend(job.backend, **options))
                result = backend.run(
                    job.scenario,
                    config,
                    rate=job.rate,
                    seed=job.seed,
                    num_requests=job.requests,
                    observer=observer,
                    timeline=True,
                )
        except RunCancelled:
            observer.flush()
            self.post_message(RunStopped(observer.sim_time))
            return
        except Exception as err:  # noqa: BLE001 - whatever a backend raises becomes a notification
            self.post_message(RunFailed(one_line(err)))
            return
        observer.flush()
        try:
            with open_store(self.session.db) as store:
                run_id = store.save_run(result)
        except StoreError as err:
            self.post_message(RunFailed(f"the run finished but was not stored: {err}"))
            return
        self.post_message(RunFinished(result, run_id))

    # -- progress -------------------------------------------------------------------

    def on_run_started(self, message: RunStarted) -> None:
        self.stats = LiveStats(message.ranks, message.total)
        self.running = f"running {message.scenario}"
        self._status(self.running)

    def on_run_progress(self, message: RunProgress) -> None:
        if self.stats is not None and self.worker is not None:
            self.stats.add(message.frame)
            self._show()
            if not self.worker.is_cancelled:
                self._status(f"{self.stats.now:.1f} s {self._clock()}: {self.running}")

    def on_run_finished(self, message: RunFinished) -> None:
        if self.stats is not None:
            self.stats.finish(message.result)
            self._show()
        self._ended(f"stored run {message.run_id}: {finished(message.result, self._clock())}")

    def on_run_stopped(self, message: RunStopped) -> None:
        self._ended(f"cancelled at {message.at_s:.4g} s {self._clock()}; nothing stored")

    def on_run_failed(self, message: RunFailed) -> None:
        self._ended(f"failed: {message.error}")
        self.error(message.error)

    def _ended(self, status: str) -> None:
        self.worker = None
        self._lock(False)
        self._status(status)
        self.list_store()

    def _lock(self, running: bool) -> None:
        """While a run goes, its controls keep showing what it runs (the SLO stays editable) and Stop is offered.

        Focus on a control that goes off moves to the button that comes on, not on to the next control: that
        could be a text field, which would swallow the next key (x, s, 2 ...).
        """
        controls = [self.query_one(f"#{name}", Widget) for name in JOB_CONTROLS]
        start, stop = self.query_one("#start", Button), self.query_one("#stop", Button)
        on, off = (stop, start) if running else (start, stop)
        on.disabled = False
        if self.focused in (*controls, off):
            on.focus()
        off.disabled = True
        for control in controls:
            control.disabled = running
        if not running:
            self._backend_chosen()  # the speed picker stays off for a backend that keeps its own time

    @on(Button.Pressed, "#start")
    def _start_pressed(self) -> None:
        self.action_start()

    @on(Button.Pressed, "#stop")
    def _stop_pressed(self) -> None:
        self.action_stop()

    @on(Select.Changed, "#backend")
    @on(Select.Changed, "#server")
    def _backend_chosen(self) -> None:
        """Show the server controls for a backend that drives a server; speed only for one that is not paced. The
        Config form offers the knobs this backend reads."""
        self.session.backend = str(self.query_one("#backend", Select).value)
        capabilities = backend_entry(self.session.backend).capabilities
        self.query_one("#live-server").display = capabilities.endpoint
        self.query_one("#speed", Select).disabled = capabilities.paced
        attach = self.query_one("#server", Select).value == ATTACH
        self.query_one("#target-label", Label).update("endpoint" if attach else "model")
        self.query_one("#target", Input).placeholder = ENDPOINT_HINT if attach else "weights: a path or hub id"
        strip = self.query_one(PipelineStrip)
        strip.placeholder = "no timeline yet: start a run" if capabilities.timeline else NO_TIMELINE
        strip.border_subtitle = STRIP_KEY if capabilities.timeline else ""
        strip.refresh()

    def _clock(self) -> str:
        """What the run's time is: wall time on a paced backend, simulated time otherwise."""
        paced = backend_entry(str(self.query_one("#backend", Select).value)).capabilities.paced
        return "elapsed" if paced else "simulated"

    @on(Input.Changed, "#slo")
    def _slo_changed(self, event: Input.Changed) -> None:
        try:
            self.slo = parse_slo(event.value) if event.value.strip() else None
        except SLOError:
            return
        self._show_latency()

    # -- drawing --------------------------------------------------------------------

    def _status(self, text: str) -> None:
        self.query_one("#live-status", Static).update(Text(text))

    def _show(self) -> None:
        stats = self.stats
        assert stats is not None
        last = stats.last
        self.query_one("#v-done", Static).update(f"{stats.done}/{stats.total}")
        values = (
            {"running": "-", "waiting": "-", "kv": "-"}
            if last is None
            else {
                "running": known(last.running, str),
                "waiting": known(last.waiting, str),
                "kv": known(last.kv_used, "{:.1%}".format),
            }
        )
        values["throughput"] = f"{stats.throughput:,.0f} tok/s"
        for key, text in values.items():
            self.query_one(f"#v-{key}", Static).update(text)
        for key, series in stats.history.items():
            self.query_one(f"#s-{key}", Sparkline).data = list(series)
        self._show_latency()
        self._show_strip()

    def _show_latency(self) -> None:
        self.query_one("#latency", Static).update(latency_table(self.stats, self.slo))

    def _show_strip(self) -> None:
        self._title_strip()
        if self.stats is not None:
            self.query_one(PipelineStrip).show(*self.stats.window(WINDOWS_S[self.window]))

    def _title_strip(self) -> None:
        strip = self.query_one(PipelineStrip)
        now = f" at {self.stats.now:.4g} s" if self.stats else ""
        strip.border_title = f"pipeline, last {WINDOWS_S[self.window]:g} s{now}   [ ] zoom"
