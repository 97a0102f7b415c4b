"""Shared by the console's tests: a small config, waiting on the app, filling controls, stores, a scripted backend."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from rich.style import Style
from textual.app import App
from textual.geometry import Region
from textual.pilot import Pilot
from textual.widget import Widget

from pipedeck.backends import (
    RankTime,
    RequestRecord,
    RunCancelled,
    RunObserver,
    RunResult,
    ServingConfig,
    Snapshot,
    Span,
)
from pipedeck.backends.base import Capabilities
from pipedeck.backends.sim import SimBackend
from pipedeck.scenarios import Scenario, load_scenario
from pipedeck.store import RunStore
from pipedeck.tuner import GOODPUT, Progress, TrialSummary, TuneOutcome

QWEN = ServingConfig.of(model="qwen2.5-14b", hardware="a100-40g-pcie", tp=2, pp=2)
SIZE = (100, 30)
SMALL = (80, 24)  # the smallest terminal the console is made for
POLL_S = 0.2  # between checks: each pause repaints the screen, which takes the GIL from the workers


async def wait_for(pilot: Pilot, condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Let the app work until `condition()` holds; fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the console"
        await pilot.pause(POLL_S)


def fill(screen: Widget, values: dict[str, object]) -> None:
    """Set controls by id as a user would leave them (Input text, Select value)."""
    for control_id, value in values.items():
        screen.query_one(f"#{control_id}").value = value  # type: ignore[attr-defined]


def store_runs(db: Path, labels: tuple[str | None, str | None] = (None, None)) -> list[int]:
    """Store two short runs of qwen2.5-14b (cpp, then vpp), with these labels, and return their ids."""
    scenario = load_scenario("short-4k")
    with RunStore.open(db) as store:
        return [
            store.save_run(SimBackend().run(scenario, QWEN.replace(mode=mode), num_requests=8), label=label)
            for mode, label in zip(("cpp", "vpp"), labels)
        ]


def screen_lines(app: App) -> list[str]:
    """The screen as the terminal shows it, one string per row, notifications and dialogs included."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


def text_in(app: App, region: Region) -> str:
    """What the screen shows inside `region`, its rows joined by newlines."""
    return "\n".join(line[region.x : region.right] for line in screen_lines(app)[region.y : region.bottom])


def cells(app: App, region: Region) -> list[tuple[str, Style]]:
    """Every cell the screen shows inside `region`: its character and its style."""
    shown = []
    for strip in app.screen._compositor.render_strips()[region.y : region.bottom]:
        for segment in strip.crop(region.x, region.right):
            shown += [(char, segment.style or Style()) for char in segment.text]
    return shown


def contrast(first: tuple[int, int, int], second: tuple[int, int, int]) -> float:
    """The WCAG 2 contrast ratio of two sRGB colours (1 to 21)."""

    def luminance(rgb: tuple[int, int, int]) -> float:
        linear = [c / 255 / 12.92 if c <= 10 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in rgb]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    lighter, darker = sorted((luminance(first), luminance(second)), reverse=True)
    return (lighter + 0.05) / (darker + 0.05)


def notifications(app: App) -> list[tuple[str, str]]:
    """The app's current notifications as (severity, message)."""
    return [(n.severity, n.message) for n in app._notifications]


def scripted_result(config: dict[str, object], chunk_s: float = 0.3, requests: int = 4) -> RunResult:
    """A small fixed run on two ranks: each request's two prefill chunks through both ranks, then its decode."""
    spans, records, t, batch = [], [], 0.0, 0
    for request in range(requests):
        for chunk in range(2):
            busy = chunk_s * (chunk + 1)
            spans += [
                Span(0, 0, batch, request, chunk, t, t + busy, "prefill"),
                Span(1, 1, batch, request, chunk, t + busy, t + 2 * busy, "prefill"),
            ]
            t, batch = t + busy, batch + 1
        first_token = t + busy
        records.append(RequestRecord(request, 0.0, 4096, 8, first_token, first_token + 0.5 + 0.1 * request))
    makespan = max(r.finish_s for r in records)
    ranks = [
        RankTime(rank, busy, 0.0, makespan - busy, 0.0)
        for rank, busy in enumerate(sum(s.end - s.start for s in spans if s.rank == r) for r in (0, 1))
    ]
    return RunResult(
        config=config,
        scenario="short-4k",
        backend="scripted",
        seed=0,
        rate=None,
        records=records,
        ranks=ranks,
        makespan_s=makespan,
        steps=batch,
        chunks=batch,
        stage_executions=len(spans),
        spans=spans,
    )


class ScriptedBackend:
    """Replays `scripted_result` through the observer every 0.5 s of its time: fixed data for snapshots."""

    name = "scripted"
    capabilities = Capabilities(modes=("cpp",), timeline=True, reconfigurable=True, paced=False)

    def check(self) -> None:
        """Nothing to check."""

    def close(self) -> None:
        """Nothing to release."""

    def run(
        self,
        scenario: Scenario,
        config: ServingConfig,
        rate: float | None = None,
        seed: int = 0,
        num_requests: int | None = None,
        observer: RunObserver | None = None,
        timeline: bool = True,
    ) -> RunResult:
        result = scripted_result(config.to_dict(), requests=num_requests or 4)
        spans, records = list(result.spans), sorted(result.records, key=lambda r: r.finish_s)
        tick = 0.0
        while spans or records:
            tick += 0.5
            while spans and spans[0].start < tick:
                observer.span(spans.pop(0))
            while records and records[0].finish_s <= tick:
                observer.request_done(records.pop(0))
            left = len(records)
            observer.snapshot(Snapshot(tick, len(result.records) - left, min(left, 2), max(0, left - 2), 0.1 * left))
            if observer.should_stop():
                raise RunCancelled()
        return result


FAKE_TRIALS = (
    (0, "COMPLETE", 0, 7.18),
    (1, "COMPLETE", 24576, 10.7),
    (2, "PRUNED", 40960, None),
    (3, "COMPLETE", 16384, 8.02),
)  # number, state, chunk (0: the config's), goodput


def fake_study(spec, db, jobs=1, on_progress=None, stop_requested=None) -> TuneOutcome:
    """Stands in for run_study: stores four fixed trials of QWEN (chunks and goodputs above) and reports them."""
    resolved = QWEN.resolve()
    trials = [
        (n, state, resolved.replace(chunk=chunk) if chunk else resolved, value)
        for n, state, chunk, value in FAKE_TRIALS
    ]
    with RunStore.open(db) as store:
        store.save_study(
            spec.study,
            scenario=spec.scenario,
            objective=spec.objective.name,
            slo={},
            settings=spec.settings(),
            storage=spec.storage,
        )
        for number, state, config, value in trials:
            metrics = {"goodput_rps": value, "attainment": 0.9, "ttft_p90_s": 1.8, "tpot_p90_s": 0.12} if value else {}
            store.save_trial(
                spec.study,
                number,
                state=state,
                params={"chunk": config.scheduling.chunk},
                config=config.to_dict(),
                metrics=metrics,
                objective=value,
                duration_s=1.0,
            )
    on_progress(Progress(4, spec.trials, 10.7, 1, 0))
    summary = {n: TrialSummary(n, c.to_dict(), {}, v) for n, _, c, v in trials}
    return TuneOutcome(spec.study, GOODPUT, 4, summary[1], summary[0], None, None, False)
