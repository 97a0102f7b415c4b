"""Every published figure of calibration.md against the simulator, and a leave-one-out check of the fit.

Table: each figure of calibration.md (section A: DeepSeek-V3.1, 16 x Ascend
910C, TP8 + PP2; section B: Qwen2.5-32B and -14B, 4 x A100 40GB PCIe,
SGLang semantics) beside what the simulator computes now, with the error
(relative, or in percentage points for figures that are percentages) and,
for ranges and orderings, pass or fail. Measured as the calibration tests
measure them: the 512K breakdown against the last rank (the paper's terms
sum to the TTFT on one timeline; the mean over ranks is in the note), TTFT
comparisons with each scheme at its best chunk of 8K/16K/24K/32K, goodputs
searched to 1% on seeds 0, 1, 2 and averaged, the best static PP4 chunk over
128..1024 tokens (128..2048 for Qwen2.5-14B, so that the paper's 1024 is not
the edge of the grid). Choices where calibration.md gives no setting: the
128K bubble share is CPP at chunk 16K (the paper's 128K step-count setting),
last rank; "close to linear" is R^2 >= 0.95 of a line through the entry
rank's per-chunk stage time against chunk index (CPP, 512K, chunk 24K, full
chunks only); the 14B figure runs PP4 like the 32B static chunk; the ALP
predictor's MAPE is read from the controller (`PredictiveChunkController.mape`,
the a-priori error of every step) in a run at its goodput rate on each
seed, and "without attention features" is the same predictor with only the
eager feature, an RLS fed the same steps beside the controller (it scores
the controller's trajectory; the controller's choices are unchanged).

Leave-one-out: the constants of a hardware profile whose [sources] entry
says "fitted to calibration.md <section>" are refitted without one figure
at a time (each figure the section's fit uses), then the simulator's error
on the held-out figure is reported, beside its error with the current
constants and with all figures refitted. Refits override the profile
through a hardware TOML written to a temporary folder (the packaged file
with the refitted values), never backends/profiles/. scipy.optimize
least_squares (trf) in log space, bounds of a factor 2 around the current
values (fractions stay <= 1), residuals = error / tolerance (totals 10%,
breakdown terms 25%, step counts 20%, ranges 1 point outside, goodputs
20%), plus a weak prior (0.1 tolerance units per factor 2) pulling each
constant to its current value, which makes the underdetermined refits
(8 constants, 2 figures in section B) pick the smallest change.

Budget: under 15 minutes on 2 cores with --jobs 2 (measured in two runs,
with other jobs on the machine: 376 and 542 s wall, 735 and 623 s CPU, 144
goodput searches; section B dominates, one goodput search is 10-12
simulations, 2-11 s):
- section A refits use the whole figures (about 30 cheap simulations per
  evaluation, 0.1 s), finite differences of 5%, at most 20 evaluations per
  fold (each with its 8-column Jacobian); the 14 folds run on the pool;
- section B refits measure each goodput on seed 0 only and the static PP4
  goodput at the chunk that is best with the current constants; the
  Jacobian is estimated once at the current constants (forward differences
  of 15%, backwards where a fraction would pass 1; shared by every fold) and
  held fixed (a chord method), at most 4 evaluations per fold, the 4 folds
  in threads sharing the pool; the held-out figure (and every figure of the
  full refit) is then measured with the table's full protocol (3 seeds,
  chunk grid, 1%);
- only the B constants are refitted for the B figures, the A constants for
  A; the figures no fit uses (step ratios, orderings, bubble share,
  linearity, 14B chunk, MAPE) are not refitted against.

    python benchmarks/fidelity.py [--jobs 2] [--only A|B] [--skip-loo]
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import re
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from importlib import resources

import numpy as np
from rich.console import Console
from rich.table import Table

from pipedeck.backends.config import SGLANG_MIXED_CHUNK, ResolvedConfig, ServingConfig
from pipedeck.backends.errors import ConfigError
from pipedeck.backends.policies import fastpp_alp
from pipedeck.backends.policies.modes import MODES
from pipedeck.backends.policies.rls import RecursiveLeastSquares
from pipedeck.backends.profiles import load_hardware
from pipedeck.backends.profiles.schema import HardwareProfile
from pipedeck.backends.sim import SimBackend
from pipedeck.scenarios import load_scenario
from pipedeck.tuner.objective import Evaluator
from pipedeck.tuner.slo import parse_slo
from pipedeck.tuner.spec import TuneSpec

K = 1024
HARDWARE = {"A": "ascend-910c", "B": "a100-40g-pcie"}
SWEEP_CHUNKS_K = (8, 16, 24, 32)  # the VPP paper's chunk sweep, best per scheme
GAP_LENGTHS = ("64k", "128k", "256k", "512k")
SEEDS = (0, 1, 2)  # section B: mean goodput over these Poisson traces, as tests/backends/sim/test_calibration_gpu.py
STATIC_CHUNKS = (128, 256, 384, 512, 768, 1024)
STATIC_CHUNKS_14B = (*STATIC_CHUNKS, 1536, 2048)
SLO = "ttft=2s,tpot=200ms"
PRECISION = 0.01
LINEAR_R2 = 0.95  # "close to linear"
FACTOR_BOUND = 2.0  # refit bounds: current value / 2 .. x 2
PRIOR = 0.1  # tolerance units per factor FACTOR_BOUND of change from the current value
A_DIFF_STEP, A_MAX_NFEV = 0.05, 20
B_DIFF_STEP, B_MAX_NFEV = math.log(1.15), 4


# -- the figures ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Figure:
    """One published figure; `lo`/`hi` bound what passes (a range or an ordering)."""

    key: str
    section: str
    label: str
    paper: float | None  # None: the paper gives no number, only the check
    unit: str  # "s", "steps", "x", "%", "req/s", "tokens", "R2"
    error: str  # "rel" (value / paper - 1), "pp" (points), "range" (points outside lo..hi), "none"
    tol: float = 0.0  # a fit's tolerance for this figure (fraction for rel, points for pp / range)
    lo: float | None = None
    hi: float | None = None
    paper_text: str | None = None
    signed: bool = False  # a difference: printed with its sign


def _a_breakdown() -> list[Figure]:
    paper = {
        "cpp": {"compute": 252.59, "bubble": 38.64, "exposed_comm": 16.67, "total": 307.90},
        "dcpp": {"compute": 279.07, "bubble": 20.47, "exposed_comm": 22.68, "total": 322.22},
    }
    return [
        Figure(
            f"A.{mode}.{term}",
            "A",
            f"512K/24K {mode.upper()} {term.replace('_', ' ')} (last rank)",
            value,
            "s",
            "rel",
            0.10 if term == "total" else 0.25,
        )
        for mode, terms in paper.items()
        for term, value in terms.items()
    ]


FIGURES: list[Figure] = [
    *_a_breakdown(),
    Figure("A.cpp.steps_512k", "A", "512K/24K CPP scheduler steps (modelling notes)", 22, "steps", "rel", 0.20),
    Figure("A.dcpp.steps_512k", "A", "512K/24K DCPP scheduler steps (modelling notes)", 97, "steps", "rel", 0.20),
    Figure("A.steps_ratio_512k", "A", "512K/24K scheduler invocations DCPP / CPP", 4.4, "x", "rel", 0.20),
    Figure("A.cpp.steps_128k", "A", "128K/16K CPP scheduler steps", 8, "steps", "rel", 0.20),
    Figure("A.dcpp.steps_128k", "A", "128K/16K DCPP scheduler steps", 17, "steps", "rel", 0.20),
    *[
        Figure(
            f"A.gap_{n}",
            "A",
            f"{n.upper()} TTFT DCPP vs CPP, best chunks",
            None,
            "%",
            "range",
            1.0,
            -3.6,
            -1.6,
            "-3.6..-1.6%",
            signed=True,
        )
        for n in ("64k", "128k", "256k")
    ],
    Figure("A.gap_512k", "A", "512K TTFT DCPP vs CPP, best chunks", 4.6, "%", "pp", 1.0, lo=0.0, signed=True),
    Figure("A.tput_512k", "A", "512K throughput DCPP vs CPP, best chunks", -4.4, "%", "pp", 1.0, hi=0.0, signed=True),
    Figure(
        "A.bubble_128k",
        "A",
        "128K/16K CPP bubble share of TTFT (last rank)",
        None,
        "%",
        "none",
        lo=15.0,
        paper_text=">= 15%",
    ),
    Figure(
        "A.linearity",
        "A",
        "per-chunk stage time vs chunk index, R^2 of a line",
        None,
        "R2",
        "none",
        lo=LINEAR_R2,
        paper_text="close to linear",
    ),
    Figure("B.tp4", "B", "32B TP4 chunk 2048 goodput", 3.48, "req/s", "rel", 0.20),
    Figure("B.pp4_static", "B", "32B PP4 best static chunk goodput", 8.28, "req/s", "rel", 0.20),
    Figure("B.pp4_alp", "B", "32B PP4 fastpp-alp goodput", 8.47, "req/s", "rel", 0.20),
    Figure("B.pp_tp_ratio", "B", "32B PP4 best static / TP4 goodput", 8.28 / 3.48, "x", "rel", lo=1.0),
    Figure(
        "B.alp_margin",
        "B",
        "32B PP4 fastpp-alp vs best static goodput",
        (8.47 / 8.28 - 1) * 100,
        "%",
        "pp",
        lo=0.0,
        signed=True,
    ),
    Figure("B.best_chunk_14b", "B", "14B PP4 best static chunk (azure-conv)", 1024, "tokens", "rel"),
    Figure("B.mape_attention", "B", "ALP predictor MAPE, with attention features", 3.48, "%", "pp"),
    Figure("B.mape_no_attention", "B", "ALP predictor MAPE, without attention features", 15.85, "%", "pp"),
    Figure("B.mape_cut", "B", "MAPE cut by the attention features", 15.85 - 3.48, "pt", "pp", lo=0.0),
]
BY_KEY = {f.key: f for f in FIGURES}
# The figures each section's fit uses (the constants' [sources] name them): totals and last-rank breakdowns,
# DCPP step counts at 512K and 128K, DCPP faster from 64K to 256K; B: the three goodputs.
FIT_FIGURES = {
    "A": [
        *(f.key for f in _a_breakdown()),
        "A.dcpp.steps_512k",
        "A.dcpp.steps_128k",
        "A.gap_64k",
        "A.gap_128k",
        "A.gap_256k",
    ],
    "B": ["B.tp4", "B.pp4_static", "B.pp4_alp"],
}


@dataclass(frozen=True)
class Measured:
    value: float | None
    note: str = ""


def error_of(figure: Figure, value: float) -> float | None:
    """The figure's error: a fraction (rel) or points (pp, range); None when it has none."""
    if figure.error == "rel":
        return value / figure.paper - 1
    if figure.error == "pp":
        return value - figure.paper
    if figure.error == "range":
        return max(0.0, value - figure.hi) - max(0.0, figure.lo - value)
    return None


def check_of(figure: Figure, value: float) -> str:
    if figure.lo is None and figure.hi is None:
        return ""
    ok = (figure.lo is None or value >= figure.lo) and (figure.hi is None or value <= figure.hi)
    return "pass" if ok else "FAIL"


def fmt_value(figure: Figure, value: float | None) -> str:
    if value is None:
        return "not measured"
    if figure.unit == "s":
        return f"{value:.2f}"
    if figure.unit in ("steps", "tokens"):
        return f"{value:.0f}"
    if figure.unit == "x":
        return f"{value:.2f}x"
    if figure.unit == "%":
        return f"{value:+.2f}%" if figure.signed else f"{value:.2f}%"
    if figure.unit == "pt":
        return f"{value:.2f} pt"
    if figure.unit == "R2":
        return f"{value:.5f}"
    return f"{value:.2f}"


def fmt_paper(figure: Figure) -> str:
    return figure.paper_text or fmt_value(figure, figure.paper)


def fmt_error(figure: Figure, value: float | None) -> str:
    err = None if value is None else error_of(figure, value)
    if err is None:
        return ""
    if figure.error == "range" and err == 0:
        return "in range"
    return f"{err:+.1%}" if figure.error == "rel" else f"{err:+.2f} pt"


@dataclass(frozen=True)
class Row:
    section: str
    key: str
    label: str
    paper: str
    pipedeck: str
    error: str
    check: str
    note: str


def build_rows(figures: Iterable[Figure], measured: dict[str, Measured]) -> list[Row]:
    """One row per figure, in order; a figure nobody measured says so."""
    rows = []
    for f in figures:
        m = measured.get(f.key, Measured(None, "no measurement"))
        check = "" if m.value is None else check_of(f, m.value)
        rows.append(
            Row(f.section, f.key, f.label, fmt_paper(f), fmt_value(f, m.value), fmt_error(f, m.value), check, m.note)
        )
    return rows


def render(rows: list[Row], title: str) -> Table:
    table = Table(title=title, title_justify="left", box=None, header_style="bold", pad_edge=False)
    for col, justify in (
        ("sec", "left"),
        ("figure", "left"),
        ("paper", "right"),
        ("pipedeck", "right"),
        ("error", "right"),
        ("check", "left"),
        ("note", "left"),
    ):
        table.add_column(col, justify=justify, no_wrap=col != "note")
    for r in rows:
        table.add_row(r.section, r.label, r.paper, r.pipedeck, r.error, r.check, r.note)
    return table


# -- hardware overrides ----------------------------------------------------------------------------------
def fitted_constants(hardware: str, section: str) -> list[str]:
    """The profile's constants whose [sources] entry says 'fitted to calibration.md <section>'."""
    pattern = re.compile(rf"fitted to calibration\.md {re.escape(section)}\b")
    return [name for name, text in load_hardware(hardware).sources.items() if pattern.search(text)]


def hardware_with(name: str, overrides: dict[str, float], folder: str) -> str:
    """A hardware TOML in `folder`: the packaged profile `name` with some values replaced; its path.

    Without overrides, the packaged name itself. The written file is loaded
    back and checked, so a profile format this cannot rewrite fails loudly.
    """
    if not overrides:
        return name
    text = resources.files("pipedeck.backends.profiles").joinpath("hardware", f"{name}.toml").read_text("utf-8")
    head, sep, tail = text.partition("\n[")  # top-level keys only, not the [sources] table
    types = {f.name: f.type for f in dataclasses.fields(HardwareProfile)}
    values = {k: round(v) if types[k] in (int, "int") else float(v) for k, v in overrides.items()}
    for key, value in values.items():
        head, n = re.subn(rf"(?m)^{re.escape(key)}\s*=.*$", f"{key} = {value!r}", head)
        if n != 1:
            raise ValueError(f"{name}.toml: cannot find a top-level {key!r} to override")
    digest = hashlib.sha1(json.dumps(sorted(values.items())).encode()).hexdigest()[:16]
    path = os.path.join(folder, f"{name}-{digest}.toml")
    if not os.path.exists(path):
        temporary = f"{path}.{os.getpid()}.{threading.get_ident()}"
        with open(temporary, "w", encoding="utf-8") as handle:
            handle.write(head + sep + tail)
        os.replace(temporary, path)
    loaded = load_hardware(path)
    wrong = {k: getattr(loaded, k) for k, v in values.items() if not math.isclose(getattr(loaded, k), v)}
    if wrong:
        raise ValueError(f"{path}: overrides did not take: {wrong}")
    return path


# -- section A --------------------------------------------------------------------------------------------
def long_run(mode: str, length: str, chunk_k: int, hardware: str, timeline: bool = False):
    config = ServingConfig.of(model="deepseek-v3.1", hardware=hardware, tp=8, pp=2, mode=mode, chunk=chunk_k * K)
    return SimBackend().run(load_scenario(f"long-{length}"), config, timeline=timeline)


def linearity(result) -> tuple[float, float, int]:
    """R^2 and slope (s per chunk) of a line through the entry rank's per-chunk stage time, full chunks only."""
    chunk = result.config["chunk"]
    prompt = result.records[0].prompt_tokens
    full = prompt // chunk
    spans = [
        s
        for s in result.spans
        if s.rank == 0 and s.stage == 0 and s.kind in ("prefill", "mixed") and 0 <= s.chunk < full
    ]
    x = np.array([s.chunk for s in spans], float)
    y = np.array([s.end - s.start for s in spans])
    slope, intercept = np.polyfit(x, y, 1)
    residual = y - (slope * x + intercept)
    r2 = 1 - float(residual @ residual) / float(((y - y.mean()) ** 2).sum())
    return r2, float(slope), len(spans)


def collect_a(hardware: str = HARDWARE["A"], keys: Iterable[str] | None = None) -> dict[str, Measured]:
    """Section A's figures (those in `keys`, default all) on `hardware` (a name or a TOML path); well under 1 s."""
    wanted = {f.key for f in FIGURES if f.section == "A"} if keys is None else set(keys)
    out: dict[str, Measured] = {}
    runs = {
        mode: long_run(mode, "512k", 24, hardware, timeline=mode == "cpp" and "A.linearity" in wanted)
        for mode in ("cpp", "dcpp")
    }
    for mode, result in runs.items():
        last = result.ranks[-1]
        mean = result.breakdown()
        terms = {"compute": last.compute, "bubble": last.bubble, "exposed_comm": last.exposed_comm}
        for term, value in terms.items():
            out[f"A.{mode}.{term}"] = Measured(value, f"mean rank {mean[term]:.2f}")
        out[f"A.{mode}.total"] = Measured(result.makespan_s, "TTFT (every rank)")
        out[f"A.{mode}.steps_512k"] = Measured(result.steps)
    out["A.steps_ratio_512k"] = Measured(
        runs["dcpp"].steps / runs["cpp"].steps, f"{runs['dcpp'].steps} / {runs['cpp'].steps}"
    )
    if "A.linearity" in wanted:
        r2, slope, n = linearity(runs["cpp"])
        out["A.linearity"] = Measured(
            r2, f"CPP 512K/24K, entry rank, {n} full chunks, slope {slope * 1e3:.0f} ms/chunk"
        )
    runs128 = {mode: long_run(mode, "128k", 16, hardware) for mode in ("cpp", "dcpp")}
    for mode, result in runs128.items():
        out[f"A.{mode}.steps_128k"] = Measured(result.steps)
    cpp128 = runs128["cpp"]
    share = cpp128.ranks[-1].bubble / cpp128.makespan_s * 100
    out["A.bubble_128k"] = Measured(share, f"mean rank {cpp128.breakdown()['bubble'] / cpp128.makespan_s:.1%}")
    for length in GAP_LENGTHS:
        if not wanted & {f"A.gap_{length}", f"A.tput_{length}"}:
            continue
        best = {}
        for mode in ("cpp", "dcpp"):
            best[mode] = min((long_run(mode, length, c, hardware).makespan_s, c) for c in SWEEP_CHUNKS_K)
        (cpp, cpp_chunk), (dcpp, dcpp_chunk) = best["cpp"], best["dcpp"]
        note = f"cpp {cpp:.2f} s @{cpp_chunk}K, dcpp {dcpp:.2f} s @{dcpp_chunk}K"
        out[f"A.gap_{length}"] = Measured((dcpp / cpp - 1) * 100, note)
        if length == "512k":
            out["A.tput_512k"] = Measured((cpp / dcpp - 1) * 100, "one request: throughput = prompt / TTFT")
    return {k: v for k, v in out.items() if k in wanted}


# -- section B --------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GoodputJob:
    """One goodput search: a config of SETTING on azure-conv, one seed."""

    model: str
    config: tuple[tuple[str, object], ...]
    seed: int
    hardware: str = HARDWARE["B"]
    precision: float = PRECISION
    mape: bool = False  # fastpp-alp: also rerun at the goodput rate and read the predictor's error

    def key(self) -> tuple:
        return (self.model, self.config, self.seed, self.hardware, self.precision)


def job(
    model: str,
    seed: int,
    hardware: str = HARDWARE["B"],
    precision: float = PRECISION,
    mape: bool = False,
    **config: object,
) -> GoodputJob:
    return GoodputJob(model, tuple(sorted(config.items())), seed, hardware, precision, mape)


class _NoAttentionPredictor:
    """ALP's stage-latency predictor without its attention features (chunk x prefix, chunk^2, decode context).

    The profiled linear part plus an RLS on the eager feature alone, fed the
    same steps as the controller and scored the same way (a-priori absolute
    percentage error of every step with a measured stage time).
    """

    def __init__(self, controller, forgetting: float):
        self.linear = controller.linear
        self.model = RecursiveLeastSquares(1, forgetting)
        self.ape, self.seen, self.steps = 0.0, 0, 0

    def observe(self, report) -> None:
        x = [1.0 if report.prefill_tokens else 0.0]
        linear = self.linear(report.prefill_tokens + report.decode_tokens)
        if report.stage_s > 0:
            predicted = linear + self.model.predict(x) / fastpp_alp.RESIDUAL_UNIT
            self.ape += abs(predicted - report.stage_s) / report.stage_s
            self.seen += 1
        self.model.update(x, (report.stage_s - linear) * fastpp_alp.RESIDUAL_UNIT)
        self.steps += 1

    @property
    def mape(self) -> float:
        return 100 * self.ape / self.seen if self.seen else math.nan


@contextmanager
def watching_alp():
    """Keep each fastpp-alp controller built meanwhile, with a no-attention predictor fed beside it."""
    spec = MODES["fastpp-alp"]
    built: list[tuple[object, _NoAttentionPredictor]] = []

    def make(env, inner=spec.chunk_policy):
        controller = inner(env)
        shadow = _NoAttentionPredictor(controller, env.fastpp.rls_forgetting)
        observe = controller.observe

        def both(report):
            shadow.observe(report)
            observe(report)

        controller.observe = both
        built.append((controller, shadow))
        return controller

    MODES["fastpp-alp"] = dataclasses.replace(spec, chunk_policy=make)
    try:
        yield built
    finally:
        MODES["fastpp-alp"] = spec


def run_goodput(j: GoodputJob) -> dict[str, float | str | None]:
    """Goodput (req/s) and the rate found; with `mape`, the ALP predictor's errors at that rate."""
    spec = TuneSpec(
        study="fidelity",
        storage="unused",
        scenario="azure-conv",
        model=j.model,
        hardware=j.hardware,
        devices=4,
        slo=parse_slo(SLO),
        precision=j.precision,
        seed=j.seed,
    )
    evaluator = Evaluator(spec)
    try:
        config = ServingConfig.of(model=j.model, hardware=j.hardware, **SGLANG_MIXED_CHUNK, **dict(j.config)).resolve()
        measured = evaluator.measure(config)
    except ConfigError as err:  # a refit's constants leave no room for the KV cache, say
        return {"goodput": 0.0, "rate": None, "why": str(err)}
    out: dict[str, float | str | None] = {"goodput": measured.value or 0.0, "rate": measured.rate}
    if j.mape:
        out.update(alp_errors(evaluator, config, measured.rate))
    return out


def alp_errors(evaluator: Evaluator, config: ResolvedConfig, rate: float | None) -> dict[str, float | str | None]:
    if not rate:
        return {"mape_attention": None, "mape_no_attention": None, "why": "no goodput rate to run at"}
    with watching_alp() as built:
        evaluator.run(config, rate)
    if len(built) != 1:
        return {"mape_attention": None, "mape_no_attention": None, "why": f"{len(built)} controllers built"}
    controller, shadow = built[0]
    steps = len(getattr(controller, "history", ())) - 1
    if not hasattr(controller, "mape") or shadow.steps == 0 or shadow.steps != steps:
        return {
            "mape_attention": None,
            "mape_no_attention": None,
            "why": "the controller exposes no mape or its observe() was not called",
        }
    return {"mape_attention": float(controller.mape), "mape_no_attention": shadow.mape, "steps": steps}


class Runner:
    """Runs goodput jobs on a pool, once each: the refits revisit points, and folds run in threads at once.

    A job that also reads the ALP predictor's errors answers the same job without them.
    """

    def __init__(self, pool: Executor):
        self.pool = pool
        self.futures: dict[tuple, tuple[Future, bool]] = {}
        self.lock = threading.Lock()

    @property
    def searches(self) -> int:
        return len(self.futures)

    def run(self, jobs: list[GoodputJob]) -> list[dict]:
        # longest first: ALP searches take about twice the static PP4 ones, TP4 a fifth
        order = sorted(jobs, key=lambda j: (dict(j.config).get("mode") != "fastpp-alp", dict(j.config)["tp"] > 1))
        with self.lock:
            for j in order:
                known = self.futures.get(j.key())
                if known is None or (j.mape and not known[1]):
                    self.futures[j.key()] = (self.pool.submit(run_goodput, j), j.mape)
            futures = [self.futures[j.key()][0] for j in jobs]
        return [f.result() for f in futures]


TP4 = dict(tp=4, pp=1, chunk=2048)
ALP = dict(tp=1, pp=4, chunk=2048, mode="fastpp-alp")


def b_jobs(
    hardware: str, seeds: tuple[int, ...], static_chunks: tuple[int, ...], keys: set[str], mape: bool
) -> dict[str, list[GoodputJob]]:
    """The goodput jobs behind the section-B figures in `keys` (grouped by what they measure)."""
    jobs: dict[str, list[GoodputJob]] = {}
    b32 = "qwen2.5-32b"
    if keys & {"B.tp4", "B.pp_tp_ratio"}:
        jobs["tp4"] = [job(b32, s, hardware, **TP4) for s in seeds]
    if keys & {"B.pp4_alp", "B.alp_margin", "B.mape_attention", "B.mape_no_attention", "B.mape_cut"}:
        jobs["alp"] = [job(b32, s, hardware, mape=mape, **ALP) for s in seeds]
    if keys & {"B.pp4_static", "B.pp_tp_ratio", "B.alp_margin"}:
        for c in static_chunks:
            jobs[f"static {c}"] = [job(b32, s, hardware, tp=1, pp=4, chunk=c) for s in seeds]
    if "B.best_chunk_14b" in keys:
        for c in STATIC_CHUNKS_14B:
            jobs[f"14b {c}"] = [job("qwen2.5-14b", s, hardware, tp=1, pp=4, chunk=c) for s in seeds]
    return jobs


def collect_b(
    runner: Runner,
    hardware: str = HARDWARE["B"],
    seeds: tuple[int, ...] = SEEDS,
    static_chunks: tuple[int, ...] = STATIC_CHUNKS,
    keys: Iterable[str] | None = None,
    mape: bool = True,
) -> dict[str, Measured]:
    """Section B's figures (those in `keys`, default all): mean goodputs over `seeds`."""
    keys = {f.key for f in FIGURES if f.section == "B"} if keys is None else set(keys)
    groups = b_jobs(hardware, seeds, static_chunks, keys, mape)
    flat = [j for js in groups.values() for j in js]
    results = dict(zip([j.key() for j in flat], runner.run(flat)))
    per_seed = {name: [results[j.key()]["goodput"] for j in js] for name, js in groups.items()}
    mean = {name: statistics.mean(v) for name, v in per_seed.items()}

    def seeds_note(name: str) -> str:
        return "seeds " + " / ".join(f"{v:.2f}" for v in per_seed[name]) if len(seeds) > 1 else f"seed {seeds[0]}"

    out: dict[str, Measured] = {}
    if "tp4" in mean:
        out["B.tp4"] = Measured(mean["tp4"], seeds_note("tp4"))
    if "alp" in mean:
        out["B.pp4_alp"] = Measured(mean["alp"], seeds_note("alp"))
    static = {int(n.split()[1]): v for n, v in mean.items() if n.startswith("static")}
    if static:
        best = max(static, key=static.get)
        out["B.pp4_static"] = Measured(
            static[best], f"chunk {best} of {min(static)}..{max(static)}; " + seeds_note(f"static {best}")
        )
        out["B.static_chunk"] = Measured(best)  # not a figure: the in-loop refits hold the static chunk here
        if "tp4" in mean:
            out["B.pp_tp_ratio"] = Measured(static[best] / mean["tp4"])
        if "alp" in mean:
            out["B.alp_margin"] = Measured(
                (mean["alp"] / static[best] - 1) * 100,
                "per seed "
                + " / ".join(f"{a / s - 1:+.1%}" for a, s in zip(per_seed["alp"], per_seed[f"static {best}"])),
            )
    c14 = {int(n.split()[1]): v for n, v in mean.items() if n.startswith("14b")}
    if c14:
        ranked = sorted(c14, key=c14.get, reverse=True)
        out["B.best_chunk_14b"] = Measured(
            ranked[0], ", ".join(f"{c}: {c14[c]:.2f}" for c in ranked[:3]) + " req/s (mean of seeds)"
        )
    if mape and "alp" in groups:
        errors = [results[j.key()] for j in groups["alp"]]
        if all(e.get("mape_attention") is not None for e in errors):
            att = [e["mape_attention"] for e in errors]
            no = [e["mape_no_attention"] for e in errors]
            steps = sum(e["steps"] for e in errors)
            out["B.mape_attention"] = Measured(
                statistics.mean(att),
                "a-priori, every step at the goodput rate; seeds "
                + " / ".join(f"{v:.3f}" for v in att)
                + f" ({steps} steps)",
            )
            out["B.mape_no_attention"] = Measured(
                statistics.mean(no), "same steps, eager feature only; seeds " + " / ".join(f"{v:.2f}" for v in no)
            )
            out["B.mape_cut"] = Measured(statistics.mean(no) - statistics.mean(att), "without minus with")
        else:
            why = next(e.get("why") for e in errors if e.get("mape_attention") is None)
            for key in ("B.mape_attention", "B.mape_no_attention", "B.mape_cut"):
                out[key] = Measured(None, f"not measured: {why}")
    return out


# -- leave-one-out ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Space:
    """The refitted constants of one profile, in log space around their current values."""

    hardware: str
    names: tuple[str, ...]
    current: tuple[float, ...]

    @classmethod
    def of(cls, section: str) -> Space:
        hardware = HARDWARE[section]
        names = tuple(fitted_constants(hardware, section))
        profile = load_hardware(hardware)
        return cls(hardware, names, tuple(float(getattr(profile, n)) for n in names))

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        span = math.log(FACTOR_BOUND)
        fractions = {"matmul_efficiency", "attention_efficiency", "memory_efficiency", "memory_utilization"}
        hi = [min(span, -math.log(v)) if n in fractions else span for n, v in zip(self.names, self.current)]
        return np.full(len(self.names), -span), np.maximum(np.array(hi), 1e-9)

    def values(self, x: np.ndarray) -> dict[str, float]:
        return {n: v * math.exp(xi) for n, v, xi in zip(self.names, self.current, x)}

    def path(self, x: np.ndarray, folder: str) -> str:
        x = np.asarray(x, float)
        return hardware_with(self.hardware, self.values(x) if np.any(x != 0) else {}, folder)


def residuals(keys: list[str], measured: dict[str, Measured]) -> np.ndarray:
    """Each figure's error over its tolerance (0 inside a range)."""
    out = []
    for key in keys:
        figure = BY_KEY[key]
        value = measured[key].value
        out.append(error_of(figure, value) / figure.tol if value is not None else 10.0)
    return np.array(out)


def prior(x: np.ndarray) -> np.ndarray:
    return PRIOR * x / math.log(FACTOR_BOUND)


def fit_a(space: Space, held_out: str | None, folder: str) -> dict:
    """Refit the section-A constants to its fit figures without `held_out`; the figures at the result."""
    from scipy.optimize import least_squares

    keys = [k for k in FIT_FIGURES["A"] if k != held_out]
    start = time.perf_counter()

    def fun(x: np.ndarray) -> np.ndarray:
        try:
            figures = residuals(keys, collect_a(space.path(x, folder), FIT_FIGURES["A"]))
        except ConfigError:  # constants the cluster cannot run with: as bad as a missing figure
            figures = np.full(len(keys), 10.0)
        return np.concatenate([figures, prior(x)])

    fit = least_squares(
        fun, np.zeros(len(space.names)), bounds=space.bounds(), method="trf", diff_step=A_DIFF_STEP, max_nfev=A_MAX_NFEV
    )
    return {
        "held_out": held_out,
        "x": fit.x,
        "nfev": fit.nfev,
        "njev": fit.njev,
        "seconds": time.perf_counter() - start,
        "measured": collect_a(space.path(fit.x, folder)),
    }


def loo_a(pool: Executor, folder: str) -> tuple[Space, list[dict]]:
    space = Space.of("A")
    folds = [None, *FIT_FIGURES["A"]]
    return space, list(pool.map(fit_a, [space] * len(folds), folds, [folder] * len(folds)))


def loo_b(
    runner: Runner, current: dict[str, Measured], folder: str, log: Callable[[str], None]
) -> tuple[Space, list[dict]]:
    """Refit the section-B constants (chord least squares on the in-loop protocol), folds run concurrently."""
    from scipy.optimize import least_squares

    space = Space.of("B")
    chunk = int(current["B.static_chunk"].value)
    fit_keys = FIT_FIGURES["B"]

    def quick(x: np.ndarray, keys: list[str]) -> dict[str, Measured]:
        return collect_b(runner, space.path(x, folder), (0,), (chunk,), keys, mape=False)

    n = len(space.names)
    lo, hi = space.bounds()
    x0 = np.zeros(n)
    start = time.perf_counter()
    steps = [B_DIFF_STEP if hi[i] >= B_DIFF_STEP else -B_DIFF_STEP for i in range(n)]
    points = [x0] + [x0 + steps[i] * np.eye(n)[i] for i in range(n)]
    with ThreadPoolExecutor(len(points)) as threads:
        values = list(threads.map(lambda x: residuals(fit_keys, quick(x, fit_keys)), points))
    jacobian = np.column_stack([(values[i + 1] - values[0]) / steps[i] for i in range(n)])
    log(f"section B Jacobian at the current constants (seed 0, chunk {chunk}): {time.perf_counter() - start:.0f} s")

    def fold(held_out: str | None) -> dict:
        keys = [k for k in fit_keys if k != held_out]
        rows = [fit_keys.index(k) for k in keys]
        fixed = np.vstack([jacobian[rows], PRIOR / math.log(FACTOR_BOUND) * np.eye(n)])

        def fun(x: np.ndarray) -> np.ndarray:
            return np.concatenate([residuals(keys, quick(x, keys)), prior(x)])

        t = time.perf_counter()
        fit = least_squares(fun, x0, jac=lambda x: fixed, bounds=(lo, hi), method="trf", max_nfev=B_MAX_NFEV)
        final_keys = fit_keys if held_out is None else [held_out]
        measured = collect_b(runner, space.path(fit.x, folder), SEEDS, STATIC_CHUNKS, final_keys, mape=False)
        return {
            "held_out": held_out,
            "x": fit.x,
            "nfev": fit.nfev,
            "njev": fit.njev,
            "seconds": time.perf_counter() - t,
            "measured": measured,
        }

    with ThreadPoolExecutor(len(fit_keys) + 1) as threads:
        folds = list(threads.map(fold, [None, *fit_keys]))
    return space, folds


def loo_tables(section: str, space: Space, folds: list[dict], current: dict[str, Measured]) -> list[Table]:
    full = folds[0]
    table = Table(
        title=f"leave-one-out, section {section} ({space.hardware}: {len(space.names)} fitted constants)",
        title_justify="left",
        box=None,
        header_style="bold",
        pad_edge=False,
    )
    for col in (
        "held-out figure",
        "paper",
        "current",
        "err",
        "all refitted",
        "err",
        "refit without it",
        "err",
        "largest change",
    ):
        table.add_column(col, justify="left" if col == "held-out figure" else "right", no_wrap=True)
    for fold in folds[1:]:
        f = BY_KEY[fold["held_out"]]
        cells = []
        for m in (current[f.key], full["measured"][f.key], fold["measured"][f.key]):
            cells += [fmt_value(f, m.value), fmt_error(f, m.value)]
        x = fold["x"]
        i = int(np.argmax(np.abs(x)))
        change = f"{space.names[i]} x{math.exp(x[i]):.2f}" if abs(x[i]) > 1e-6 else "none"
        table.add_row(f.label, fmt_paper(f), *cells, change)
    constants = Table(
        title=f"section {section}: refitted constants as multiples of the current values "
        f"(bounds x{1 / FACTOR_BOUND:g}..x{FACTOR_BOUND:g}; fractions <= 1)",
        title_justify="left",
        box=None,
        header_style="bold",
        pad_edge=False,
    )
    constants.add_column("fold", no_wrap=True)
    for name in space.names:
        constants.add_column(name, justify="right")
    constants.add_column("evals", justify="right")
    constants.add_column("s", justify="right")
    constants.add_row("current", *(f"{v:g}" for v in space.current), "", "")
    for fold in folds:
        label = "all figures" if fold["held_out"] is None else f"without {fold['held_out']}"
        constants.add_row(
            label, *(f"x{math.exp(v):.2f}" for v in fold["x"]), str(fold["nfev"]), f"{fold['seconds']:.0f}"
        )
    return [table, constants]


# -- main -------------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (default 2)")
    parser.add_argument("--only", choices=("A", "B"), default=None, help="one section of calibration.md")
    parser.add_argument("--skip-loo", action="store_true", help="the table alone, no leave-one-out refits")
    args = parser.parse_args(argv)
    wall, cpu = time.perf_counter(), time.process_time()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    console = Console(width=200)

    def log(text: str) -> None:
        console.print(f"[dim]{time.perf_counter() - wall:6.0f} s  {text}[/dim]")

    loo = not args.skip_loo
    sections = ("A", "B") if args.only is None else (args.only,)
    measured: dict[str, Measured] = {}
    with tempfile.TemporaryDirectory(prefix="pipedeck-fidelity-") as folder, ProcessPoolExecutor(args.jobs) as pool:
        runner = Runner(pool)
        if "A" in sections:
            measured.update(collect_a())
            log("section A figures")
        if "B" in sections:
            measured.update(collect_b(runner))
            log(f"section B figures ({runner.searches} goodput searches)")
        rows = build_rows([f for f in FIGURES if f.section in sections], measured)
        console.print(
            render(
                rows,
                "calibration.md against pipedeck (A: last rank, mean rank in the note; "
                "B: mean of seeds 0-2, goodput to 1%)",
            )
        )
        if loo:
            console.print(
                f"leave-one-out: least_squares (trf) in log space, bounds x{1 / FACTOR_BOUND:g}..x{FACTOR_BOUND:g} "
                "around the current constants, residuals error / tolerance, prior "
                f"{PRIOR:g} tolerance units per factor {FACTOR_BOUND:g}; 'err' as in the table"
            )
            if "A" in sections:
                space, folds = loo_a(pool, folder)
                log(f"section A leave-one-out ({len(folds)} refits)")
                for table in loo_tables("A", space, folds, measured):
                    console.print(table)
                console.print(
                    f"section A refits: whole figures, {A_DIFF_STEP:.0%} finite differences, at most "
                    f"{A_MAX_NFEV} evaluations per fold"
                )
            if "B" in sections:
                space, folds = loo_b(runner, measured, folder, log)
                log(f"section B leave-one-out ({len(folds)} refits, {runner.searches} goodput searches in all)")
                for table in loo_tables("B", space, folds, measured):
                    console.print(table)
                console.print(
                    "section B refits (budget): in the loop seed 0 only and static PP4 at chunk "
                    f"{int(measured['B.static_chunk'].value)}, Jacobian fixed at the current constants "
                    f"(steps of {math.exp(B_DIFF_STEP) - 1:.0%}), at most {B_MAX_NFEV} evaluations per "
                    "fold; held-out and all-refitted figures then measured on seeds 0-2 with the chunk grid"
                )
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    main_cpu = time.process_time() - cpu
    workers = children.ru_utime + children.ru_stime - before.ru_utime - before.ru_stime
    console.print(
        f"wall {time.perf_counter() - wall:.1f} s, CPU {main_cpu + workers:.1f} s "
        f"(this process {main_cpu:.1f} s + workers {workers:.1f} s), --jobs {args.jobs}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
