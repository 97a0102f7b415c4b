"""The Config view: a form generated from ServingConfig's fields, validated as you type, saved, run or tuned."""

from __future__ import annotations

from collections.abc import Iterable

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Grid, Horizontal, Vertical, VerticalScroll
from textual.events import Resize
from textual.widget import Widget
from textual.widgets import Button, Input, Label, Select, Static

from ...backends import (
    MODES,
    ConfigError,
    ResolvedConfig,
    ServingConfig,
    backend_entry,
    check_knobs_read,
    declared_knobs,
)
from ...store import StoreError
from ...tuner import open_store
from .fields import FormField, error_field, form_fields, normalised, parse, shown_for, to_text
from .messages import ConfigChosen, ConfigLoaded, ConfigSaved, StoreListed, WorkFailed
from .sources import FORM, describe, load_source, source_options
from .view import Session, View, choose, one_line

FIELD_WIDTH = 30  # columns per form field; the grid holds as many as fit


def field_widget(field: FormField, value: object) -> Widget:
    """The control for one field: a picker for choices and switches, a text input otherwise; its help as tooltip."""
    widget: Widget
    if field.kind == "bool":  # Select takes no falsy values: "on" and "off" stand for True and False
        widget = Select(
            [("on", "on"), ("off", "off")],
            value="on" if value else "off",
            allow_blank=False,
            compact=True,
            id=f"f-{field.name}",
        )
    elif field.kind == "choice":
        choices = list(field.choices) + ([str(value)] if value is not None and value not in field.choices else [])
        widget = Select(
            [(c, c) for c in choices],
            value=Select.NULL if value is None else str(value),
            allow_blank=field.optional,
            compact=True,
            id=f"f-{field.name}",
        )
    else:
        widget = Input(
            to_text(value), placeholder="derived" if field.optional else "", compact=True, id=f"f-{field.name}"
        )
    widget.tooltip = field.help or None
    return widget


class ConfigScreen(View):
    """Every ServingConfig field with its validation message; save as a named config, run it, or tune around it."""

    MODE = "config"
    BINDINGS = [
        Binding("ctrl+s", "save", "Save"),
        Binding("ctrl+r", "run", "Run in Live"),
        Binding("ctrl+t", "tune", "Tune from it"),
    ]

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.fields = form_fields()
        self.problem: str | None = None  # the first validation error, None when the form is valid
        self.validating = False  # a validation is queued: edits arriving together are validated once
        self.shown: dict[str, tuple[bool, str, bool]] = {}  # per field: shown, message, is an error

    def body(self) -> ComposeResult:
        with VerticalScroll(id="form"), Grid(id="fields"):
            for field in self.fields:
                with Vertical(classes="field", id=f"field-{field.name}"):
                    yield Label(field.label)
                    yield field_widget(field, self.session.config.values()[field.name])
                    yield Static("", classes="message", id=f"m-{field.name}")
        yield Static("", id="config-summary")
        with Horizontal(classes="actions", id="config-actions"):
            yield Button("Run in Live", id="run", variant="success", compact=True)
            yield Button("Tune", id="tune", variant="primary", compact=True)
            yield Input(placeholder="name", compact=True, id="config-name")
            yield Button("Save", id="save", compact=True)
            yield Select([], prompt="load config or run", compact=True, id="load")

    def on_mount(self) -> None:
        self._for_backend()

    def on_screen_resume(self) -> None:
        self._for_backend()
        self.list_store()

    def _for_backend(self) -> None:
        """Offer the knobs the Live view's backend reads (the session's), and say so above the form."""
        backend = self.session.backend
        reads = backend_entry(backend).capabilities.reads
        self.query_one("#form").border_title = (
            "serving config (fields of other modes hidden)"
            if all(reads(knob) for knob in declared_knobs())
            else f"serving config for the {backend} backend (fields of other modes, and knobs it does not read, hidden)"
        )
        self._validate()

    def on_resize(self, event: Resize) -> None:
        self.query_one("#fields").styles.grid_size_columns = max(1, (event.size.width - 4) // FIELD_WIDTH)

    def palette_commands(self) -> Iterable[SystemCommand]:
        yield SystemCommand("Run this config", "Switch to Live with the form's config", self.action_run)
        yield SystemCommand(
            "Tune from this config", "Switch to Tune with its model, hardware and tp x pp", self.action_tune
        )
        yield SystemCommand("Save config", "Save the form's config under the name given", self.action_save)

    # -- actions ------------------------------------------------------------------------------

    def action_run(self) -> None:
        """Run the form's config in the Live view."""
        if self._checked():
            self.app.post_message(ConfigChosen(self.session.config, "live"))

    def action_tune(self) -> None:
        """Tune around the form's config in the Tune view."""
        if self._checked():
            self.app.post_message(ConfigChosen(self.session.config, "tune"))

    def action_save(self) -> None:
        """Save the form's config under the name typed beside Save."""
        name = self.query_one("#config-name", Input).value.strip()
        if not name:
            self.query_one("#config-name", Input).focus()
            self.error("name: type a name for the config beside Save")
        elif self._checked():
            self._save(name, self.session.config)

    def _checked(self) -> bool:
        if self.problem is not None:
            self.error(f"the config is not valid: {self.problem}")
        return self.problem is None

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        {"run": self.action_run, "tune": self.action_tune, "save": self.action_save}[str(event.button.id)]()

    @on(Input.Changed, "#fields Input")
    @on(Select.Changed, "#fields Select")
    def _edited(self) -> None:
        if not self.validating:
            self.validating = True
            self.call_later(self._validate)

    @on(Select.Changed, "#load")
    def _load_chosen(self, event: Select.Changed) -> None:
        if event.value != Select.NULL:
            self._load(str(event.value))

    # -- workers and their messages --------------------------------------------------------------

    @work(thread=True, exclusive=True, group="config-load")
    def _load(self, source: str) -> None:
        """Read a named config or a stored run's config."""
        try:
            config = load_source(source, self.session.config, self.session.db)
        except (StoreError, ConfigError) as err:
            self.post_message(WorkFailed(one_line(err)))
            return
        self.post_message(ConfigLoaded(config))

    @work(thread=True, group="config-save")
    def _save(self, name: str, config: ServingConfig) -> None:
        """Save the config under `name` (one transaction)."""
        try:
            with open_store(self.session.db) as store:
                store.save_config(name, config.to_dict())
        except StoreError as err:
            self.post_message(WorkFailed(one_line(err)))
            return
        self.post_message(ConfigSaved(name))

    def on_store_listed(self, message: StoreListed) -> None:
        options = [o for o in source_options(self.session.config, message.configs, message.runs) if o[1] != FORM]
        self.query_one("#load", Select).set_options(options)

    def on_config_loaded(self, message: ConfigLoaded) -> None:
        for field in self.fields:
            control = self._control(field)
            value = message.config.values()[field.name]
            if isinstance(control, Input):
                control.value = to_text(value)
            elif field.kind == "bool":
                control.value = "on" if value else "off"
            elif value is None:
                control.clear()
            else:
                choose(control, field.choices, str(value))
        self.query_one("#load", Select).clear()
        self.notify(f"loaded {describe(message.config)}", timeout=4, markup=False)

    def on_config_saved(self, message: ConfigSaved) -> None:
        self.notify(f"saved config {message.name}", timeout=4, markup=False)
        self.list_store()

    # -- validation --------------------------------------------------------------------------------

    def _validate(self) -> None:
        """Build the config from the form, resolve it, and show each message under its field."""
        self.validating = False
        values: dict[str, object] = {}
        errors: dict[str, str] = {}
        for field in self.fields:
            try:
                values[field.name] = self._value(field)
            except ConfigError as err:
                errors[field.name] = str(err)
        draft = None if errors else ServingConfig.of(**values)
        resolved = None
        if draft is not None:
            try:
                resolved = draft.resolve()
                check_knobs_read(self.session.backend, resolved.values())  # a Live run there would refuse it
            except ConfigError as err:
                resolved = None
                errors[error_field(str(err), values) or ""] = str(err)
        mode = str(values.get("mode"))
        for field in self.fields:
            error = errors.get(field.name)
            self._show(
                field,
                error is not None or shown_for(field.name, mode, self.session.backend),
                error if error is not None else self._hint(field, resolved),
                error is not None,
            )
        self.problem = next(iter(errors.values()), None)
        summary = self.query_one("#config-summary", Static)
        if draft is not None and resolved is not None:
            self.session.config = normalised(draft, resolved)
            summary.update(
                Text(
                    f"valid: {resolved.devices} devices, layer split "
                    f"{','.join(map(str, resolved.parallelism.layer_split))}, KV cache {resolved.memory.kv_capacity:,} "
                    "tokens",
                    style="green",
                )
            )
        else:
            summary.update(Text(f"invalid: {self.problem}", style="bold red"))

    def _control(self, field: FormField) -> Input | Select[str]:
        """A field's control as `field_widget` made it: a picker for choices and switches, a text input otherwise."""
        if field.kind in ("bool", "choice"):
            return self.query_one(f"#f-{field.name}", Select)
        return self.query_one(f"#f-{field.name}", Input)

    def _value(self, field: FormField) -> object:
        control = self._control(field)
        if isinstance(control, Input):
            return parse(field, control.value)
        if field.kind == "bool":
            return control.value == "on"
        return None if control.value == Select.NULL else control.value

    def _hint(self, field: FormField, resolved: ResolvedConfig | None) -> str:
        """What a valid field's line says: the mode's summary, or what a blank field was derived as."""
        if resolved is None:
            return ""
        if field.name == "mode":
            return MODES[resolved.mode].summary
        if field.optional and self._value(field) is None:
            return f"derived: {to_text(resolved.values()[field.name])}"
        return ""

    def _show(self, field: FormField, shown: bool, message: str, error: bool) -> None:
        """Show or hide a field and set the line under it (its error without the field's name, or a hint)."""
        if self.shown.get(field.name) == (shown, message, error):
            return
        self.shown[field.name] = (shown, message, error)
        self.query_one(f"#field-{field.name}").display = shown
        self.query_one(f"#f-{field.name}").set_class(error, "-invalid")
        line = self.query_one(f"#m-{field.name}", Static)
        line.set_class(error, "-error")
        line.update(Text(message.partition(": ")[2] or message if error else message))
