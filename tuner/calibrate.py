"""Calibrate a hardware profile against a live server: plan runs, measure them, fit constants, score the rest.

The plan is a small grid of synthetic workloads: prompt and output lengths
around set medians, one request at a time, a closed loop at the server's
concurrency, and Poisson arrivals at a share of the throughput that closed
loop measured. It is scaled to the config, lengths to one request's share of
the KV cache (kv_capacity / max_running) and concurrency to max_running (at
most 8), so the same plan serves a tiny model on a CPU and a large one on a
GPU. The held-out runs differ from the fitted ones in lengths and in load,
not only in seeds. Every run is measured in several short passes, one pass
of the whole plan after another, each with seeds of its own (new prompts,
which no prompt cache has seen during the calibration). A run's P50 TTFT and
P50 TPOT are over the requests of all its passes, which spread it over the
whole calibration: a host whose speed drifts, or a burst of load on it, then
meets every run alike rather than a few runs that happened to be measured
then.

The fit runs the simulator on exactly the requests each live run sent (the
same scenario, seed and rate, so the same lengths and arrival times) with
candidate constants, and minimises the log ratios of simulated to measured
P50 TTFT and P50 TPOT of the fitted runs: scipy.optimize.least_squares
(trust region reflective, soft L1 loss) within each constant's bounds, in
log space from the starting profile's values. The starting profile's other constants stay
as they are. Nothing here reads a model, engine or scenario name.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

import numpy as np

from ..backends import (
    Backend,
    ConfigError,
    HardwareProfile,
    RequestRecord,
    ResolvedConfig,
    RunResult,
    ServerError,
    open_backend,
)
from ..errors import InputError
from ..scenarios import ClosedLoop, LogNormal, Poisson, Scenario

MAX_CONCURRENCY = 8  # the closed loop's concurrency: max_running, at most this
PASSES = 6  # measurements of every run, pass after pass, a few requests each
QUICK_PASSES = 2
PROFILED_PASS = 99  # the seeds of the profiled pass: a pass number no timed pass reaches
LONGEST_OUTPUT = 128  # median output tokens of the plan's longest answers
SPREAD = 0.3  # lengths are lognormal around their median with this sigma, clipped to half and 1.5 times it
SHORTEST_PROMPT = 8
DIFF_STEP = 0.01  # finite differences of 1% in each constant
TOLERANCE = 1e-4  # stop when a step changes the constants, or the sum of squares, by less (relative)
ROBUST_SCALE = 0.25  # residuals (log ratios) beyond about this count linearly, not squared (soft L1 loss)
MAX_EVALUATIONS = 300  # simulations of the fitted runs, the Jacobian's included
FREE = math.log(1e3)  # a constant the runs pin no better than within a factor 1000 is free


class CalibrationError(InputError):
    """The calibration cannot go on with what it was given; one line naming what is missing.

    A server that fails the measurement (serves nothing, or no latency to fit) raises `ServerError`.
    """


@dataclass(frozen=True)
class Constant:
    """A hardware constant the calibration fits, its bounds, and its start when the profile's value is outside them."""

    name: str
    low: float
    high: float
    fallback: float
    meaning: str


FITTED = (
    Constant("step_overhead_ms", 1e-3, 1e3, 1.0, "host time per scheduler step"),
    Constant("request_overhead_ms", 1e-3, 1e4, 1.0, "host time from a request's arrival to its scheduling"),
    Constant("matmul_efficiency", 1e-6, 1.0, 0.1, "share of peak FLOPs the linear layers reach"),
    Constant("attention_efficiency", 1e-6, 1.0, 0.1, "share of peak FLOPs a prefill chunk's attention reaches"),
    Constant("attention_half_tokens", 1e-2, 1e4, 1.0, "query rows at which attention runs at half that"),
)
POOL_SCAN = Constant(
    "kv_pool_scan_ns", 1e-4, 1e3, 1.0, "time per query row and layer per KV token held in a pool all sequences share"
)


PIPELINE = (
    Constant("stage_overhead_ms", 1e-3, 1e3, 0.1, "host time of each rank per micro-batch outside its layers"),
    Constant("kernel_launch_us", 1e-3, 1e4, 1.0, "host time per operation a rank launches, in every layer it holds"),
    Constant("p2p_latency_us", 1e-2, 1e6, 10.0, "fixed time of one handoff of activations between pipeline stages"),
    Constant("p2p_bandwidth_gbs", 1e-4, 1e3, 1.0, "rate of that handoff per byte of activations"),
)


def constants_to_fit(start: HardwareProfile, *, shared_pool: bool, pipeline: bool = False) -> tuple[Constant, ...]:
    """FITTED; POOL_SCAN where the server's attention masks a KV pool every sequence shares (the engine says so,
    `shared_pool`, or the starting profile already gives the scan a time); PIPELINE where a fitted config has
    more than one pipeline stage, whose runs then time each rank's own host time and the handoffs."""
    pool = (POOL_SCAN,) if shared_pool or start.kv_pool_scan_ns > 0 else ()
    return (*FITTED, *pool, *(PIPELINE if pipeline else ()))


@dataclass(frozen=True)
class Point:
    """One planned workload: median lengths; a closed loop, or Poisson at `load` x the `reference` run's throughput."""

    name: str
    prompt: int
    output: int
    requests: int
    concurrency: int | None = None
    load: float | None = None
    reference: str | None = None
    held_out: bool = False

    def scenario(self, rate: float | None) -> Scenario:
        """The workload as a scenario; open-loop points need the rate their reference gave.

        Lengths vary around the point's (lognormal, clipped): requests of equal
        lengths in a closed loop fall into lockstep, and a P50 taken between two
        phases jumps from one to the other at the slightest change.
        """
        arrivals = ClosedLoop(self.concurrency) if self.concurrency else Poisson()
        how = (
            f"{self.concurrency} at a time"
            if self.concurrency
            else f"Poisson at {self.load:g}x {self.reference}'s rate"
        )
        return Scenario(
            name=f"calibrate {self.name}",
            description=f"~{self.prompt}-token prompts, ~{self.output}-token answers, {how}",
            source="pipedeck calibrate's plan",
            assumptions=f"lengths lognormal around their medians (sigma {SPREAD}, clipped to 0.5-1.5x), scaled to "
            "the config's KV share per request",
            prompt=_around(self.prompt),
            output=_around(self.output),
            arrivals=arrivals,
            num_requests=self.requests,
            rate=rate,
        )


def _around(median: int) -> LogNormal:
    """Lengths lognormal around `median`, from half to one and a half times it."""
    return LogNormal(median, SPREAD, min=max(1, median // 2), max=median * 3 // 2)


class Variant(NamedTuple):
    """A config the calibration measures: the calibrated one (label ""), or one with a few knobs changed, fitted
    on too or only scored (`held_out`)."""

    label: str
    config: ResolvedConfig
    held_out: bool


def plan(config: ResolvedConfig, *, variant: str = "", held_out: bool = False) -> tuple[Point, ...]:
    """The calibration's runs for `config`, in the order they are measured: of a variant of the calibrated config
    its runs are named after it (`"<variant> <run>"`), and all of them held out with `held_out`."""
    points = _plan(config)
    if not variant and not held_out:
        return points
    return tuple(
        replace(
            p,
            name=f"{variant} {p.name}".strip(),
            reference=f"{variant} {p.reference}".strip() if p.reference else None,
            held_out=p.held_out or held_out,
        )
        for p in points
    )


def _plan(config: ResolvedConfig) -> tuple[Point, ...]:
    share = config.memory.kv_capacity // config.scheduling.max_running
    room = (share - LONGEST_OUTPUT * 3 // 2) * 2 // 3  # the longest prompt and answer drawn still fit
    if room < 8 * SHORTEST_PROMPT:
        raise CalibrationError(
            f"kv_capacity: calibrate needs at least {12 * SHORTEST_PROMPT + LONGEST_OUTPUT * 3 // 2} tokens of KV "
            f"cache per running request (kv_capacity / max_running), got {share}"
        )
    top = min(config.scheduling.max_running, MAX_CONCURRENCY)
    alone, loop, open_loop = 4, max(6, 3 * top), 8  # requests per pass

    def prompt(share_of_room: float) -> int:
        return max(SHORTEST_PROMPT, int(room * share_of_room))

    def closed(p: int, o: int, c: int, held_out: bool = False) -> Point:
        return Point(f"p{p}-o{o}-c{c}", p, o, alone if c == 1 else loop, concurrency=c, held_out=held_out)

    def poisson(reference: Point, load: float) -> Point:
        return Point(
            f"p{reference.prompt}-o{reference.output}-x{load:g}",
            reference.prompt,
            reference.output,
            open_loop,
            load=load,
            reference=reference.name,
            held_out=reference.held_out,
        )

    busy_fit = closed(prompt(1 / 6), LONGEST_OUTPUT, top)
    busy_held = closed(prompt(1 / 4), 96, top, held_out=True)
    # Fitted and held-out runs alternate, so that a change of load on the host meets both alike.
    return (
        closed(prompt(1 / 32), LONGEST_OUTPUT, 1),
        closed(prompt(1 / 2), 48, 1, held_out=True),
        closed(prompt(1 / 3), 64, 1),
        busy_held,
        busy_fit,
        poisson(busy_held, 0.5),
        closed(prompt(9 / 10), 32, 1),
        closed(prompt(1), 64, top, held_out=True),
        closed(prompt(2 / 3), 32, top),
        poisson(busy_fit, 0.3),
    )


@dataclass
class Measured:
    """A planned run as measured on `config`: its rate, each pass's seed and result, and the pass profiled for its
    per-rank timeline (pipelines on an engine with a profiler), kept out of the latencies."""

    point: Point
    config: ResolvedConfig
    rate: float | None = None
    passes: list[tuple[int, RunResult]] = field(default_factory=list)
    profiled: tuple[int, RunResult] | None = None

    @property
    def records(self) -> list[RequestRecord]:
        """The served requests of every pass."""
        return [record for _, result in self.passes for record in result.records]

    @property
    def failed(self) -> int:
        """Requests that were sent or due but not served."""
        return sum(self.point.requests - len(result.records) for _, result in self.passes)

    def throughput(self) -> float:
        """Requests served per second in the first pass."""
        result = self.passes[0][1]
        return len(result.records) / result.makespan_s

    def latency(self) -> tuple[float, float]:
        """P50 TTFT and P50 TPOT (seconds) of the requests of all passes."""
        return p50s(self.records)

    def spread(self) -> tuple[float, float]:
        """Run-to-run spread of P50 TTFT and of P50 TPOT: half the range of the passes' own P50s, relative to the
        P50 over all of them (0 with one pass)."""
        ttft, tpot = self.latency()
        each = [p50s(result.records) for _, result in self.passes if result.records]
        return (
            (max(t for t, _ in each) - min(t for t, _ in each)) / 2 / ttft if ttft else 0.0,
            (max(t for _, t in each) - min(t for _, t in each)) / 2 / tpot if tpot else 0.0,
        )

    def bubble(self) -> float | None:
        """The measured bubble share of the profiled pass (None without one)."""
        return None if self.profiled is None else bubble_share(self.profiled[1])


def bubble_share(result: RunResult) -> float | None:
    """The share of the ranks' busy time spent waiting on another rank (the bubble): bubble / (compute + bubble +
    exposed communication), averaged over ranks; None for a run without a per-rank timeline.

    Not the summary's `bubble_ratio` (bubble / makespan), which `show` and `compare` print: a run's idle time,
    and with it that ratio, follows its arrivals, while this share follows the pipeline alone, which is what a
    calibration scores.
    """
    if not result.ranks:
        return None
    split = result.breakdown()
    busy = split["compute"] + split["bubble"] + split["exposed_comm"]
    return split["bubble"] / busy if busy > 0 else None


def p50s(records: Sequence[RequestRecord]) -> tuple[float, float]:
    """P50 TTFT and P50 TPOT (seconds) of the records; the TPOT over those that have one (0 if none does)."""
    tpots = [t for r in records if (t := r.tpot_s) is not None]
    return (float(np.percentile([r.ttft_s for r in records], 50)), float(np.percentile(tpots, 50)) if tpots else 0.0)


def run_seed(seed: int, pass_no: int, index: int) -> int:
    """The seed of run `index` in pass `pass_no`: its own in every pass and every run."""
    return seed * 10_000 + pass_no * 100 + index


def measure(
    backend: Backend,
    config: ResolvedConfig,
    points: Sequence[Point],
    passes: int = PASSES,
    seed: int = 0,
    on_run: Callable[[Measured, int, RunResult], None] = lambda *_: None,
) -> list[Measured]:
    """Run every point `passes` times on `backend`, pass after pass; `on_run` hears each run as it ends.

    Passes alternate direction through the plan, so that each run is measured
    early in one pass and late in the next, beside other runs each time. An
    open-loop point's rate is fixed in the first pass from its reference's
    throughput, which the plan measures before it. A run that serves no
    request is a CalibrationError.
    """
    measured = {point.name: Measured(point, config) for point in points}
    for pass_no in range(passes):
        order = list(enumerate(points))
        for index, point in order if pass_no % 2 == 0 else reversed(order):
            runs = measured[point.name]
            if point.load is not None and not runs.passes:
                assert point.reference is not None  # an open-loop point is planned against its reference
                runs.rate = point.load * measured[point.reference].throughput()
            run = run_seed(seed, pass_no, index)
            result = backend.run(point.scenario(runs.rate), config, rate=runs.rate, seed=run, timeline=False)
            if not result.records:
                first = result.live.failed()[0].error if result.live and result.live.failed() else "none served"
                raise ServerError(f"endpoint: run {point.name} (seed {run}) served no request ({first})")
            runs.passes.append((run, result))
            on_run(runs, pass_no, result)
    return list(measured.values())


def profile(
    backend: Backend,
    measured: Sequence[Measured],
    seed: int = 0,
    on_run: Callable[[Measured, RunResult], None] = lambda *_: None,
) -> None:
    """Run each of the `measured` runs once more on `backend`, a live backend that profiles every run, and keep
    that pass (its per-rank timeline) apart from the timed ones: the profiler slows the steps it records."""
    for index, runs in enumerate(measured):
        run = run_seed(seed, PROFILED_PASS, index)
        result = backend.run(runs.point.scenario(runs.rate), runs.config, rate=runs.rate, seed=run, timeline=False)
        if not result.ranks:
            raise ServerError(f"endpoint: the profiled run {runs.point.name} (seed {run}) has no per-rank timeline")
        runs.profiled = (run, result)
        on_run(runs, result)


def profiled_points(points: Sequence[Point]) -> list[Point]:
    """The runs a pipeline's calibration profiles: those that keep the most requests in flight at once."""
    top = max((p.concurrency or 0) for p in points)
    return [p for p in points if top > 1 and p.concurrency == top]


class Row(NamedTuple):
    """One planned run: measured and simulated P50 TTFT and TPOT (seconds) over the requests of all its passes,
    their run-to-run spreads, and the bubble shares of its profiled pass (None: not profiled)."""

    point: Point
    rate: float | None
    served: int
    failed: int
    ttft: float
    sim_ttft: float
    tpot: float
    sim_tpot: float
    ttft_spread: float
    tpot_spread: float
    bubble: float | None
    sim_bubble: float | None

    @property
    def bubble_error(self) -> float | None:
        if self.bubble is None or self.sim_bubble is None or self.bubble <= 0:
            return None
        return self.sim_bubble / self.bubble - 1

    @property
    def ttft_error(self) -> float:
        return self.sim_ttft / self.ttft - 1

    @property
    def tpot_error(self) -> float:
        return self.sim_tpot / self.tpot - 1


@dataclass(frozen=True)
class Fit:
    """The calibrated constants, how well the runs pin each, and every run's errors with them."""

    start: HardwareProfile
    hardware: HardwareProfile  # the starting profile with the fitted values (sources unchanged)
    spread: dict[str, float]  # one-sigma factor of each fitted constant (true value within it either way); inf: free
    at_bound: dict[str, str]  # constants the fit left at a bound: "lower" or "upper"
    rows: list[Row]
    evaluations: int
    message: str

    def worst(self, held_out: bool) -> tuple[float, float]:
        """The largest |error| of P50 TTFT and of P50 TPOT over the held-out (or the fitted) runs."""
        rows = [r for r in self.rows if r.point.held_out == held_out]
        return max(abs(r.ttft_error) for r in rows), max(abs(r.tpot_error) for r in rows)

    def worst_bubble(self, held_out: bool) -> float | None:
        """The largest |error| of the bubble share over the held-out (or fitted) runs profiled; None if none was."""
        errors = [abs(e) for r in self.rows if r.point.held_out == held_out and (e := r.bubble_error) is not None]
        return max(errors) if errors else None


def simulate(measured: Sequence[Measured], hardware: HardwareProfile) -> list[tuple[float, float, float | None]]:
    """P50 TTFT and TPOT of each run simulated on `hardware` (its own config otherwise): the same requests, arrivals
    and passes; and the bubble share of its profiled pass simulated (None where none was profiled)."""
    out = []
    with open_backend("sim") as sim:
        for runs in measured:
            # The fitted constants enter none of resolve()'s checks (memory, KV capacity), so the config stays valid.
            resolved = replace(runs.config, hardware_profile=hardware)
            scenario = runs.point.scenario(runs.rate)
            ttft, tpot = p50s(
                [
                    r
                    for run, _ in runs.passes
                    for r in sim.run(scenario, resolved, rate=runs.rate, seed=run, timeline=False).records
                ]
            )
            bubble = None
            if runs.profiled is not None:
                profiled = sim.run(scenario, resolved, rate=runs.rate, seed=runs.profiled[0], timeline=False)
                bubble = bubble_share(profiled)  # the simulator splits each rank's time without spans
            out.append((ttft, tpot, bubble))
    return out


def fit(
    measured: Sequence[Measured],
    start: HardwareProfile,
    constants: Sequence[Constant] = FITTED,
    max_evaluations: int = MAX_EVALUATIONS,
    on_evaluation: Callable[[int], None] = lambda _: None,
) -> Fit:
    """Fit `constants` of `start` to the fitted runs; score every run with the result.

    The residuals are the log ratios of simulated to measured P50 TTFT and P50
    TPOT of each fitted run, and of its bubble share where it was profiled: a
    pipeline's measured timeline tells waiting on another rank from computing,
    which its latencies alone do not.
    """
    from scipy.optimize import least_squares

    fitted = [m for m in measured if not m.point.held_out]
    latencies = [m.latency() for m in fitted]
    for m, (ttft, tpot) in zip(fitted, latencies):
        if min(ttft, tpot) <= 0:
            raise ServerError(
                f"endpoint: run {m.point.name} has a P50 TTFT or TPOT of 0: its tokens reached "
                "the client all at once, so there is no latency to fit"
            )
    bubbles = [m.bubble() for m in fitted]
    targets = np.log([*np.ravel(latencies), *(b for b in bubbles if b)])
    origin = np.array([_start_value(start, c) for c in constants])
    low = np.log([c.low for c in constants] / origin)
    high = np.log([c.high for c in constants] / origin)
    evaluations = 0

    def profile(x: np.ndarray) -> HardwareProfile:
        fitted: dict[str, Any] = {c.name: float(v) for c, v in zip(constants, origin * np.exp(x))}
        return replace(start, **fitted)

    def residuals(x: np.ndarray) -> np.ndarray:
        nonlocal evaluations
        evaluations += 1
        on_evaluation(evaluations)
        try:
            simulated = simulate(fitted, profile(x))
        except ConfigError:  # constants the config cannot run with (a request that can never fit, say)
            return np.full(targets.shape, 10.0)
        shares = [sim or 1e-6 for (_, _, sim), b in zip(simulated, bubbles) if b]
        return np.log([*(v for ttft, tpot, _ in simulated for v in (ttft, tpot)), *shares]) - targets

    # Soft L1: a run the host's load threw far off (a client starved until every token of an answer came at
    # once) pulls the constants no harder than one about ROBUST_SCALE off. max_nfev counts steps, not the
    # len(constants) evaluations of each Jacobian.
    result = least_squares(
        residuals,
        np.zeros(len(constants)),
        bounds=(low, high),
        method="trf",
        loss="soft_l1",
        f_scale=ROBUST_SCALE,
        diff_step=DIFF_STEP,
        ftol=TOLERANCE,
        xtol=TOLERANCE,
        max_nfev=max(1, max_evaluations // (len(constants) + 1)),
    )
    hardware = profile(result.x)
    names = [c.name for c in constants]
    inside = result.active_mask == 0  # a constant at a bound is held there: it takes no part in the spread
    spread = dict.fromkeys(names, math.nan)
    spread.update(zip((n for n, i in zip(names, inside) if i), _spread(result.jac[:, inside], result.fun)))
    at_bound = {n: "lower" if side < 0 else "upper" for n, side in zip(names, result.active_mask) if side}
    rows = [
        Row(m.point, m.rate, len(m.records), m.failed, ttft, sim_ttft, tpot, sim_tpot, *m.spread(), m.bubble(), sim)
        for m, (sim_ttft, sim_tpot, sim) in zip(measured, simulate(measured, hardware))
        for ttft, tpot in [m.latency()]
    ]
    return Fit(start, hardware, spread, at_bound, rows, evaluations, result.message)


def _start_value(profile: HardwareProfile, constant: Constant) -> float:
    """The profile's value when it lies within the bounds, else the constant's fallback."""
    value = float(getattr(profile, constant.name))
    return value if constant.low <= value <= constant.high else constant.fallback


def _spread(jac: np.ndarray, fun: np.ndarray) -> list[float]:
    """One-sigma factors of the fitted constants from the Jacobian in log space; inf where the runs leave one free."""
    m, n = jac.shape
    if n == 0:
        return []
    variance = float(fun @ fun) / max(m - n, 1)
    _, singular, vt = np.linalg.svd(jac, full_matrices=False)
    pinned = singular > singular[0] * 1e-6 if singular.size and singular[0] > 0 else np.zeros(n, bool)
    free = np.any(np.abs(vt[~pinned]) > 1e-3, axis=0) if (~pinned).any() else np.zeros(n, bool)
    sigma = np.sqrt(variance * np.sum((vt[pinned] / singular[pinned, None]) ** 2, axis=0))
    return [math.inf if f or s > FREE else math.exp(s) for f, s in zip(free, sigma)]
