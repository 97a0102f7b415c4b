"""A knob is declared once: a throwaway knob declared here reaches the config, validation, the CLI, the search
space, the Config form and the export mapping, says which backends read it, and is gone again once its part is
removed."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys
import textwrap

import optuna
import pytest
from textual.widgets import Input, Static

from pipedeck.backends import ConfigError, ServingConfig, backends_reading, declared_knobs, knob_named, plan_launch
from pipedeck.backends.knobs import registered_part
from pipedeck.backends.launch import Flag
from pipedeck.backends.parts import Scheduling
from pipedeck.console.tui import PipedeckApp
from pipedeck.console.tui.config import ConfigScreen
from pipedeck.console.tui.fields import form_fields, shown_for
from pipedeck.tuner import parse_fixes, suggest_config
from pipedeck.tuner.space import SpaceContext, dimensions
from tests.tui_support import QWEN, SIZE, fill

# The one declaration: a part with one knob, read by DCPP only, searched in 2..5, spelled --throwaway-depth by vLLM
# (so a live server, launched with that flag, reads it as the simulator does).
DECLARATION = textwrap.dedent(
    """
    from dataclasses import dataclass

    from pipedeck.backends.knobs import EngineFlag, Search, knob


    @dataclass(frozen=True)
    class Throwaway:
        throwaway_depth: int = knob(
            3,
            kind="int",
            low=1,
            high=9,
            unit="steps",
            modes=("dcpp",),
            help="Throwaway: a knob only this test declares.",
            search=Search(low=2, high=5),
            engines={"vllm": EngineFlag(flags=("--throwaway-depth",))},
        )
    """
)
namespace: dict[str, object] = {}
exec(DECLARATION, namespace)
Throwaway = namespace["Throwaway"]


@pytest.fixture
def throwaway():
    with registered_part(Throwaway):
        yield


def test_the_config_holds_it_and_resolve_validates_it(throwaway):
    resolved = ServingConfig.of(mode="dcpp", throwaway_depth="4").resolve()
    assert resolved.part(Throwaway) == Throwaway(throwaway_depth=4)
    assert resolved.to_dict()["throwaway_depth"] == 4
    assert ServingConfig.from_dict(resolved.to_dict()).resolve() == resolved
    assert ServingConfig().values()["throwaway_depth"] == 3  # its declared default
    with pytest.raises(ConfigError, match=r"^throwaway_depth: must be in \[1, 9\], got 12$"):
        ServingConfig.of(throwaway_depth=12).resolve()


def test_once_removed_it_is_no_config_field():
    with registered_part(Throwaway):
        pass
    with pytest.raises(ConfigError, match=r"^throwaway_depth: not a config field; allowed: "):
        ServingConfig.of(throwaway_depth=4)
    with registered_part(Scheduling):  # registering a part already there leaves it there
        pass
    assert "max_running" in {knob.field for knob in declared_knobs()}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """`pipedeck ARGS` in a fresh interpreter where the throwaway part is registered before the CLI loads."""
    code = DECLARATION + textwrap.dedent(
        """
        import sys

        from pipedeck.backends.knobs import register_part
        from pipedeck.console.cli import main

        register_part(Throwaway)
        main(sys.argv[1:])
        """
    )
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120)


def test_the_cli_offers_it_and_refuses_a_bad_value_in_one_line():
    shown = cli("simulate", "--help")
    assert shown.returncode == 0 and "--throwaway-depth INT" in shown.stdout and "only this test" in shown.stdout
    refused = cli("simulate", "--mode", "dcpp", "--throwaway-depth", "deep", "--no-store")
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "pipedeck: error: throwaway_depth: must be a number in [1, 9], got 'deep'"
    ]


def test_the_tuner_searches_it_in_its_modes_only(throwaway):
    assert "throwaway-depth" in [dim.flag for dim in dimensions()]
    ctx = SpaceContext(model="qwen2.5-14b", hardware="a100-40g-pcie", devices=4)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    for mode, searched in (("dcpp", True), ("cpp", False)):
        trial = study.ask()
        draft = suggest_config(trial, ctx, {"mode": mode, "tp": 2})
        assert ("throwaway_depth" in draft) is searched and ("throwaway-depth" in trial.params) is searched
        if searched:
            assert 2 <= draft["throwaway_depth"] <= 5
    assert parse_fixes(["throwaway-depth=7"]) == {"throwaway_depth": 7}


def test_the_config_form_shows_it_for_its_modes_and_explains_a_bad_value(throwaway, tmp_path):
    field = next(f for f in form_fields() if f.name == "throwaway_depth")
    assert field.kind == "text" and field.value_type is int and "Allowed: in [1, 9]" in field.help
    assert shown_for("throwaway_depth", "dcpp", "sim") and not shown_for("throwaway_depth", "cpp", "sim")
    assert shown_for("throwaway_depth", "dcpp", "live")  # vLLM is launched with it

    async def scenario() -> None:
        app = PipedeckApp(tmp_path / "c.duckdb", QWEN)
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("4")
            form = pilot.app.screen
            assert isinstance(form, ConfigScreen)
            fill(form, {"f-mode": "dcpp", "f-pp": "2", "f-throwaway_depth": "12"})
            await pilot.pause()
            assert form.query_one("#f-throwaway_depth", Input).has_class("-invalid")
            assert str(form.query_one("#m-throwaway_depth", Static).content) == "must be in [1, 9], got '12'"

    asyncio.run(scenario())


def test_every_backend_reads_it_as_an_engine_is_launched_with_it_and_only_the_simulator_without(throwaway):
    knob = knob_named("throwaway_depth")
    assert knob is not None and knob.set_at_launch and backends_reading(knob) == ["sim", "live"]
    modelled_only = dataclasses.replace(knob, engines={})  # the same knob, but no engine takes it
    assert not modelled_only.set_at_launch and backends_reading(modelled_only) == ["sim"]


def test_an_engine_that_spells_it_gets_its_flag_in_the_launch(throwaway):
    dcpp = ServingConfig.of(mode="dcpp", throwaway_depth=4).resolve()
    assert Flag("--throwaway-depth", 4) in plan_launch(dcpp, "vllm-ascend").launch.flags
    assert not any(f.name == "--throwaway-depth" for f in plan_launch(dcpp, "sglang").launch.flags)  # not spelled
    cpp = ServingConfig().resolve()  # a mode that does not read it
    assert not any(f.name == "--throwaway-depth" for f in plan_launch(cpp, "vllm-ascend").launch.flags)
