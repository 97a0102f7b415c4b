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

    python benchmarks/schemes.py [--jobs 2] [--only goodput|long]
"""

from __future__ import annotations

import argparse
from concurrent.futures import ProcessPoolExecutor

from rich.console import Console
from rich.table import Table

from pipedeck.backends.config import SGLANG_MIXED_CHUNK, ServingConfig
from pipedeck.backends.sim import SimBackend
from pipedeck.scenarios import load_scenario
from pipedeck.tuner.objective import Evaluator, TuneSpec

K = 1024
GOODPUT_SCENARIOS = ("cnn-reversed", "azure-conv")
STATIC_CHUNKS = (128, 256, 384, 512, 768, 1024)
SCHEMES = {"tp-only": dict(tp=4, pp=1, chunk=2048), "cpp (best static)": dict(tp=1, pp=4),
           "fastpp-greedy": dict(tp=1, pp=4, chunk=2048, mode="fastpp-greedy"),
           "fastpp-alp": dict(tp=1, pp=4, chunk=2048, mode="fastpp-alp")}
LONG_MODELS = ("glm-5.2", "deepseek-v3.1")
LONG_LENGTHS = ("64k", "128k", "256k", "512k", "1m")
LONG_MODES = ("cpp", "dcpp", "vpp", "vpp-adaptive")


def goodput(job: tuple[str, dict]) -> float:
    scenario, config = job
    spec = TuneSpec(study="bench", storage="unused", scenario=scenario, model="qwen2.5-32b",
                    hardware="a100-40g-pcie", devices=4, slo="ttft=2s,tpot=200ms")
    resolved = ServingConfig(model="qwen2.5-32b", hardware="a100-40g-pcie", **SGLANG_MIXED_CHUNK, **config).resolve()
    return Evaluator(spec).measure(resolved).value


def long_prompt(job: tuple[str, str, str, int]) -> tuple[float, float]:
    model, length, mode, chunk = job
    config = ServingConfig(model=model, hardware="ascend-910c", tp=8, pp=2, mode=mode, chunk=chunk * K)
    result = SimBackend().run(load_scenario(f"long-{length}"), config, timeline=False)
    return result.makespan_s, result.summary()["bubble_ratio"]


def goodput_table(pool: ProcessPoolExecutor) -> Table:
    jobs = {}
    for scenario in GOODPUT_SCENARIOS:
        for delay in (False, True):
            for name, config in SCHEMES.items():
                chunks = STATIC_CHUNKS if name.startswith("cpp") else (config["chunk"],)
                for chunk in chunks:
                    jobs[(scenario, delay, name, chunk)] = (scenario, {**config, "chunk": chunk, "delay_scheduling": delay})
    values = dict(zip(jobs, pool.map(goodput, jobs.values())))
    table = Table(title="goodput (req/s), Qwen2.5-32B, 4 x A100 40GB PCIe, P90 TTFT 2 s / TPOT 200 ms",
                  title_justify="left")
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


def long_table(pool: ProcessPoolExecutor) -> Table:
    jobs = [(m, length, mode, c) for m in LONG_MODELS for length in LONG_LENGTHS for mode in LONG_MODES
            for c in (8, 16, 24, 32)]
    values = dict(zip(jobs, pool.map(long_prompt, jobs)))
    table = Table(title="one long prompt, 16 x Ascend 910C TP8+PP2: TTFT s / bubble ratio at each scheme's best chunk",
                  title_justify="left")
    table.add_column("model")
    table.add_column("prompt")
    for mode in LONG_MODES:
        table.add_column(mode, justify="right")
    for model in LONG_MODELS:
        for length in LONG_LENGTHS:
            cells = []
            for mode in LONG_MODES:
                ttft, bubble, chunk = min((*values[(model, length, mode, c)], c) for c in (8, 16, 24, 32))
                cells.append(f"{ttft:.2f} / {bubble:.1%} @{chunk}K")
            table.add_row(model, length, *cells)
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--only", choices=("goodput", "long"), default=None)
    args = parser.parse_args()
    console = Console(width=140)
    with ProcessPoolExecutor(args.jobs) as pool:
        if args.only in (None, "goodput"):
            console.print(goodput_table(pool))
        if args.only in (None, "long"):
            console.print(long_table(pool))


if __name__ == "__main__":
    main()
