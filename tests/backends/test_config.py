"""ServingConfig validation, derived fields, token parsing and vLLM's layer split."""

from __future__ import annotations

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
    raw = ServingConfig(mode=mode)
    assert raw.virtual_stages is None and raw.layer_split is None and raw.kv_capacity is None
    c = raw.resolve()
    assert c.virtual_stages == virtual
    assert c.layer_split == default_layer_split(61, 2 * virtual)
    assert isinstance(c.kv_capacity, int) and c.kv_capacity > 0
    assert c.layers_per_rank() == ([31, 30] if virtual == 1 else [30, 31])


def test_resolve_vpp_layout_folds_back():
    c = ServingConfig(mode="vpp").resolve()
    assert c.stage_ranks == (0, 1, 1, 0)
    assert ServingConfig(mode="cpp", pp=4, tp=4).resolve().stage_ranks == (0, 1, 2, 3)


def test_resolve_keeps_explicit_split_and_capacity():
    c = ServingConfig(layer_split=(30, 31), kv_capacity="64k").resolve()
    assert c.layer_split == (30, 31)
    assert c.kv_capacity == 65536
    assert ServingConfig(chunk="24k").resolve().chunk == 24576


def test_kv_capacity_grows_with_devices():
    caps = [ServingConfig(tp=tp, pp=1, **QWEN).resolve().kv_capacity for tp in (1, 2, 4)]
    assert caps[0] < caps[1] < caps[2]


def test_resolve_is_idempotent():
    c = ServingConfig(mode="vpp", **QWEN, tp=2, pp=2).resolve()
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
        ServingConfig(**changes).resolve()
    assert str(err.value) == message


def test_smooth_factor_bounds_are_open_closed():
    assert ServingConfig(smooth_factor=1.0).resolve().smooth_factor == 1.0
    assert ServingConfig(smooth_factor=0.01).resolve().smooth_factor == 0.01
    assert ServingConfig(smooth_factor=1).resolve().smooth_factor == 1.0


@pytest.mark.parametrize(
    "changes, field, name",
    [
        (dict(model="nope"), "model", "nope"),
        (dict(hardware="nope"), "hardware", "nope"),
    ],
)
def test_resolve_rejects_unknown_profiles(changes, field, name):
    with pytest.raises(ConfigError) as err:
        ServingConfig(**changes).resolve()
    text = str(err.value)
    assert text.startswith(f"{field}: unknown {field} {name!r}; known: ")
    assert "\n" not in text
    known = {"model": "qwen2.5-14b", "hardware": "a100-40g-pcie"}[field]
    assert known in text


def test_weights_that_fit_on_more_devices_resolve():
    assert ServingConfig(tp=8, pp=2).resolve().kv_capacity > 0
    assert ServingConfig(**QWEN, tp=1, pp=1).resolve().kv_capacity > 0


# -- dict round trip --------------------------------------------------------------------


@pytest.mark.parametrize(
    "config",
    [
        ServingConfig(),
        ServingConfig(**QWEN, tp=2, pp=2, mode="vpp", chunk=4096, smooth_factor=0.5),
        ServingConfig(mode="dcpp", layer_split=(30, 31), kv_capacity=100000, min_chunk=2048),
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


def test_resolving_gives_the_resolved_type_and_replacing_gives_back_a_raw_config():
    raw = ServingConfig(**QWEN, tp=2, pp=2)
    resolved = raw.resolve()
    assert type(raw) is ServingConfig and type(resolved) is ResolvedConfig and resolved.resolve() is resolved
    assert resolved.layer_split == (24, 24) and resolved.kv_capacity > 0 and raw.layer_split is None
    assert resolved.model_profile.name == "qwen2.5-14b" and resolved.hardware_profile.name == "a100-40g-pcie"
    changed = resolved.replace(pp=4, layer_split=None)
    assert type(changed) is ServingConfig and changed.resolve().layer_split == (12, 12, 12, 12)


def test_resolved_to_dict_is_plain_json():
    data = ServingConfig(mode="vpp").resolve().to_dict()
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
    assert ServingConfig.from_dict({"mode": "vpp"}) == ServingConfig(mode="vpp")


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
    assert (config.tp, config.chunk, config.layer_split, config.kv_capacity) == (4, 8192, (31, 30), None)
    assert config.delay_scheduling is True and config.ttft_low == 0.2
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
