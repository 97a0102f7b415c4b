"""A small tuning setting the tuner tests share: Qwen2.5-14B on 4 x A100, 60 azure-conv requests, an SLO."""

from __future__ import annotations

from pipedeck.tuner import GOODPUT, TuneSpec, parse_slo

SMALL = [
    "--model",
    "qwen2.5-14b",
    "--hardware",
    "a100-40g-pcie",
    "--devices",
    "4",
    "--scenario",
    "azure-conv",
    "--requests",
    "60",
    "--slo",
    "ttft=2s,tpot=200ms",
]


def spec(tmp_path, **changes) -> TuneSpec:
    """The SMALL setting as a worker spec on a journal under `tmp_path`, with `changes` applied."""
    values = dict(
        study="t",
        storage=str(tmp_path / "journal.jsonl"),
        scenario="azure-conv",
        model="qwen2.5-14b",
        hardware="a100-40g-pcie",
        devices=4,
        objective=GOODPUT,
        slo=parse_slo("ttft=2s,tpot=200ms"),
        requests=60,
        trials=6,
    )
    values.update(changes)
    return TuneSpec(**values)
