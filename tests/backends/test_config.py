"""ServingConfig validation, derived fields, token parsing and vLLM's layer split."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from pipedeck.backends import (
    MODES,
    ConfigError,
    RawConfig,
    ResolvedConfig,
    ServingConfig,
    declared_knobs,
    default_layer_split,
    format_tokens,
    parse_tokens,
)
from pipedeck.backends.knobs import registered_part
from pipedeck.backends.parts import (
    DelaySettings,
    Memory,
    Parallelism,
    ResolvedMemory,
    ResolvedParallelism,
    Scheduling,
)

QWEN = dict(model="qwen2.5-14b", hardware="a100-40g-pcie")  # 48 layers, 40 heads


# -- parse_tokens -----------------------------------------------------------------


@pytest.mark.parametrize(
    "text, tokens",
    [
        ("24k", 24576),
        ("24K", 24576),
        (24576, 24576),
        ("24576", 24576),
        ("1m", 1048576),
        ("1M", 1048576),
        (" 8k ", 8192),
        ("4096", 4096),
    ],
)
def test_parse_tokens_accepts(text, tokens):
    assert parse_tokens(text, "chunk") == tokens


@pytest.mark.parametrize(
    "value, message",
    [
        (0, "chunk: must be a positive token count, got 0"),
        (-5, "chunk: must be a positive token count, got -5"),
        ("0", "chunk: must be a positive token count, got '0'"),
        ("-5", "chunk: must be a positive token count, got '-5'"),
        ("abc", "chunk: expected a token count such as 24k or 24576, got 'abc'"),
        ("12q", "chunk: expected a token count such as 24k or 24576, got '12q'"),
        ("", "chunk: expected a token count such as 24k or 24576, got ''"),
        (1.5, "chunk: expected a whole number of tokens, got 1.5"),
        ("1.5", "chunk: expected a whole number of tokens, got '1.5'"),
        (True, "chunk: expected a token count such as 24k or 24576, got True"),
    ],
)
def test_parse_tokens_rejects_with_one_line_naming_the_field(value, message):
    with pytest.raises(ConfigError) as err:
        parse_tokens(value, "chunk")
    assert str(err.value) == message
    assert "\n" not in str(err.value)


def test_parse_tokens_uses_the_field_name_given():
    with pytest.raises(ConfigError, match=r"^min_chunk: "):
        parse_tokens("zz", "min_chunk")


@pytest.mark.parametrize("text", ["inf", "nan"])
def test_parse_tokens_rejects_non_finite_with_config_error(text):
    with pytest.raises(ConfigError, match=r"^chunk: "):
        parse_tokens(text, "chunk")


@pytest.mark.parametrize("tokens, text", [(24576, "24k"), (1048576, "1m"), (5000, "5000")])
def test_format_tokens_round_trips(tokens, text):
    assert format_tokens(tokens) == text
    assert parse_tokens(text, "chunk") == tokens


# -- default_layer_split ----------------------------------------------------------


@pytest.mark.parametrize(
    "layers, stages, split",
    [
        (61, 2, (31, 30)),
        (61, 4, (15, 15, 16, 15)),
        (64, 4, (16, 16, 16, 16)),
        (62, 4, (15, 16, 16, 15)),
        (48, 1, (48,)),
        (7, 3, (2, 3, 2)),
    ],
)
def test_default_layer_split_is_vllms(layers, stages, split):
    got = default_layer_split(layers, stages)
    assert got == split
    assert sum(got) == layers and len(got) == stages


# -- resolve: derived fields ---------------------------------------------------------


@pytest.mark.parametrize("mode, virtual", [("cpp", 1), ("dcpp", 1), ("vpp-sync", 2), ("vpp-async", 2), ("vpp", 2)])
def test_resolve_fills_virtual_stages_split_and_kv(mode, virtual):
    raw = ServingConfig.of(mode=mode)
    assert (
        raw.parallelism.virtual_stages is None
        and raw.parallelism.layer_split is None
        and raw.memory.kv_capacity is None
    )
    c = raw.resolve()
    assert c.parallelism.virtual_stages == virtual
    assert c.parallelism.layer_split == default_layer_split(61, 2 * virtual)
    assert isinstance(c.memory.kv_capacity, int) and c.memory.kv_capacity > 0
    assert c.layers_per_rank() == ([31, 30] if virtual == 1 else [30, 31])


def test_resolve_vpp_layout_folds_back():
    c = ServingConfig.of(mode="vpp").resolve()
    assert c.stage_ranks == (0, 1, 1, 0)
    assert ServingConfig.of(mode="cpp", pp=4, tp=4).resolve().stage_ranks == (0, 1, 2, 3)


def test_resolve_keeps_explicit_split_and_capacity():
    c = ServingConfig.of(layer_split=(30, 31), kv_capacity="64k").resolve()
    assert c.parallelism.layer_split == (30, 31)
    assert c.memory.kv_capacity == 65536
    assert ServingConfig.of(chunk="24k").resolve().scheduling.chunk == 24576


def test_kv_capacity_grows_with_devices():
    caps = [ServingConfig.of(tp=tp, pp=1, **QWEN).resolve().memory.kv_capacity for tp in (1, 2, 4)]
    assert caps[0] < caps[1] < caps[2]


def test_resolve_is_idempotent():
    c = ServingConfig.of(mode="vpp", **QWEN, tp=2, pp=2).resolve()
    assert c.resolve() == c


# -- resolve: rejections with exact messages ------------------------------------------

HEADS_128 = "1, 2, 4, 8, 16, 32, 64, 128"


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(mode="nope"), "mode: unknown mode 'nope'; allowed: " + ", ".join(MODES)),
        (dict(tp=3), f"tp: must divide deepseek-v3.1's 128 attention heads; allowed: {HEADS_128}"),
        (dict(tp=0), "tp: must be a positive integer, got 0"),
        (dict(pp=0), "pp: must be a positive integer, got 0"),
        (
            dict(**QWEN, tp=1, pp=1, mode="vpp"),
            "pp: mode vpp folds the pipeline back over the ranks and needs pp >= 2, got 1",
        ),
        (
            dict(**QWEN, tp=1, pp=1, mode="vpp-sync"),
            "pp: mode vpp-sync folds the pipeline back over the ranks and needs pp >= 2, got 1",
        ),
        (dict(virtual_stages=2), "virtual_stages: mode cpp runs 1 virtual stage(s) per rank, got 2"),
        (
            dict(layer_split=(31, 30, 0)),
            "layer_split: needs 2 positive layer counts (pp x virtual stages), got 31,30,0",
        ),
        (dict(layer_split=(61,)), "layer_split: needs 2 positive layer counts (pp x virtual stages), got 61"),
        (
            dict(mode="vpp", layer_split=(31, 30)),
            "layer_split: needs 4 positive layer counts (pp x virtual stages), got 31,30",
        ),
        (dict(layer_split=(61, 0)), "layer_split: needs 2 positive layer counts (pp x virtual stages), got 61,0"),
        (dict(layer_split=(30, 30)), "layer_split: must sum to deepseek-v3.1's 61 layers, got 60"),
        (dict(layer_split=(31, 31)), "layer_split: must sum to deepseek-v3.1's 61 layers, got 62"),
        (dict(smooth_factor=0), "smooth_factor: must be in (0, 1], got 0"),
        (dict(smooth_factor=0.0), "smooth_factor: must be in (0, 1], got 0.0"),
        (dict(smooth_factor=1.5), "smooth_factor: must be in (0, 1], got 1.5"),
        (dict(smooth_factor=-0.1), "smooth_factor: must be in (0, 1], got -0.1"),
        (dict(chunk=0), "chunk: must be a positive token count, got 0"),
        (dict(min_chunk="x"), "min_chunk: expected a token count such as 24k or 24576, got 'x'"),
        (dict(max_running=0), "max_running: must be a positive integer, got 0"),
        (dict(kv_capacity=-1), "kv_capacity: must be a positive token count, got -1"),
        (
            dict(tp=1, pp=1),
            "tp: deepseek-v3.1 needs 671 GB of weights per device at tp=1 pp=1, "
            "more than ascend-910c's 58 GB usable; use more devices",
        ),
    ],
)
def test_resolve_rejects_with_exact_message(changes, message):
    with pytest.raises(ConfigError) as err:
        ServingConfig.of(**changes).resolve()
    assert str(err.value) == message


def test_smooth_factor_bounds_are_open_closed():
    assert ServingConfig.of(smooth_factor=1.0).resolve().dcpp.smooth_factor == 1.0
    assert ServingConfig.of(smooth_factor=0.01).resolve().dcpp.smooth_factor == 0.01
    assert ServingConfig.of(smooth_factor=1).resolve().dcpp.smooth_factor == 1.0


@pytest.mark.parametrize(
    "changes, field, name",
    [
        (dict(model="nope"), "model", "nope"),
        (dict(hardware="nope"), "hardware", "nope"),
    ],
)
def test_resolve_rejects_unknown_profiles(changes, field, name):
    with pytest.raises(ConfigError) as err:
        ServingConfig.of(**changes).resolve()
    text = str(err.value)
    assert text.startswith(f"{field}: unknown {field} {name!r}; known: ")
    assert "\n" not in text
    known = {"model": "qwen2.5-14b", "hardware": "a100-40g-pcie"}[field]
    assert known in text


def test_weights_that_fit_on_more_devices_resolve():
    assert ServingConfig.of(tp=8, pp=2).resolve().memory.kv_capacity > 0
    assert ServingConfig.of(**QWEN, tp=1, pp=1).resolve().memory.kv_capacity > 0


# -- dict round trip --------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        ServingConfig(),
        ServingConfig.of(**QWEN, tp=2, pp=2, mode="vpp", chunk=4096, smooth_factor=0.5),
        ServingConfig.of(mode="dcpp", layer_split=(30, 31), kv_capacity=100000, min_chunk=2048),
    ],
)
def test_to_dict_from_dict_round_trip(config):
    for c in (config, config.resolve()):
        data = c.to_dict()
        assert set(data) == {
            "model",
            "hardware",
            "tp",
            "pp",
            "mode",
            "chunk",
            "virtual_stages",
            "layer_split",
            "kv_capacity",
        } | {k.field for k in declared_knobs()}
        assert ServingConfig.from_dict(data).values() == c.values()  # a stored config comes back unresolved
        again = ServingConfig.from_dict(json.loads(json.dumps(data)))  # lists come back from JSON
        assert again.values() == c.values() and again.resolve() == c.resolve()
        assert again.to_dict() == data


# The stored runs' and exported files' key order (the flat fields of the config before it was composed of parts).
STORED_ORDER = (
    "model hardware mode tp pp virtual_stages layer_split chunk max_running decode_in_budget mixed_batches "
    "sticky_decodes output_reserve kv_capacity smooth_factor min_chunk slo_ttft_s slo_tpot_s kv_free_threshold "
    "tpot_violation ttft_low ttft_high tpot_safe alp_window_s slo_tpot_coeff rls_forgetting controller_min_chunk "
    "controller_base_chunk controller_step adaptive_threshold adaptive_fit_chunks delay_scheduling "
    "waiting_tok_threshold load_alpha base_unit delay_mode"
).split()


def test_to_dict_keeps_the_stored_key_order():
    assert list(ServingConfig().to_dict()) == STORED_ORDER
    assert list(ServingConfig().resolve().to_dict()) == STORED_ORDER


def test_each_flat_name_lands_in_its_part():
    config = ServingConfig.of(tp=4, chunk=2048, kv_capacity=9000, min_chunk=1024, ttft_low=0.2, load_alpha=0.5)
    assert config.parallelism == Parallelism(tp=4)
    assert config.scheduling == Scheduling(chunk=2048)
    assert config.memory == Memory(kv_capacity=9000)
    assert (config.dcpp.min_chunk, config.fastpp.ttft_low, config.delay.load_alpha) == (1024, 0.2, 0.5)
    assert config.part(Scheduling) is config.scheduling and config.part(DelaySettings) is config.delay
    assert config.replace(pp=4).parallelism == Parallelism(tp=4, pp=4)


def test_the_resolved_config_is_its_own_type_with_the_same_fields_filled_in():
    assert not issubclass(ResolvedConfig, ServingConfig)
    config_fields = [f.name for f in dataclasses.fields(ServingConfig)]
    assert [f.name for f in dataclasses.fields(ResolvedConfig) if f.compare] == config_fields
    resolved = ServingConfig.of(**QWEN, tp=2, pp=2).resolve()
    assert resolved.parallelism == ResolvedParallelism(tp=2, pp=2, virtual_stages=1, layer_split=(24, 24))
    assert isinstance(resolved.memory, ResolvedMemory) and resolved.memory.kv_capacity > 0
    assert resolved.part(ResolvedParallelism) is resolved.parallelism


def test_a_part_whose_field_another_part_has_is_refused():
    @dataclasses.dataclass(frozen=True)
    class Clash:
        chunk: int = 1

    with registered_part(Clash), pytest.raises(TypeError, match=r"^Clash: its field chunk is already a config field$"):
        ServingConfig.of()


def test_resolving_gives_the_resolved_type_and_replacing_gives_back_a_raw_config():
    raw = ServingConfig.of(**QWEN, tp=2, pp=2)
    resolved = raw.resolve()
    assert type(raw) is ServingConfig and type(resolved) is ResolvedConfig and resolved.resolve() is resolved
    assert (
        resolved.parallelism.layer_split == (24, 24)
        and resolved.memory.kv_capacity > 0
        and raw.parallelism.layer_split is None
    )
    assert resolved.model_profile.name == "qwen2.5-14b" and resolved.hardware_profile.name == "a100-40g-pcie"
    changed = resolved.replace(pp=4, layer_split=None)
    assert type(changed) is ServingConfig and changed.resolve().parallelism.layer_split == (12, 12, 12, 12)


def test_resolved_to_dict_is_plain_json():
    data = ServingConfig.of(mode="vpp").resolve().to_dict()
    assert data["layer_split"] == [15, 15, 16, 15]
    assert data["virtual_stages"] == 2 and data["kv_capacity"] > 0
    assert json.loads(json.dumps(data)) == data


def test_from_dict_rejects_unknown_key():
    data = ServingConfig().to_dict() | {"bogus": 1}
    with pytest.raises(ConfigError) as err:
        ServingConfig.from_dict(data)
    message = str(err.value)
    assert (
        message.startswith("bogus: not a config field; allowed: ") and "chunk, " in message and "layer_split" in message
    )
    assert "\n" not in str(err.value)


def test_from_dict_partial_uses_defaults():
    assert ServingConfig.from_dict({"mode": "vpp"}) == ServingConfig.of(mode="vpp")


def test_the_raw_form_parses_into_typed_fields():
    raw = RawConfig.of(
        {
            "tp": "4",
            "chunk": "8k",
            "layer_split": "31,30",
            "kv_capacity": " ",
            "delay_scheduling": "on",
            "ttft_low": "0.2",
        }
    )
    config = raw.parse()
    assert (
        config.parallelism.tp,
        config.scheduling.chunk,
        config.parallelism.layer_split,
        config.memory.kv_capacity,
    ) == (4, 8192, (31, 30), None)
    assert config.delay.delay_scheduling is True and config.fastpp.ttft_low == 0.2
    assert all(
        not isinstance(value, str)
        for name, value in config.values().items()
        if name not in ("model", "hardware", "mode", "delay_mode")
    )


@pytest.mark.parametrize(
    "given, message",
    [
        ({"tp": "x"}, "tp: must be a positive integer, got 'x'"),
        ({"chunk": "lots"}, "chunk: expected a token count such as 24k or 24576, got 'lots'"),
        ({"load_alpha": "-1"}, "load_alpha: must be a non-negative number, got '-1'"),
        ({"layer_split": "a,b"}, "layer_split: expected comma-separated layer counts such as 31,30, got 'a,b'"),
    ],
)
def test_the_raw_form_names_the_field_that_does_not_parse(given, message):
    with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
        RawConfig.of(given).parse()
