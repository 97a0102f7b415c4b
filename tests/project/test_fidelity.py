"""benchmarks/fidelity.py: its figure list, its table and its profile overrides, on the cheap figures only.

The section-B goodputs take minutes and are not run here; section A's
figures take a fraction of a second.
"""

import importlib.util
import math
import sys
from importlib import resources

import pytest

from pipedeck.backends import ServingConfig, load_hardware
from pipedeck.backends.config import SGLANG_MIXED_CHUNK
from pipedeck.tuner import TuneSpec, parse_slo
from pipedeck.tuner.objective import Evaluator
from tests.paths import ROOT


def _load_fidelity():
    spec = importlib.util.spec_from_file_location("fidelity", ROOT / "benchmarks" / "fidelity.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


fidelity = _load_fidelity()
SECTION_A = [f for f in fidelity.FIGURES if f.section == "A"]


@pytest.fixture(scope="module")
def measured_a():
    return fidelity.collect_a()


def test_every_section_a_figure_is_measured_and_has_one_row(measured_a):
    rows = fidelity.build_rows(SECTION_A, measured_a)
    assert [r.key for r in rows] == [f.key for f in SECTION_A]
    assert set(measured_a) == {f.key for f in SECTION_A}  # nothing measured that no figure names
    for figure, row in zip(SECTION_A, rows):
        assert row.pipedeck != "not measured", figure.key
        value = measured_a[figure.key].value
        assert math.isfinite(value), figure.key
        if figure.error == "rel":
            assert row.error == f"{value / figure.paper - 1:+.1%}"
        if figure.lo is not None or figure.hi is not None:
            assert row.check in ("pass", "FAIL"), figure.key


def test_a_figure_nobody_measured_says_so():
    rows = fidelity.build_rows(SECTION_A[:1], {})
    assert (rows[0].pipedeck, rows[0].error, rows[0].check) == ("not measured", "", "")


def test_range_and_ordering_checks():
    gap = fidelity.BY_KEY["A.gap_64k"]  # DCPP 1.6-3.6% faster: -3.6..-1.6
    assert (fidelity.error_of(gap, -2.0), fidelity.check_of(gap, -2.0)) == (0.0, "pass")
    assert fidelity.error_of(gap, -1.0) == pytest.approx(0.6) and fidelity.check_of(gap, -1.0) == "FAIL"
    assert fidelity.error_of(gap, -4.0) == pytest.approx(-0.4) and fidelity.check_of(gap, -4.0) == "FAIL"
    slower = fidelity.BY_KEY["A.gap_512k"]
    assert fidelity.check_of(slower, 1.0) == "pass" and fidelity.check_of(slower, -1.0) == "FAIL"


def test_paper_figures_match_the_calibration_tests():
    from tests.backends.sim import test_calibration_ascend, test_calibration_gpu

    for mode, terms in test_calibration_ascend.PAPER_512K.items():
        for term, value in terms.items():
            assert fidelity.BY_KEY[f"A.{mode}.{term}"].paper == value
    for scheme, value in test_calibration_gpu.PAPER.items():
        assert fidelity.BY_KEY[f"B.{scheme}"].paper == value
    assert fidelity.STATIC_CHUNKS == test_calibration_gpu.STATIC_CHUNKS
    assert fidelity.SEEDS == test_calibration_gpu.SEEDS


def test_each_fit_uses_figures_of_its_section_and_refits_constants_its_sources_name():
    for section, keys in fidelity.FIT_FIGURES.items():
        assert keys and all(fidelity.BY_KEY[k].section == section and fidelity.BY_KEY[k].tol > 0 for k in keys)
        names = fidelity.fitted_constants(fidelity.HARDWARE[section], section)
        sources = load_hardware(fidelity.HARDWARE[section]).sources
        assert names and all(f"calibration.md {section}" in sources[n] for n in names)
        other = "B" if section == "A" else "A"
        assert not fidelity.fitted_constants(fidelity.HARDWARE[section], other)


def test_an_override_reaches_the_simulator_and_leaves_the_packaged_profile_alone(tmp_path, measured_a):
    name = fidelity.HARDWARE["A"]
    packaged = resources.files("pipedeck.backends.profiles").joinpath("hardware", f"{name}.toml").read_text()
    space = fidelity.Space.of("A")
    x = [0.0] * len(space.names)
    x[space.names.index("collective_latency_us")] = math.log(1.5)
    path = space.path(x, str(tmp_path))
    assert load_hardware(path).collective_latency_us == pytest.approx(
        1.5 * space.current[space.names.index("collective_latency_us")]
    )
    keys = ["A.cpp.exposed_comm", "A.dcpp.total"]
    changed = fidelity.collect_a(path, keys)
    assert all(changed[k].value > measured_a[k].value for k in keys)
    assert space.path([0.0] * len(space.names), str(tmp_path)) == name
    assert resources.files("pipedeck.backends.profiles").joinpath("hardware", f"{name}.toml").read_text() == packaged


def test_alp_predictor_errors_are_read_from_outside_the_controller():
    spec = TuneSpec(
        study="t",
        storage="unused",
        scenario="azure-conv",
        model="qwen2.5-32b",
        hardware="a100-40g-pcie",
        devices=4,
        slo=parse_slo(fidelity.SLO),
        requests=200,
    )
    config = ServingConfig.of(
        model="qwen2.5-32b", hardware="a100-40g-pcie", **SGLANG_MIXED_CHUNK, **fidelity.ALP
    ).resolve()
    errors = fidelity.alp_errors(Evaluator(spec), config, 8.0)
    assert errors["steps"] > 100
    assert 0 <= errors["mape_attention"] < errors["mape_no_attention"]
    assert fidelity.MODES["fastpp-alp"].chunk_policy.__name__ != "make"  # the registry is restored
