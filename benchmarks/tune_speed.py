"""How fast the tuner finds the best config, against an exhaustive grid.

1. Wall time and trials per minute of
   `pipedeck tune --slo ttft=2s,tpot=200ms --trials 100 --jobs 2` on the
   default cluster and scenario (DeepSeek-V3.1, 16 x ascend-910c, azure-conv).
2. How many trials TPE needs to come within 1% of the best goodput of an
   exhaustive grid over the same space. The grid space is the default
   cluster at TP8 x PP2 with every mode and every chunk of the 2K..64K grid
   (step 1K), vLLM's layer split and DCPP's default knobs
   (`--fix tp=8 --fix pp=2 --fix layer-split=default --fix smooth-factor=1.0
   --fix min-chunk=4096`): 5 x 63 configs. The grid is measured once and
   recorded in benchmarks/tune_grid.json (`--remeasure-grid` redoes it); TPE
   then searches the same space, for several seeds.

    python benchmarks/tune_speed.py [--jobs 2] [--seeds 3] [--skip-timing] [--remeasure-grid]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from rich.console import Console
from rich.table import Table

from pipedeck.backends.config import ServingConfig
from pipedeck.backends.policies.modes import MODES
from pipedeck.store import RunStore
from pipedeck.tuner.objective import Evaluator
from pipedeck.tuner.objectives import GOODPUT
from pipedeck.tuner.slo import parse_slo
from pipedeck.tuner.space import SpaceContext, parse_fixes
from pipedeck.tuner.spec import TuneSpec
from pipedeck.tuner.study import run_study

SLO = "ttft=2s,tpot=200ms"
GRID_FIXES = ["tp=8", "pp=2", "layer-split=default", "smooth-factor=1.0", "min-chunk=4096"]
GRID_FILE = Path(__file__).with_name("tune_grid.json")


def base_spec(study: str, storage: str, **changes) -> TuneSpec:
    values = dict(
        study=study,
        storage=storage,
        scenario="azure-conv",
        model="deepseek-v3.1",
        hardware="ascend-910c",
        devices=16,
        objective=GOODPUT,
        slo=parse_slo(SLO),
    )
    values.update(changes)
    return TuneSpec(**values)


def time_tune(jobs: int, trials: int) -> tuple[float, int]:
    """Wall seconds and finished trials of the README's tune command in a fresh folder."""
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "pipedeck.console",
                "tune",
                "--slo",
                SLO,
                "--trials",
                str(trials),
                "--jobs",
                str(jobs),
                "--json",
            ],
            cwd=folder,
            capture_output=True,
            text=True,
            check=True,
        )
        return time.perf_counter() - start, json.loads(out.stdout)["trials"]


def _grid_point(args: tuple[str, int]) -> dict[str, object]:
    mode, chunk = args
    spec = base_spec("grid", "unused")
    config = ServingConfig.of(tp=8, pp=2, mode=mode, chunk=chunk).resolve()
    measured = Evaluator(spec).measure(config)
    return {"mode": mode, "chunk": chunk, "goodput_rps": measured.value}


def measure_grid(jobs: int) -> dict[str, object]:
    """Goodput of every (mode, chunk) of the grid space."""
    ctx = SpaceContext("deepseek-v3.1", "ascend-910c", 16)
    points = [(mode, chunk) for mode in MODES for chunk in range(ctx.chunk_min, ctx.chunk_max + 1, ctx.chunk_step)]
    start = time.perf_counter()
    with ProcessPoolExecutor(jobs) as pool:
        results = list(pool.map(_grid_point, points))
    best = max(results, key=lambda r: r["goodput_rps"])
    return {
        "space": {
            "fixes": GRID_FIXES,
            "modes": list(MODES),
            "chunks": [ctx.chunk_min, ctx.chunk_max, ctx.chunk_step],
            "scenario": "azure-conv",
            "slo": SLO,
        },
        "measured_s": round(time.perf_counter() - start, 1),
        "best": best,
        "results": results,
    }


def trials_to_reach(target: float, seed: int, jobs: int, max_trials: int) -> tuple[int | None, float]:
    """The trial count at which TPE's best-so-far first reaches `target` (None if never), and its final best."""
    with tempfile.TemporaryDirectory() as folder:
        spec = base_spec(
            f"seed{seed}",
            str(Path(folder) / "journal.jsonl"),
            seed=seed,
            trials=max_trials,
            fixed=parse_fixes(GRID_FIXES),
        )
        run_study(spec, Path(folder) / "runs.duckdb", jobs=jobs)
        with RunStore.open(Path(folder) / "runs.duckdb") as store:
            trials = sorted(store.trials(spec.study), key=lambda t: t.number)
    best, reached = 0.0, None
    for count, trial in enumerate(trials, start=1):
        best = max(best, trial.objective or 0.0) if trial.state == "COMPLETE" else best
        if reached is None and best >= target:
            reached = count
    return reached, best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--max-trials", type=int, default=100)
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--remeasure-grid", action="store_true")
    args = parser.parse_args()
    console = Console(width=120)

    if not args.skip_timing:
        wall, trials = time_tune(args.jobs, 100)
        console.print(
            f"tune --slo {SLO} --trials 100 --jobs {args.jobs}: {trials} trials in {wall:.1f} s "
            f"= {trials / wall * 60:.1f} trials/min (target: under 180 s)"
        )

    if args.remeasure_grid or not GRID_FILE.exists():
        GRID_FILE.write_text(json.dumps(measure_grid(args.jobs), indent=1) + "\n")
    grid = json.loads(GRID_FILE.read_text())
    best = grid["best"]
    target = 0.99 * best["goodput_rps"]
    console.print(
        f"grid: {len(grid['results'])} configs (measured in {grid['measured_s']} s, {GRID_FILE.name}); "
        f"best {best['goodput_rps']:.3f} req/s with {best['mode']} chunk {best['chunk']}"
    )
    table = Table(
        title=f"TPE trials to reach 99% of the grid optimum ({target:.3f} req/s); target: at most 60",
        title_justify="left",
    )
    for col in ("seed", "trials to 99%", "final best req/s"):
        table.add_column(col, justify="right")
    for seed in range(args.seeds):
        reached, final = trials_to_reach(target, seed, args.jobs, args.max_trials)
        table.add_row(str(seed), str(reached) if reached else f"> {args.max_trials}", f"{final:.3f}")
    console.print(table)


if __name__ == "__main__":
    main()
