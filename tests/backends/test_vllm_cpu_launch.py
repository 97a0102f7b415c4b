"""vLLM's CPU build in the launch mapping: chosen by the hardware profile's platform (or the engine installed), started
as the API server module, with each rank's cores, the KV cache's bytes and the layer partition."""

from __future__ import annotations

import pytest

from pipedeck.backends import ExportError, ServingConfig, load_hardware, plan_launch
from pipedeck.backends.launch import VLLM_CPU, thread_binding
from tests.large_cpu_host import LARGE_CPU_HOST

# Qwen2.5-14B (48 layers, 8 KV heads of 128, 16-bit KV: 4096 bytes per token and layer) on two ranks of 30 and 18,
# on a CPU host that holds its weights
CPU_PP2 = dict(
    model="qwen2.5-14b",
    hardware=LARGE_CPU_HOST,
    tp=1,
    pp=2,
    layer_split=(30, 18),
    chunk=256,
    max_running=16,
    kv_capacity=8192,
)


def test_the_packaged_cpu_host_profile_is_for_the_cpu_platform():
    assert load_hardware("cpu-host").platform == "cpu"


def test_a_cpu_profile_plans_the_cpu_build_with_its_binding_kv_bytes_and_partition(four_cores):
    plan = plan_launch(ServingConfig.of(**CPU_PP2).resolve(), "vllm", weights=False)
    assert plan.build is VLLM_CPU and plan.program == ("python", "-m", "vllm.entrypoints.openai.api_server")
    env = {var.name: (var.value, var.kind) for var in plan.launch.env}
    assert env == {"VLLM_PP_LAYER_PARTITION": ("30,18", "set"), "VLLM_CPU_OMP_THREADS_BIND": ("0-1|2-3", "default")}
    assert plan.launch.option("--kv-cache-memory-bytes") == 8192 * 4096 * 30  # the rank with the most layers
    assert "--enforce-eager" not in {flag.name for flag in plan.launch.flags}


def test_a_gpu_profile_plans_vllm_serve_without_the_cpu_environment():
    config = ServingConfig.of(**{**CPU_PP2, "hardware": "a100-40g-pcie"}).resolve()
    plan = plan_launch(config, "vllm", weights=False)
    assert plan.build is None and plan.program == ("vllm", "serve")
    assert {var.name for var in plan.launch.env} == {"VLLM_PP_LAYER_PARTITION"}


def test_the_engine_installed_decides_the_build_and_a_profile_for_another_device_is_refused(four_cores):
    gpu = ServingConfig.of(**{**CPU_PP2, "hardware": "a100-40g-pcie"}).resolve()
    with pytest.raises(ExportError) as err:
        plan_launch(gpu, "vllm", weights=False, platform="cpu")
    assert str(err.value) == (
        "hardware: a100-40g-pcie is a cuda profile, but the vllm installed is built for cpu; "
        "simulate and serve with a cpu profile"
    )
    assert plan_launch(gpu, "vllm", weights=False, platform="cuda").build is None  # a CUDA build: `vllm serve`


@pytest.mark.parametrize(
    "cores, ranks, binding",
    [
        ({0, 1}, 2, "0|1"),
        (set(range(8)), 2, "0-3|4-7"),
        ({0, 2, 4, 6}, 2, "0,2|4,6"),
        ({0, 1, 2}, 2, "0|1"),  # the core left over serves the API server and the engine core
        (set(range(6)), 1, "0-5"),
    ],
)
def test_each_rank_binds_its_own_share_of_the_usable_cores(monkeypatch, cores, ranks, binding):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: cores)
    assert thread_binding(ranks) == binding


def test_more_ranks_than_cores_are_refused_in_one_line(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    with pytest.raises(ExportError) as err:
        plan_launch(ServingConfig.of(**{**CPU_PP2, "pp": 4, "layer_split": None}).resolve(), "vllm", weights=False)
    assert (
        str(err.value)
        == "pp: vLLM's CPU build runs each of the 4 ranks (tp x pp) on cores of its own; this host has 2 usable"
    )
