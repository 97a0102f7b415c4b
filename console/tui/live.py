"""The Live view: run a scenario on a backend, paced to wall time, and watch its metrics and pipeline."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text
from textual import on, work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical
from textual.widgets import Button, Input, Label, Select, Sparkline, Static
from textual.worker import Worker, get_current_worker

from ...backends.base import RunCancelled
from ...backends.registry import BACKENDS, backend_entry, make_backend
from ...scenarios import Scenario, catalog, load_scenario
from ...store import StoreError
from ...tuner.slo import SLO, SLOError, parse_slo
from ...tuner.study import open_store
from .livestats import PERCENTILES, LiveStats
from .messages import RunFailed, RunFinished, RunProgress, RunStarted, RunStopped, StoreListed
from .pacing import PacedObserver
from .sources import FORM, describe, load_source, source_options
from .view import DEFAULT_SLO, View, one_line, typed_number
from .widgets import PipelineStrip

SPEEDS = (("0.5x", "0.5"), ("1x", "1"), ("2x", "2"), ("5x", "5"), ("10x", "10"), ("max", "max"))
LIVE_SCENARIO = "long-64k"
WINDOWS_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0)
PROGRESS_ROWS = (("in_flight", "in flight"), ("waiting", "waiting"), ("throughput", "throughput"),
                 ("kv", "KV cache"))


@dataclass(frozen=True)
class LiveJob:
    """One run as the controls ask for it."""

    backend: str
    scenario: Scenario
    source: str  # FORM, named:<name> or run:<id>
    rate: float | None
    requests: int | None
    total: int
    speed: float | None  # None: as fast as it can
    seed: int = 0


def seconds(value: float) -> str:
    """A latency with a unit that keeps three digits: 1.23 s, 45.6 ms."""
    return f"{value:.3g} s" if value >= 1 else f"{value * 1e3:.3g} ms"


def latency_table(stats: LiveStats | None, slo: SLO | None) -> Table:
    """TTFT and TPOT P50/P90/P99 so far against the SLO: the limit's percentile green when met, red when not."""
    table = Table(box=None, padding=(0, 1), expand=True)
    table.add_column("", min_width=4, no_wrap=True)
    for header in ("P50", "P90", "P99", "SLO"):
        table.add_column(header, justify="right", no_wrap=True)
    limits = {limit.metric: limit for limit in slo.limits} if slo else {}
    for metric in ("ttft", "tpot"):
        values = stats.latency(metric) if stats else None
        cells = [Text(seconds(v)) for v in values] if values else [Text("-") for _ in PERCENTILES]
        limit = limits.get(metric)
        verdict = Text("-" if limit is None else f"P{limit.percentile:g} ≤ {seconds(limit.limit_s)}")
        if limit is not None and stats is not None and values:
            actual = stats.percentile(metric, limit.percentile)
            met = actual <= limit.limit_s
            style = "bold green" if met else "bold red"
            verdict = Text(f"{'≤' if met else '>'} {seconds(limit.limit_s)} {'pass' if met else 'FAIL'}", style=style)
            if limit.percentile in PERCENTILES:
                cells[PERCENTILES.index(limit.percentile)].stylize(style)
            else:
                verdict = Text(f"P{limit.percentile:g} {seconds(actual)} ", style=style) + verdict
        table.add_row(metric.upper(), *cells, verdict)
    return table


class LiveScreen(View):
    """Controls for one run, its progress and latencies against the SLO, and the per-rank pipeline strip."""

    MODE = "live"
    BINDINGS = [Binding("s", "start", "Start"), Binding("x", "stop", "Stop"),
                Binding("[", "zoom(-1)", "Zoom in"), Binding("]", "zoom(1)", "Zoom out")]

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.stats: LiveStats | None = None
        self.slo: SLO | None = parse_slo(DEFAULT_SLO)
        self.window = WINDOWS_S.index(5.0)
        self.worker: Worker[None] | None = None
        self.running = ""  # what the status line says while a run goes

    def body(self) -> ComposeResult:
        with Grid(id="live-controls", classes="controls"):
            yield Label("backend")
            yield Select([(f"{e.name}: {e.title}", e.name) for e in BACKENDS.values()], value="sim",
                         allow_blank=False, compact=True, id="backend")
            yield Label("rate")
            yield Input(placeholder="scenario's (req/s)", compact=True, id="rate")
            yield Label("scenario")
            yield Select([(name, name) for name in catalog()], value=LIVE_SCENARIO, allow_blank=False,
                         compact=True, id="scenario")
            yield Label("requests")
            yield Input(placeholder="scenario's", compact=True, id="requests")
            yield Label("or file")
            yield Input(placeholder=".toml, .csv or .jsonl scenario", compact=True, id="scenario-file")
            yield Label("speed")
            yield Select(SPEEDS, value="1", allow_blank=False, compact=True, id="speed")
            yield Label("config")
            yield Select([(f"form: {describe(self.session.config)}", FORM)], value=FORM, allow_blank=False,
                         compact=True, id="config")
            yield Label("SLO")
            yield Input(DEFAULT_SLO, compact=True, id="slo")
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
        """Pick the Config form's config for the next run (its label is refreshed when the view resumes)."""
        self.query_one("#config", Select).value = FORM

    def on_store_listed(self, message: StoreListed) -> None:
        select = self.query_one("#config", Select)
        chosen = select.value
        options = source_options(self.session.config, message.configs, message.runs)
        select.set_options(options)
        select.value = chosen if any(value == chosen for _, value in options) else FORM

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
        self.query_one("#start", Button).disabled = True
        self.query_one("#stop", Button).disabled = False
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
        total = len(scenario.workload(rate=rate, num_requests=requests).requests)
        speed = str(self.query_one("#speed", Select).value)
        backend = str(self.query_one("#backend", Select).value)
        paced = backend_entry(backend).capabilities.paced  # a real server keeps wall time itself
        return LiveJob(backend, scenario, str(self.query_one("#config", Select).value), rate, requests, total,
                       None if speed == "max" or paced else float(speed))

    @work(thread=True, group="live-run")
    def _run(self, job: LiveJob) -> None:
        """Resolve the config, run the backend with a paced observer, and store the finished run."""
        observer = PacedObserver(job.speed, lambda frame: self.post_message(RunProgress(frame)),
                                 get_current_worker().cancelled_event)
        try:
            config = load_source(job.source, self.session.config, self.session.db).resolve()
            self.post_message(RunStarted(job.scenario.name, describe(config), config.pp, job.total))
            result = make_backend(job.backend).run(job.scenario, config, rate=job.rate, seed=job.seed,
                                                   num_requests=job.requests, observer=observer, timeline=True)
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
        self.running = f"running {message.scenario} on {message.config}"
        self._status(self.running)

    def on_run_progress(self, message: RunProgress) -> None:
        if self.stats is not None and self.worker is not None:
            self.stats.add(message.frame)
            self._show()
            if not self.worker.is_cancelled:
                self._status(f"{self.running}: {self.stats.now:.1f} s simulated")

    def on_run_finished(self, message: RunFinished) -> None:
        summary = message.result.summary()
        if self.stats is not None:
            self.stats.finish(message.result)
            self._show()
        self._ended(f"done: {len(message.result.records)} requests, {message.result.makespan_s:.4g} s simulated, "
                    f"bubble {summary['bubble_ratio']:.1%}; stored run {message.run_id}")
        self.notify(f"stored run {message.run_id}", timeout=4)

    def on_run_stopped(self, message: RunStopped) -> None:
        self._ended(f"cancelled at {message.at_s:.4g} s simulated; nothing stored")

    def on_run_failed(self, message: RunFailed) -> None:
        self._ended(f"failed: {message.error}")
        self.error(message.error)

    def _ended(self, status: str) -> None:
        self.worker = None
        self.query_one("#start", Button).disabled = False
        self.query_one("#stop", Button).disabled = True
        self._status(status)
        self.list_store()

    @on(Button.Pressed, "#start")
    def _start_pressed(self) -> None:
        self.action_start()

    @on(Button.Pressed, "#stop")
    def _stop_pressed(self) -> None:
        self.action_stop()

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
        values = {"in_flight": str(last.in_flight) if last else "-", "waiting": str(last.waiting) if last else "-",
                  "throughput": f"{stats.throughput:,.0f} tok/s", "kv": f"{last.kv_used:.1%}" if last else "-"}
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
        strip.border_subtitle = "digit: virtual stage · colour: request · grey: decode · ─ transfer · blank: bubble"

