"""Backends by name: the ones installed, found through the `pipedeck.backends` entry-point group.

Each backend's package declares itself (a `BackendDeclaration`: name, title,
capabilities, factory, footprint estimate) and names that declaration in its
distribution's entry points, the way Harlequin finds its adapters:

    [project.entry-points."pipedeck.backends"]
    mine = "my_package.declaration:MINE"

The CLI (`--backend NAME`), the tuner and the console look backends up here
and never construct one by hand; this module names none of them. A
declaration loads when the registry is first asked, so it should import
little (the live backend's HTTP stack loads with its first run).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator, Mapping
from importlib.metadata import entry_points

from ..errors import RuntimeFailure
from .base import Backend, BackendDeclaration, Capabilities
from .errors import ConfigError
from .knobs import Knob, knob_default, knob_named, setting_text

GROUP = "pipedeck.backends"


class BackendLoadError(RuntimeFailure):
    """An installed backend's entry point could not be loaded, or did not name a declaration; one line naming it."""


@functools.cache
def backends() -> dict[str, BackendDeclaration]:
    """Every installed backend's declaration by name (read once): the default (untagged) one first, then by name."""
    found: dict[str, BackendDeclaration] = {}
    for point in entry_points(group=GROUP):
        try:
            declared = point.load()
        except Exception as err:  # noqa: BLE001 - whatever a broken plugin raises becomes one line naming it
            raise BackendLoadError(
                f"backend: the {GROUP} entry point {point.name!r} ({point.value}) failed to load: "
                f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            ) from None
        if not isinstance(declared, BackendDeclaration) or declared.name != point.name:
            raise BackendLoadError(
                f"backend: the {GROUP} entry point {point.name!r} ({point.value}) names no "
                f"BackendDeclaration called {point.name!r}"
            )
        found[point.name] = declared
    if not found:
        raise BackendLoadError(f"backend: no backend is installed (no {GROUP} entry point); reinstall pipedeck")
    return {name: found[name] for name in sorted(found, key=lambda name: (found[name].shown, name))}


def backend_entry(name: str) -> BackendDeclaration:
    """The installed backend called `name`; a one-line ConfigError naming the choices otherwise."""
    try:
        return backends()[name]
    except KeyError:
        raise ConfigError(f"backend: unknown backend {name!r}; allowed: {', '.join(backends())}") from None


def capabilities_of(name: str) -> Capabilities | None:
    """What the backend a stored run names can do; None if no such backend is installed here."""
    found = backends().get(name)
    return None if found is None else found.capabilities


def backend_tag(name: str) -> str:
    """How listings tag a run on backend `name`: its name, or '' for a backend that declares itself untagged."""
    found = backends().get(name)
    return "" if found is not None and not found.shown else name


def backends_reading(knob: Knob) -> list[str]:
    """The installed backends whose runs apply `knob`, in the registry's order."""
    return [name for name, found in backends().items() if found.capabilities.reads(knob)]


def check_knobs_read(backend: str, values: Mapping[str, object]) -> None:
    """Refuse, in one line naming the field and the backends that read it, a knob of `values` (config fields by
    name) set away from its default on `backend`, which does not read it: the run would not be what it says."""
    capabilities = backend_entry(backend).capabilities
    for name, value in values.items():
        knob = knob_named(name)
        if knob is None or capabilities.reads(knob) or value == knob_default(name):
            continue
        raise ConfigError(
            f"{name}: set to {setting_text(value)}, but the {backend} backend does not read it (no serving engine "
            f"is launched with it); backends that read it: {', '.join(backends_reading(knob))}"
        )


def make_backend(name: str, **options: object) -> Backend:
    """A new backend of the installed kind `name` (not yet checked; `open_backend` checks and closes it)."""
    return backend_entry(name).make(**options)


@contextlib.contextmanager
def open_backend(name: str, **options: object) -> Iterator[Backend]:
    """A new backend of kind `name`, checked that it can run, and closed however the block ends."""
    backend = make_backend(name, **options)
    try:
        backend.check()
        yield backend
    finally:
        backend.close()
