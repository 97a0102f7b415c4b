"""The schemes side by side: FastPP's controllers and delay scheduling, and the fold-back variants.

Table 1: goodput (req/s) of Qwen2.5-32B on 4 x A100 40GB PCIe (the
scheduler semantics of FastPP's SGLang launch, SGLANG_MIXED_CHUNK, as in
calibration B) under P90 TTFT 2 s / TPOT
200 ms, on cnn-reversed (decode-heavy) and azure-conv: TP4 at chunk 2048,
PP4 cpp at its best static chunk (128..1024), PP4 fastpp-greedy and
fastpp-alp (chunks up to 2048), each without and with delay scheduling.

Table 2: TTFT (s) and bubble ratio of one long prompt (64K to 1M) on glm-5.2
and deepseek-v3.1, 16 x Ascend 910C, TP8 + PP2, for cpp, dcpp, vpp and
vpp-adaptive, each at its best chunk of 8K/16K/24K/32K (as the VPP paper
reports).

Table 3: the fold-back modes on ordinary traffic, 16 x Ascend 910C, TP8 +
PP2: makespan (s) of short-4k (100 prompts at once) and mixed-gsm8k (500
prompts, 16 in flight) for each VPP-paper model, each mode at its best chunk
of 8K/16K/24K/32K, and the goodput (req/s, P90 TTFT 2 s / TPOT 200 ms) of
azure-conv on deepseek-v3.1 at its best chunk of 2K/8K/16K.

Table 4: blocking against overlapped transfers: three 256K prompts
(long-256k, all at t=0) on deepseek-v3.1, TP8 + PP2, chunk 32K: makespan and
the mean rank's exposed communication and bubble for vpp-sync and vpp-async.

    python benchmarks/schemes.py [--jobs 2] [--only goodput|long|traffic|sync]
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor

from rich.console import Console
from rich.table import Table

from pipedeck.backends.config import SGLANG_MIXED_CHUNK, ServingConfig
from pipedeck.backends.sim import SimBackend
from pipedeck.scenarios import load_scenario
from pipedeck.tuner.objective import Evaluator
from pipedeck.tuner.slo import parse_slo
from pipedeck.tuner.spec import TuneSpec

K = 1024
GOODPUT_SCENARIOS = ("cnn-reversed", "azure-conv")
STATIC_CHUNKS = (128, 256, 384, 512, 768, 1024)
SCHEMES = {
    "tp-only": dict(tp=4, pp=1, chunk=2048),
    "cpp (best static)": dict(tp=1, pp=4),
    "fastpp-greedy": dict(tp=1, pp=4, chunk=2048, mode="fastpp-greedy"),
    "fastpp-alp": dict(tp=1, pp=4, chunk=2048, mode="fastpp-alp"),
}
LONG_MODELS = ("glm-5.2", "deepseek-v3.1")
LONG_LENGTHS = ("64k", "128k", "256k", "512k", "1m")
LONG_MODES = ("cpp", "dcpp", "vpp", "vpp-adaptive")
TRAFFIC_MODELS = ("qwen3-coder-30b-a3b", "deepseek-v3.1", "glm-5.2")
TRAFFIC_SCENARIOS = ("short-4k", "mixed-gsm8k")
TRAFFIC_MODES = ("cpp", "dcpp", "vpp-sync", "vpp-async", "vpp")
TRAFFIC_CHUNKS = (8, 16, 24, 32)
AZURE_CHUNKS = (2, 8, 16)


def goodput(job: tuple[str, dict]) -> float:
    scenario, config = job
    spec = TuneSpec(
        study="bench",
        storage="unused",
        scenario=scenario,
        model="qwen2.5-32b",
        hardware="a100-40g-pcie",
        devices=4,
        slo=parse_slo("ttft=2s,tpot=200ms"),
    )
    resolved = ServingConfig.of(model="qwen2.5-32b", hardware="a100-40g-pcie", **SGLANG_MIXED_CHUNK, **config).resolve()
    return Evaluator(spec).measure(resolved).value


def ascend_goodput(job: tuple[str, str, int]) -> float:
    model, mode, chunk = job
    spec = TuneSpec(
        study="bench",
        storage="unused",
        scenario="azure-conv",
        model=model,
        hardware="ascend-910c",
        devices=16,
        slo=parse_slo("ttft=2s,tpot=200ms"),
    )
    config = ServingConfig.of(model=model, hardware="ascend-910c", tp=8, pp=2, mode=mode, chunk=chunk * K).resolve()
    return Evaluator(spec).measure(config).value


def makespan(job: tuple[str, str, str, int]) -> float:
    model, scenario, mode, chunk = job
    config = ServingConfig.of(model=model, hardware="ascend-910c", tp=8, pp=2, mode=mode, chunk=chunk * K)
    return SimBackend().run(load_scenario(scenario), config, timeline=False).makespan_s


def three_prompts(mode: str) -> tuple[float, float, float]:
    config = ServingConfig.of(model="deepseek-v3.1", hardware="ascend-910c", tp=8, pp=2, mode=mode, chunk=32 * K)
    result = SimBackend().run(load_scenario("long-256k"), config, num_requests=3, timeline=False)
    breakdown = result.summary()["breakdown_s"]
    return result.makespan_s, breakdown["exposed_comm"], breakdown["bubble"]


def long_prompt(job: tuple[str, str, str, int]) -> tuple[float, float]:
    model, length, mode, chunk = job
    config = ServingConfig.of(model=model, hardware="ascend-910c", tp=8, pp=2, mode=mode, chunk=chunk * K)
    result = SimBackend().run(load_scenario(f"long-{length}"), config, timeline=False)
    return result.makespan_s, result.summary()["bubble_ratio"]


def goodput_table(pool: ProcessPoolExecutor) -> Table:
    jobs = {}
    for scenario in GOODPUT_SCENARIOS:
        for delay in (False, True):
            for name, config in SCHEMES.items():
                chunks = STATIC_CHUNKS if name.startswith("cpp") else (config["chunk"],)
                for chunk in chunks:
                    jobs[(scenario, delay, name, chunk)] = (
                        scenario,
                        {**config, "chunk": chunk, "delay_scheduling": delay},
                    )
    values = dict(zip(jobs, pool.map(goodput, jobs.values())))
    table = Table(
        title="goodput (req/s), Qwen2.5-32B, 4 x A100 40GB PCIe, P90 TTFT 2 s / TPOT 200 ms", title_justify="left"
    )
    table.add_column("scheme")
    for scenario in GOODPUT_SCENARIOS:
        table.add_column(f"{scenario}", justify="right")
        table.add_column(f"{scenario} + delay", justify="right")
    for name in SCHEMES:
        cells = []
        for scenario in GOODPUT_SCENARIOS:
            for delay in (False, True):
                best = max((v, chunk) for (s, d, n, chunk), v in values.items() if (s, d, n) == (scenario, delay, name))
                cells.append(f"{best[0]:.2f}" + (f" @{best[1]}" if name.startswith("cpp") else ""))
        table.add_row(name, *cells)
    return table


def modes_table(title: str, workload: str, modes: tuple[str, ...]) -> Table:
    """A table with a row per model and workload and a column per mode."""
    table = Table(title=title, title_justify="left")
    table.add_column("model")
    table.add_column(workload)
    for mode in modes:
        table.add_column(mode, justify="right")
    return table


def long_table(pool: ProcessPoolExecutor) -> Table:
    jobs = [
        (m, length, mode, c)
        for m in LONG_MODELS
        for length in LONG_LENGTHS
        for mode in LONG_MODES
        for c in (8, 16, 24, 32)
    ]
    values = dict(zip(jobs, pool.map(long_prompt, jobs)))
    table = modes_table(
        "one long prompt, 16 x Ascend 910C TP8+PP2: TTFT s / bubble ratio at each scheme's best chunk",
        "prompt",
        LONG_MODES,
    )
    for model in LONG_MODELS:
        for length in LONG_LENGTHS:
            cells = []
            for mode in LONG_MODES:
                ttft, bubble, chunk = min((*values[(model, length, mode, c)], c) for c in (8, 16, 24, 32))
                cells.append(f"{ttft:.2f} / {bubble:.1%} @{chunk}K")
            table.add_row(model, length, *cells)
    return table


def traffic_table(pool: ProcessPoolExecutor) -> Table:
    jobs = [
        (m, s, mode, c)
        for m in TRAFFIC_MODELS
        for s in TRAFFIC_SCENARIOS
        for mode in TRAFFIC_MODES
        for c in TRAFFIC_CHUNKS
    ]
    spans = dict(zip(jobs, pool.map(makespan, jobs)))
    azure = [("deepseek-v3.1", mode, c) for mode in TRAFFIC_MODES for c in AZURE_CHUNKS]
    rates = dict(zip(azure, pool.map(ascend_goodput, azure)))
    table = modes_table(
        "ordinary traffic, 16 x Ascend 910C TP8+PP2: makespan s (vs cpp) / azure-conv goodput req/s, "
        "each at its best chunk",
        "scenario",
        TRAFFIC_MODES,
    )
    for model in TRAFFIC_MODELS:
        for scenario in TRAFFIC_SCENARIOS:
            best = {mode: min((spans[(model, scenario, mode, c)], c) for c in TRAFFIC_CHUNKS) for mode in TRAFFIC_MODES}
            cpp = best["cpp"][0]
            table.add_row(model, scenario, *(f"{t:.1f} ({t / cpp - 1:+.0%}) @{c}K" for t, c in best.values()))
    cells = []
    for mode in TRAFFIC_MODES:
        rate, chunk = max((rates[("deepseek-v3.1", mode, c)], c) for c in AZURE_CHUNKS)
        cells.append(f"{rate:.3f} @{chunk}K")
    table.add_row("deepseek-v3.1", "azure-conv goodput", *cells)
    return table


def sync_table(pool: ProcessPoolExecutor) -> Table:
    modes = ("vpp-sync", "vpp-async")
    values = dict(zip(modes, pool.map(three_prompts, modes)))
    table = Table(
        title="three 256K prompts at once (long-256k), deepseek-v3.1 TP8+PP2, chunk 32K: seconds", title_justify="left"
    )
    for column in ("mode", "makespan", "exposed comm (mean rank)", "bubble (mean rank)"):
        table.add_column(column, justify="right" if column != "mode" else "left")
    for mode, (total, comm, bubble) in values.items():
        table.add_row(mode, f"{total:.2f}", f"{comm:.2f}", f"{bubble:.2f}")
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", choices=("goodput", "long", "traffic", "sync"), default=None)
    args = parser.parse_args()
    console = Console(width=140)
    with ProcessPoolExecutor(args.jobs) as pool:
        if args.only in (None, "goodput"):
            console.print(goodput_table(pool))
        if args.only in (None, "long"):
            console.print(long_table(pool))
        if args.only in (None, "traffic"):
            console.print(traffic_table(pool))
        if args.only in (None, "sync"):
            console.print(sync_table(pool))


if __name__ == "__main__":
    main()
