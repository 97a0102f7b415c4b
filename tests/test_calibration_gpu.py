"""calibration.md section B: Qwen2.5-32B on 4 x A100 40GB PCIe (SGLang), azure-conv, SLO P90 TTFT 2 s / TPOT 200 ms.

SGLang schedules decodes outside the chunk budget, so every config here runs
with decode_in_budget off. The best static PP4 chunk is searched over the
grid where it lies (128..1024 tokens).
"""

import pytest

from pipedeck.backends.config import ServingConfig
from pipedeck.tuner.objective import Evaluator, TuneSpec

PAPER = {"tp4": 3.48, "pp4_static": 8.28, "pp4_alp": 8.47}
STATIC_CHUNKS = (128, 256, 384, 512, 768, 1024)


@pytest.fixture(scope="module")
def goodputs():
    spec = TuneSpec(study="calibration-b", storage="unused", scenario="azure-conv", model="qwen2.5-32b",
                    hardware="a100-40g-pcie", devices=4, slo="ttft=2s,tpot=200ms")
    evaluator = Evaluator(spec)

    def goodput(**config) -> float:
        resolved = ServingConfig(model="qwen2.5-32b", hardware="a100-40g-pcie", decode_in_budget=False,
                                 **config).resolve()
        return evaluator.measure(resolved).value

    static = {chunk: goodput(tp=1, pp=4, chunk=chunk) for chunk in STATIC_CHUNKS}
    best_chunk = max(static, key=static.get)
    return {"tp4": goodput(tp=4, pp=1, chunk=2048), "pp4_static": static[best_chunk],
            "pp4_alp": goodput(tp=1, pp=4, chunk=2048, mode="fastpp-alp"), "best_chunk": best_chunk}


@pytest.mark.parametrize("scheme", list(PAPER))
def test_goodput_within_20_percent_of_the_paper(goodputs, scheme):
    assert goodputs[scheme] == pytest.approx(PAPER[scheme], rel=0.20)


def test_pipeline_parallelism_beats_tensor_parallelism(goodputs):
    assert goodputs["pp4_static"] > 1.5 * goodputs["tp4"]
    assert goodputs["pp4_alp"] > 1.5 * goodputs["tp4"]


@pytest.mark.xfail(strict=True, reason="not reproduced: in the simulator ALP lands about 1% below the best static "
                                       "chunk (KV capacity binds and ALP's chunk swings cost TTFT); the paper has "
                                       "it 2% above")
def test_alp_beats_the_best_static_chunk(goodputs):
    assert goodputs["pp4_alp"] > goodputs["pp4_static"]
