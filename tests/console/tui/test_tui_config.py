"""The console's Config view: a form generated from ServingConfig, validated inline, saved, run and tuned."""

from __future__ import annotations

import asyncio

from textual.widgets import Input, Select, Static

from pipedeck.backends import ServingConfig
from pipedeck.console.tui import PipedeckApp
from pipedeck.console.tui.config import ConfigScreen
from pipedeck.store import RunStore
from tests.tui_support import QWEN, SIZE, fill, text_in, wait_for


async def open_config(pilot) -> ConfigScreen:
    await pilot.press("4")
    form = pilot.app.screen
    assert isinstance(form, ConfigScreen)
    return form


def message(screen: ConfigScreen, field: str) -> str:
    return str(screen.query_one(f"#m-{field}", Static).content)


def test_every_config_field_has_a_control_and_an_invalid_value_shows_under_its_field(tmp_path):
    async def scenario() -> None:
        app = PipedeckApp(tmp_path / "c.duckdb", QWEN)
        async with app.run_test(size=SIZE) as pilot:
            form = await open_config(pilot)
            assert set(ServingConfig().values()) == {f.name for f in form.fields}
            assert form.query_one("#f-mode", Select).value == "cpp" and form.problem is None
            fill(form, {"f-tp": "3"})
            await pilot.pause()
            assert message(form, "tp").startswith("must divide qwen2.5-14b's 40 attention heads")
            assert form.query_one("#f-tp", Input).has_class("-invalid") and message(form, "pp") == ""
            fill(form, {"f-tp": "2", "f-chunk": "lots"})
            await pilot.pause()
            assert message(form, "tp") == "" and "expected a token count" in message(form, "chunk")
            fill(form, {"f-chunk": "16k", "f-layer_split": "20,28"})
            await pilot.pause()
            assert form.problem is None and app.session.config.scheduling.chunk == 16384
            assert app.session.config.parallelism.layer_split == (20, 28)
            assert message(form, "kv_capacity").startswith("derived: ")

    asyncio.run(scenario())


def test_knobs_bring_their_choices_and_help_to_the_form(tmp_path):
    async def scenario() -> None:
        app = PipedeckApp(tmp_path / "c.duckdb", QWEN)
        async with app.run_test(size=SIZE) as pilot:
            form = await open_config(pilot)
            fill(form, {"f-delay_scheduling": "on"})
            await pilot.pause()
            picker = form.query_one("#f-delay_mode", Select)
            assert [value for _, value in picker._options if value != Select.BLANK] == [
                "auto",
                "tpot_first",
                "e2e_first",
            ]
            fill(form, {"f-delay_mode": "e2e_first"})
            await pilot.pause()
            assert form.problem is None and app.session.config.delay.delay_mode == "e2e_first"
            tip = str(form.query_one("#f-output_reserve", Input).tooltip)
            assert tip.startswith("KV admission keeps this share") and tip.endswith("Allowed: in [0, 1].")
            assert form.query_one("#f-model", Select).tooltip is None  # not a scheduler knob

    asyncio.run(scenario())


def test_a_saved_config_runs_in_live_with_its_label_and_tunes_with_its_shape(tmp_path):
    db = tmp_path / "c.duckdb"

    async def scenario() -> None:
        app = PipedeckApp(db, QWEN)
        async with app.run_test(size=SIZE) as pilot:
            form = await open_config(pilot)
            fill(form, {"f-mode": "vpp", "config-name": "qwen-vpp"})
            await pilot.pause()
            await pilot.press("ctrl+s")
            await wait_for(
                pilot, lambda: RunStore.open(db).get_config("qwen-vpp")["mode"] == "vpp" if _has_config(db) else False
            )
            await pilot.press("1")
            live = app.screen
            picker = live.query_one("#config", Select)
            await wait_for(pilot, lambda: any(value == "named:qwen-vpp" for _, value in picker._options))
            picker.value = "named:qwen-vpp"  # Live had another config picked; the form's label is an old one
            await pilot.press("4")
            fill(form, {"f-chunk": "16k"})
            await pilot.pause()
            await pilot.press("ctrl+r")
            assert app.current_mode == "live" and picker.value == "form"
            shown = "form: qwen2.5-14b a100-40g-pcie tp2 pp2 vpp 16k"
            assert text_in(app, picker.region).startswith(shown)  # at once, before the store is read again
            await wait_for(pilot, lambda: not live.workers)  # and still once it has been
            await pilot.pause()
            assert picker.value == "form" and text_in(app, picker.region).startswith(shown)
            await pilot.press("4", "ctrl+r")  # the same config again: its value does not change, its label stays
            assert text_in(app, picker.region).startswith(shown)
            await pilot.press("4", "ctrl+t")
            assert app.current_mode == "tune"
            assert app.screen.query_one("#fix", Input).value == "tp=2 pp=2"
            assert app.screen.query_one("#model", Select).value == "qwen2.5-14b"

    asyncio.run(scenario())


def test_loading_a_named_config_fills_the_form_and_empties_the_picker(tmp_path):
    db = tmp_path / "c.duckdb"
    with RunStore.open(db) as store:
        store.save_config("qwen-vpp", QWEN.replace(mode="vpp").to_dict())

    async def scenario() -> None:
        app = PipedeckApp(db, QWEN)
        async with app.run_test(size=SIZE) as pilot:
            form = await open_config(pilot)
            picker = form.query_one("#load", Select)
            await wait_for(pilot, lambda: any(value == "named:qwen-vpp" for _, value in picker._options))
            picker.value = "named:qwen-vpp"
            await wait_for(pilot, lambda: form.query_one("#f-mode", Select).value == "vpp" and not form.workers)
            await pilot.pause()
            assert picker.is_blank() and form.problem is None and app.session.config.mode == "vpp"
        # leaving run_test raises what a worker raised: the emptied picker must not be loaded as a source

    asyncio.run(scenario())


def test_for_a_live_run_the_form_offers_only_the_knobs_a_server_is_launched_with(tmp_path):
    """The Live view's backend chooses the knobs the form offers; one set that the backend does not read is shown
    with why, and the config is not valid for a run there until it is back at its default."""

    async def scenario() -> None:
        app = PipedeckApp(tmp_path / "c.duckdb", QWEN)
        async with app.run_test(size=SIZE) as pilot:
            form = await open_config(pilot)
            fill(form, {"f-sticky_decodes": "on"})
            await pilot.pause()
            assert form.problem is None and form.query_one("#field-output_reserve").display
            await pilot.press("1")
            app.screen.query_one("#backend", Select).value = "live"
            await pilot.pause()
            await pilot.press("4")
            await pilot.pause()
            assert message(form, "sticky_decodes").startswith("set to on, but the live backend does not read it")
            assert form.query_one("#field-sticky_decodes").display and form.problem is not None
            fill(form, {"f-sticky_decodes": "off"})
            await pilot.pause()
            assert form.problem is None and "for the live backend" in str(form.query_one("#form").border_title)
            still_shown = [
                name for name in ("sticky_decodes", "output_reserve", "decode_in_budget") if _shown(form, name)
            ]
            assert still_shown == [] and _shown(form, "chunk") and _shown(form, "mixed_batches")

    asyncio.run(scenario())


def _shown(form: ConfigScreen, field: str) -> bool:
    return bool(form.query_one(f"#field-{field}").display)


def _has_config(db) -> bool:
    with RunStore.open(db) as store:
        return any(row.name == "qwen-vpp" for row in store.list_configs())
