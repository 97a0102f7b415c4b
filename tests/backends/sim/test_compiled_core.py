"""The compiled simulator core gives the pure-Python core's results to the last bit, and runs only where it should."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from pipedeck.backends import MODES, ServingConfig
from pipedeck.backends.sim import SimBackend, compiled, core_status
from pipedeck.backends.sim.corebuild import CORE, choose_core, source_digest
from pipedeck.backends.sim.digest import run_digest
from pipedeck.scenarios import load_scenario
from tests.backends.sim.test_sim_paths import RARE, SCENARIOS, TRACE
from tests.paths import ROOT


def digests() -> dict[str, str]:
    """The digest of every mode on every scenario of test_sim_paths, and of its rare cases, in this process's core."""
    cases = {
        f"{name} {mode}": (scenario, rate, requests, {**fields, "mode": mode})
        for name, (scenario, rate, requests, fields) in SCENARIOS.items()
        for mode in sorted(MODES)
        if TRACE.is_dir() or not scenario.startswith(str(TRACE))
    }
    cases.update(RARE)
    return {
        name: run_digest(
            SimBackend().run(
                load_scenario(scenario), ServingConfig.of(**fields).resolve(), rate=rate, num_requests=requests
            )
        )
        for name, (scenario, rate, requests, fields) in cases.items()
    }


def pure_python(code: str) -> str:
    """What `code` prints in a fresh interpreter with PIPEDECK_PURE set."""
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={**os.environ, "PIPEDECK_PURE": "1"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


@pytest.mark.skipif(not compiled(), reason=core_status())
def test_the_compiled_core_gives_the_pure_cores_results_on_every_mode():
    pure = json.loads(
        pure_python(
            "import json; from pipedeck.backends.sim import compiled; "
            "from tests.backends.sim.test_compiled_core import digests; "
            "print(json.dumps([compiled(), digests()]))"
        )
    )
    assert pure[0] is False
    assert digests() == pure[1]


def test_pipedeck_pure_runs_the_core_from_its_sources():
    printed = pure_python(
        "from pipedeck.backends import sim; from pipedeck.backends.sim import engine, scheduler; "
        "print(sim.compiled(), engine.__file__, scheduler.__file__)"
    )
    sim = ROOT / "backends" / "sim"
    assert printed == f"False {sim / 'engine.py'} {sim / 'scheduler.py'}"


def test_a_compiled_core_runs_only_when_built_from_the_sources_beside_it(tmp_path, monkeypatch):
    package = tmp_path / "fakecore"
    package.mkdir()
    for name in CORE:
        (package / f"{name}.py").write_text(f"# {name}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delenv("PIPEDECK_PURE", raising=False)
    assert choose_core("fakecore", package) == (False, "pure Python (installed without a compiled core)")
    (package / "__init__.py").write_text("")
    (package / "_core_digest.py").write_text(f'DIGEST = "{source_digest(package)}"\n')
    assert choose_core("fakecore", package) == (True, "compiled with mypyc")
    (package / "engine.py").write_text("# edited after the build\n")
    assert choose_core("fakecore", package)[0] is False
    assert "changed since it was compiled" in choose_core("fakecore", package)[1]


@pytest.mark.skipif(not os.environ.get("CI"), reason="only CI must have built the core; a developer may run it pure")
def test_ci_runs_the_compiled_core():
    assert compiled(), core_status()
