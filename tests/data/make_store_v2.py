"""Write tests/data/store-v2.duckdb.xz: a run store as pipedeck's schema version 2 wrote it.

Run with the pipedeck of commit 78356bc (the last to write version 2) and
DuckDB 1.1 (the oldest DuckDB pipedeck supports, so every later one reads
the file), e.g.:

    git archive 78356bc | tar -x -C /tmp/pipedeck-v2
    python -m venv /tmp/v2 && /tmp/v2/bin/pip install /tmp/pipedeck-v2 duckdb==1.1.3
    /tmp/v2/bin/python tests/data/make_store_v2.py tests/data/store-v2.duckdb.xz

It holds what the schema-3 migration rewrites: a simulated run (spans with
-1 for "no request"), a real small tune (completed and pruned trials, the
best and default runs), a named config, and trials as the tuner synced a
sampled config that could not run (no config) and a failed trial.
"""

from __future__ import annotations

import lzma
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from pipedeck.store import RunStore

CLUSTER = ["--model", "qwen2.5-14b", "--hardware", "a100-40g-pcie"]


def pipedeck(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pipedeck.console", *args], check=True, stdout=subprocess.DEVNULL)


def main(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "store.duckdb"
        pipedeck(
            "simulate",
            *CLUSTER,
            "--tp",
            "2",
            "--pp",
            "2",
            "--mode",
            "vpp",
            "--scenario",
            "short-4k",
            "--requests",
            "6",
            "--label",
            "baseline",
            "--db",
            str(db),
        )
        pipedeck(
            "tune",
            *CLUSTER,
            "--devices",
            "4",
            "--scenario",
            "azure-conv",
            "--requests",
            "40",
            "--slo",
            "ttft=1s,tpot=100ms",
            "--trials",
            "8",
            "--repeats",
            "2",
            "--study",
            "v2-demo",
            "--db",
            str(db),
        )
        with RunStore.open(db) as store:
            ran = store.trials("v2-demo")[0].config
            store.save_config("qwen-tp2", ran)
            store.save_study(
                "v2-unrun",
                scenario="azure-conv",
                objective="goodput",
                slo={},
                settings={},
                storage=str(Path(tmp) / "gone.jsonl"),
            )
            store.save_trial(
                "v2-unrun",
                0,
                state="COMPLETE",
                params={"parallelism": "4x1", "chunk": 2048},
                config=ran,
                metrics={"goodput_rps": 1.5},
                objective=1.5,
                duration_s=2.0,
            )
            store.save_trial(
                "v2-unrun",
                1,
                state="PRUNED",
                config=None,
                metrics={},
                objective=None,
                duration_s=0.1,
                params={
                    "parallelism": "2x2",
                    "mode": "vpp",
                    "chunk": 4096,
                    "max_running": 64,
                    "split4_0": 1,
                    "split4_1": 0,
                    "split4_2": -1,
                    "delay_scheduling": False,
                },
            )
            store.save_trial(
                "v2-unrun",
                2,
                state="FAIL",
                params={"parallelism": "2x2", "chunk": 999},
                config=None,
                metrics={},
                objective=None,
                duration_s=None,
            )
        with db.open("rb") as src, lzma.open(out, "wb", preset=9) as dst:
            shutil.copyfileobj(src, dst)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
