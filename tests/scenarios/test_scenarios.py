"""Scenarios: the catalog's statistics, reproducibility, file formats and error messages."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from pipedeck.scenarios import Poisson, Request, Scenario, ScenarioError, Workload, catalog, load_scenario

CATALOG_NAMES = [
    "azure-conv", "sharegpt", "cnn", "cnn-reversed",
    "short-4k", "short-8k", "short-16k",
    "long-64k", "long-128k", "long-256k", "long-512k", "long-1m",
    "mixed-gsm8k",
]  # fmt: skip

# Published mean (prompt, output) tokens, calibration.md section B.
PUBLISHED_MEANS = {
    "azure-conv": (1161, 212),
    "sharegpt": (226, 199),
    "cnn": (883, 65),
    "cnn-reversed": (65, 883),
}


def columns(workload: Workload) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Arrival times, prompt tokens and output tokens as arrays."""
    rows = [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in workload.requests]
    times, prompts, outputs = (np.array(c) for c in zip(*rows, strict=True))
    return times, prompts, outputs


def error_of(call, *args, **kwargs) -> str:
    """The one-line message of the ScenarioError that call(*args, **kwargs) raises."""
    with pytest.raises(ScenarioError) as info:
        call(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


# --- the catalog -----------------------------------------------------------------


def test_catalog_has_every_entry_documented():
    scenarios = catalog()
    assert list(scenarios) == CATALOG_NAMES
    for name, scenario in scenarios.items():
        assert scenario.name == name
        assert scenario.description and scenario.source and scenario.assumptions
        assert load_scenario(name) is scenario


@pytest.mark.parametrize("name", list(PUBLISHED_MEANS))
def test_dataset_scenarios_match_published_means(name):
    # Lognormal medians were solved so the clipped distribution's mean equals the
    # published mean; draws are stratified, so 1000 draws land within about 1% of
    # it. 3% catches a wrong median or sigma (a 0.1 error in sigma moves the
    # azure-conv output mean by 10%) without depending on the seed.
    scenario = catalog()[name]
    times, prompts, outputs = columns(scenario.workload())
    prompt_mean, output_mean = PUBLISHED_MEANS[name]
    assert len(prompts) == 1000
    assert prompts.mean() == pytest.approx(prompt_mean, rel=0.03)
    assert outputs.mean() == pytest.approx(output_mean, rel=0.03)
    assert prompts.min() >= 1 and outputs.min() >= 1
    # Poisson at the default rate: 999 gaps give the rate to about 3% (1 s.d.).
    assert scenario.is_open_loop and scenario.requires_rate
    assert times[0] == 0.0 and np.all(np.diff(times) >= 0)
    assert (len(times) - 1) / times[-1] == pytest.approx(scenario.rate, rel=0.1)


def test_cnn_reversed_swaps_cnn_input_and_output():
    cnn, reversed_ = catalog()["cnn"], catalog()["cnn-reversed"]
    assert (reversed_.prompt, reversed_.output) == (cnn.output, cnn.prompt)


@pytest.mark.parametrize("name, tokens", [("short-4k", 4096), ("short-8k", 8192), ("short-16k", 16384)])
def test_short_scenarios_are_100_requests_at_t0(name, tokens):
    workload = catalog()[name].workload()
    assert workload.concurrency is None
    assert [(r.arrival_s, r.prompt_tokens, r.output_tokens) for r in workload.requests] == [(0.0, tokens, 128)] * 100


@pytest.mark.parametrize("name, k", [("long-64k", 64), ("long-128k", 128), ("long-256k", 256),
                                     ("long-512k", 512), ("long-1m", 1024)])  # fmt: skip
def test_long_scenarios_are_one_prefill(name, k):
    scenario = catalog()[name]
    assert scenario.workload().requests == (Request(0, 0.0, k * 1024, 1),)
    queued = scenario.workload(num_requests=3)
    assert [(r.arrival_s, r.prompt_tokens) for r in queued.requests] == [(0.0, k * 1024)] * 3


def test_long_512k_is_exactly_524288_tokens():
    assert catalog()["long-512k"].workload().requests[0].prompt_tokens == 524288


def test_mixed_gsm8k_matches_published_statistics():
    scenario = catalog()["mixed-gsm8k"]
    workload = scenario.workload()
    times, prompts, outputs = columns(workload)
    assert len(workload) == 500 and workload.concurrency == 16
    assert not scenario.is_open_loop and not scenario.accepts_rate
    assert np.all(times == 0.0)
    assert prompts.mean() == pytest.approx(22_500, rel=0.05)
    assert np.median(prompts) == pytest.approx(10_000, rel=0.05)
    assert np.percentile(prompts, 90) == pytest.approx(64_000, rel=0.05)
    assert prompts.min() >= 7 and prompts.max() == 122_710
    assert outputs.min() >= 1 and outputs.max() <= 1024


# --- reproducibility and common random numbers ------------------------------------


@pytest.mark.parametrize("name", ["azure-conv", "mixed-gsm8k"])
def test_same_seed_same_workload_other_seed_different(name):
    scenario = catalog()[name]
    assert scenario.workload(seed=7) == scenario.workload(seed=7)
    assert scenario.workload(seed=7) != scenario.workload(seed=8)
    assert scenario.workload() == scenario.workload(seed=0)


def test_doubling_the_rate_halves_arrival_times_and_keeps_lengths():
    scenario = catalog()["azure-conv"]
    slow, fast = scenario.workload(seed=3, rate=2.0), scenario.workload(seed=3, rate=4.0)
    slow_t, slow_p, slow_o = columns(slow)
    fast_t, fast_p, fast_o = columns(fast)
    assert np.array_equal(fast_t, slow_t / 2)
    assert np.array_equal(fast_p, slow_p) and np.array_equal(fast_o, slow_o)
    third_t, third_p, _ = columns(scenario.workload(seed=3, rate=6.0))
    assert np.allclose(third_t, slow_t / 3, rtol=1e-12) and np.array_equal(third_p, slow_p)


def test_burstiness_sets_the_variance_of_gaps():
    # Gaps ~ Gamma(b, 1/(rate b)): squared coefficient of variation 1/b.
    # Lengths come from their own streams, so they do not change with the arrivals.
    base = catalog()["azure-conv"]
    _, base_prompts, _ = columns(base.workload(num_requests=5000))
    for burstiness in (0.25, 1.0, 4.0):
        scenario = dataclasses.replace(base, arrivals=Poisson(burstiness))
        times, prompts, _ = columns(scenario.workload(num_requests=5000))
        gaps = np.diff(times)
        assert gaps.mean() == pytest.approx(1 / base.rate, rel=0.1)
        assert gaps.var() / gaps.mean() ** 2 == pytest.approx(1 / burstiness, rel=0.15)
        assert np.array_equal(prompts, base_prompts)


def test_rate_flags():
    assert catalog()["azure-conv"].requires_rate and catalog()["azure-conv"].accepts_rate
    short = catalog()["short-8k"]
    assert short.is_open_loop and not short.requires_rate and not short.accepts_rate


# --- user scenarios and traces ----------------------------------------------------

USER_TOML = """
description = "my traffic"
source = "a guess"
assumptions = "none"
num_requests = 50
rate = 2.5
arrivals = { process = "poisson", burstiness = 0.5 }
prompt = { dist = "lognormal", median = 500, sigma = 0.5, min = 10, max = 2000 }
output = { dist = "fixed", tokens = 64 }
"""


def test_user_toml_scenario(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(USER_TOML)
    scenario = load_scenario(str(path))
    assert (scenario.name, scenario.description, scenario.num_requests, scenario.rate) == (
        "mine",
        "my traffic",
        50,
        2.5,
    )
    assert scenario.arrivals == Poisson(0.5)
    _, prompts, outputs = columns(scenario.workload())
    assert len(prompts) == 50 and prompts.min() >= 10 and prompts.max() <= 2000
    assert set(outputs) == {64}
    path.write_text('name = "renamed"\n' + USER_TOML)
    assert load_scenario(str(path)).name == "renamed"


def test_user_toml_closed_loop_with_empirical_lengths_from_a_trace(tmp_path):
    (tmp_path / "lengths.csv").write_text("arrival_s,prompt_tokens,output_tokens\n0,100,7\n1,200,8\n2,300,9\n")
    path = tmp_path / "closed.toml"
    path.write_text(
        "num_requests = 30\n"
        'arrivals = { process = "closed-loop", concurrency = 4 }\n'
        'prompt = { dist = "empirical", path = "lengths.csv" }\n'
        'output = { dist = "empirical", path = "lengths.csv" }\n'
    )
    workload = load_scenario(str(path)).workload(seed=1)
    times, prompts, outputs = columns(workload)
    assert workload.concurrency == 4 and np.all(times == 0.0)
    # Stratified: each of the three values is drawn for a third of the requests.
    assert sorted(prompts) == [100] * 10 + [200] * 10 + [300] * 10
    assert sorted(outputs) == [7] * 10 + [8] * 10 + [9] * 10


def test_csv_trace_replays_and_rescales(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens,user\n1.0,30,3,a\n0.0,10,1,b\n4.0,40,4,c\n2.0,20,2,d\n")
    scenario = load_scenario(str(path))
    assert scenario.name == "trace" and scenario.num_requests == 4
    assert not scenario.requires_rate and scenario.accepts_rate and scenario.is_open_loop
    assert scenario.workload().requests == (
        Request(0, 0.0, 10, 1),
        Request(1, 1.0, 30, 3),
        Request(2, 2.0, 20, 2),
        Request(3, 4.0, 40, 4),
    )
    # Recorded rate: 3 gaps in 4 s = 0.75 req/s; at 1.5 req/s every time halves.
    times, prompts, _ = columns(scenario.workload(rate=1.5))
    assert np.allclose(times, [0.0, 0.5, 1.0, 2.0]) and list(prompts) == [10, 30, 20, 40]
    # The first two rows span 1 s: rate 4 scales them to 0.25 s.
    times, _, _ = columns(scenario.workload(rate=4.0, num_requests=2))
    assert np.allclose(times, [0.0, 0.25])


def test_jsonl_trace(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text(
        '{"arrival_s": 0.5, "prompt_tokens": 10, "output_tokens": 3}\n'
        "\n"
        '{"arrival_s": 0.25, "prompt_tokens": 20, "output_tokens": 4, "extra": true}\n'
    )
    assert load_scenario(str(path)).workload().requests == (
        Request(0, 0.25, 20, 4), Request(1, 0.5, 10, 3)
    )  # fmt: skip


def test_azure_trace(tmp_path):
    path = tmp_path / "AzureLLMInferenceTrace_conv.csv"
    path.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
        "2023-11-16 18:15:51.0000000,0,5\n"  # failed request: skipped
        "2023-11-16 18:15:56.6805900,1000,10\n"
    )
    scenario = load_scenario(str(path))
    assert "1 rows with zero tokens skipped" in scenario.assumptions
    times, prompts, outputs = columns(scenario.workload())
    assert times == pytest.approx([0.0, 4.314579, 10.0], abs=1e-6)
    assert list(prompts) == [374, 396, 1000] and list(outputs) == [44, 109, 10]


# --- errors: one line, naming the field and what is allowed ---------------------


def test_scenario_error_is_a_value_error():
    assert issubclass(ScenarioError, ValueError)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"rate": -1}, "rate: must be a positive number of requests per second, got -1"),
        ({"rate": 0.0}, "rate: must be a positive number of requests per second, got 0.0"),
        ({"num_requests": 0}, "num_requests: must be an integer >= 1, got 0"),
        ({"num_requests": 2.5}, "num_requests: must be an integer >= 1, got 2.5"),
        ({"seed": -1}, "seed: must be an integer >= 0, got -1"),
    ],
)
def test_bad_workload_arguments(kwargs, message):
    assert error_of(catalog()["azure-conv"].workload, **kwargs) == message


def test_rate_for_scenarios_that_take_none():
    assert error_of(catalog()["mixed-gsm8k"].workload, rate=4.0) == (
        "rate: must be left unset for closed-loop arrivals (they take no rate), got 4.0"
    )
    assert error_of(catalog()["long-1m"].workload, rate=1) == (
        "rate: must be left unset for all-at-once arrivals (they take no rate), got 1"
    )


def test_unknown_scenario_lists_the_catalog():
    assert error_of(load_scenario, "azure") == (
        f"scenario: must be one of {', '.join(CATALOG_NAMES)} or a .toml, .csv or .jsonl file, got 'azure'"
    )


def test_missing_file(tmp_path):
    path = str(tmp_path / "absent.csv")
    assert error_of(load_scenario, path) == f"scenario: no such file {path}"
    folder = tmp_path / "looks.csv"
    folder.mkdir()
    assert error_of(load_scenario, str(folder)) == f"scenario: must be a file, not a folder, got {str(folder)!r}"


def test_invalid_scenario_construction():
    base = catalog()["azure-conv"]
    assert error_of(dataclasses.replace, base, rate=None) == (
        "rate: must be a positive number of requests per second, got no value"
    )
    assert error_of(dataclasses.replace, base, num_requests=0) == ("num_requests: must be an integer >= 1, got 0")
    assert error_of(Poisson, 0) == "burstiness: must be a positive number, got 0"


NEEDS_COLUMNS = "a trace needs columns arrival_s,prompt_tokens,output_tokens or TIMESTAMP,ContextTokens,GeneratedTokens"


@pytest.mark.parametrize(
    "text, message",
    [
        ("arrival_s,prompt_tokens\n0,1\n", f"missing column output_tokens; {NEEDS_COLUMNS}"),
        ("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,1\n",
         f"missing column GeneratedTokens; {NEEDS_COLUMNS}"),
        ("prompt_tokens\n1\n", f"missing column arrival_s,output_tokens; {NEEDS_COLUMNS}"),
        ("arrival_s,prompt_tokens,output_tokens\n", "must have at least one request row, got none"),
        ("arrival_s,prompt_tokens,output_tokens\n0,0,1\n",
         "must have a row with prompt and output tokens >= 1, got none"),
    ],
)  # fmt: skip
def test_bad_trace_files(tmp_path, text, message):
    path = tmp_path / "t.csv"
    path.write_text(text)
    assert error_of(load_scenario, str(path)) == f"{path}: {message}"


@pytest.mark.parametrize(
    "row, message",
    [
        ("0,ten,1", "3: prompt_tokens: must be an integer >= 0, got 'ten'"),
        ("-1,10,1", "3: arrival_s: must be seconds >= 0, got '-1'"),
        ("1,10", "3: output_tokens: must be an integer >= 0, got no value"),
    ],
)
def test_bad_trace_values_name_the_line(tmp_path, row, message):
    path = tmp_path / "t.csv"
    path.write_text(f"arrival_s,prompt_tokens,output_tokens\n0,1,1\n{row}\n")
    assert error_of(load_scenario, str(path)) == f"{path}:{message}"


def test_bad_azure_timestamp_and_jsonl_line(tmp_path):
    azure = tmp_path / "a.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,1,1\n")
    assert error_of(load_scenario, str(azure)) == (
        f"{azure}:2: TIMESTAMP: must be a datetime like 2023-11-16 18:15:46.6805900, got 'yesterday'"
    )
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_text('{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}\n[1, 2]\n')
    assert error_of(load_scenario, str(jsonl)) == f"{jsonl}:2: must be a JSON object, got '[1, 2]'"


@pytest.mark.parametrize(
    "name, head",
    [
        ("t.csv", b"arrival_s,prompt_tokens,output_tokens\n0,1,1\n"),
        ("t.jsonl", b'{"arrival_s": 0, "prompt_tokens": 1, "output_tokens": 1}\n\n'),
    ],
    ids=["csv", "jsonl"],
)
def test_a_trace_with_binary_bytes_names_the_line(tmp_path, name, head):
    path = tmp_path / name
    path.write_bytes(head + b"1,\x89PNG\xff,2\n" + b"2,3,4\n" * 5000)  # past the reader's first buffer
    assert error_of(load_scenario, str(path)) == f"{path}:3: must be UTF-8 text, got byte 0x89"


def test_trace_limits(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("arrival_s,prompt_tokens,output_tokens\n0,1,1\n0,2,2\n0,3,3\n")
    scenario = load_scenario(str(path))
    assert error_of(scenario.workload, num_requests=4) == ("num_requests: must be at most 3 (the trace's rows), got 4")
    assert error_of(scenario.workload, rate=2.0) == (
        "rate: must be left unset for a trace whose arrivals are all simultaneous, got 2.0"
    )


@pytest.mark.parametrize(
    "edit, message",
    [
        (("sigma = 0.5", "sigma = -1"), "prompt.sigma: must be a non-negative number, got -1"),
        (("max = 2000", "max = 5"), "prompt.max: must be an integer >= min (10), got 5"),
        (("sigma = 0.5", "sigmaa = 0.5"),
         "prompt.sigmaa: is not a known key; allowed keys are dist, median, sigma, min, max"),
        (('"fixed", tokens = 64', '"fixed"'), "output.tokens: is required"),
        (('"fixed"', '"uniform"'),
         "output.dist: must be one of fixed, lognormal, empirical, got 'uniform'"),
        (('"poisson"', '"gamma"'),
         "arrivals.process: must be one of poisson, closed-loop, all-at-once, got 'gamma'"),
        (("burstiness = 0.5", "burstiness = 0"),
         "arrivals.burstiness: must be a positive number, got 0"),
        (("num_requests = 50", "num_requests = 0"), "num_requests: must be an integer >= 1, got 0"),
        (("num_requests = 50", ""), "num_requests: is required"),
        (("rate = 2.5", ""), "rate: must be a positive number of requests per second, got no value"),
        (("rate = 2.5", "rates = 2.5"), "rates: is not a known key; allowed keys are description,"
         " source, assumptions, num_requests, rate, arrivals, prompt, output"),
        (('source = "a guess"', "source = 3"), "source: must be a string, got 3"),
        (('arrivals = {', 'arrivals = "poisson"\n#'),
         "arrivals: must be a table with process = one of poisson, closed-loop, all-at-once,"
         " got 'poisson'"),
    ],
)  # fmt: skip
def test_bad_user_toml(tmp_path, edit, message):
    path = tmp_path / "bad.toml"
    path.write_text(USER_TOML.replace(*edit))
    assert error_of(load_scenario, str(path)) == f"{path}: {message}"


def test_invalid_toml_syntax(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(USER_TOML.replace("prompt = {", "prompt = "))
    assert error_of(load_scenario, str(path)).startswith(f"{path}: must be valid TOML (")


def test_empirical_path_must_exist(tmp_path):
    path = tmp_path / "e.toml"
    empirical = '{ dist = "empirical", path = "x.csv" }'
    path.write_text(USER_TOML.replace('{ dist = "fixed", tokens = 64 }', empirical))
    missing = tmp_path / "x.csv"
    assert error_of(load_scenario, str(path)) == (
        f"{path}: output.path: must be an existing .csv or .jsonl trace file, got {str(missing)!r}"
    )


def test_scenario_is_a_frozen_value():
    scenario = catalog()["cnn"]
    with pytest.raises(dataclasses.FrozenInstanceError):
        scenario.rate = 1.0  # type: ignore[misc]
    assert isinstance(scenario, Scenario)
    assert scenario == dataclasses.replace(scenario)
    assert catalog() is not catalog() and catalog()["cnn"] is scenario


def test_files_are_read_relative_to_the_toml(tmp_path: Path):
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "t.jsonl").write_text('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 6}\n')
    (sub / "s.toml").write_text(
        "num_requests = 2\n"
        'arrivals = { process = "all-at-once" }\n'
        'prompt = { dist = "empirical", path = "t.jsonl" }\n'
        'output = { dist = "empirical", path = "t.jsonl" }\n'
    )
    workload = load_scenario(str(sub / "s.toml")).workload()
    assert workload.requests == (Request(0, 0.0, 5, 6), Request(1, 0.0, 5, 6))
