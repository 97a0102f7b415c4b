"""Find scenarios: the built-in catalog, user TOML files and request traces."""

from __future__ import annotations

import dataclasses
import functools
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .arrivals import AllAtOnce, ClosedLoop, Poisson, TraceArrivals
from .errors import ScenarioError, require
from .lengths import Empirical, Fixed, LengthModel, LogNormal, Replay
from .scenario import Scenario
from .traces import read_trace

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

CATALOG_PATH = Path(__file__).with_name("catalog.toml")
_PROCESSES: dict[str, type[Poisson | ClosedLoop | AllAtOnce]] = {
    cls.process: cls for cls in (Poisson, ClosedLoop, AllAtOnce)
}
_DISTS: dict[str, type[Fixed | LogNormal | Empirical]] = {cls.dist: cls for cls in (Fixed, LogNormal, Empirical)}
Kind = TypeVar("Kind", bound="DataclassInstance")  # the kinds a table names are dataclasses
_TEXT_KEYS = ("description", "source", "assumptions")
_KEYS = (*_TEXT_KEYS, "num_requests", "rate", "arrivals", "prompt", "output")
_REQUIRED_KEYS = ("num_requests", "arrivals", "prompt", "output")


def catalog() -> dict[str, Scenario]:
    """The built-in scenarios by name, in catalog order."""
    return dict(_catalog())


def load_scenario(name_or_path: str) -> Scenario:
    """A catalog scenario by name, or one read from a .toml, .csv or .jsonl file."""
    path = Path(name_or_path)
    suffix = path.suffix.lower()
    if suffix not in (".toml", ".csv", ".jsonl"):  # a catalog name (none ends so): a file is read without the catalog
        if name_or_path in _catalog():
            return _catalog()[name_or_path]
        names = ", ".join(_catalog())
        allowed = f"one of {names} or a .toml, .csv or .jsonl file"
        raise ScenarioError(f"scenario: must be {allowed}, got {name_or_path!r}")
    if not path.exists():
        raise ScenarioError(f"scenario: no such file {name_or_path}")
    require(path.is_file(), "scenario", "a file, not a folder", name_or_path)
    if suffix != ".toml":
        return _from_trace(path)
    with _context(f"{path}: "):
        try:
            table = tomllib.loads(path.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as e:
            raise ScenarioError(f"must be valid TOML ({e})") from None
        return _from_table(table.pop("name", path.stem), table, path.parent)


@functools.cache
def _catalog() -> dict[str, Scenario]:
    scenarios = {}
    for name, table in tomllib.loads(CATALOG_PATH.read_text(encoding="utf-8")).items():
        with _context(f"{CATALOG_PATH} [{name}]: "):
            scenarios[name] = _from_table(name, table, CATALOG_PATH.parent)
    return scenarios


@contextmanager
def _context(prefix: str) -> Iterator[None]:
    """Prefix any ScenarioError raised inside with ``prefix`` ("<file>: ", "<field>.")."""
    try:
        yield
    except ScenarioError as e:
        raise ScenarioError(f"{prefix}{e}") from None


def _from_table(name: str, table: dict[str, Any], base_dir: Path) -> Scenario:
    """A scenario from a catalog entry or user TOML; trace paths are relative to base_dir."""
    _check_keys("", table, _KEYS, _REQUIRED_KEYS)
    for key in _TEXT_KEYS:
        require(isinstance(table.get(key, ""), str), key, "a string", table.get(key))
    return Scenario(
        name=name,
        **{key: table.get(key, "") for key in _TEXT_KEYS},
        prompt=_length_model("prompt", table["prompt"], base_dir),
        output=_length_model("output", table["output"], base_dir),
        arrivals=_build("arrivals", "process", _PROCESSES, table["arrivals"]),
        num_requests=table["num_requests"],
        rate=table.get("rate"),
    )


def _length_model(field: str, spec: Any, base_dir: Path) -> LengthModel:
    """A length model from ``{dist = ..., ...}``; ``empirical`` draws from a trace file's column."""
    if not (isinstance(spec, dict) and spec.get("dist") == Empirical.dist):
        return _build(field, "dist", _DISTS, spec)
    _check_keys(f"{field}.", spec, ("dist", "path"), ("dist", "path"))
    path = base_dir / str(spec["path"])
    require(path.is_file(), f"{field}.path", "an existing .csv or .jsonl trace file", str(path))
    trace = read_trace(path)
    return Empirical(trace.prompt_tokens if field == "prompt" else trace.output_tokens)


def _build(field: str, kind_key: str, kinds: Mapping[str, type[Kind]], spec: Any) -> Kind:
    """``kinds[spec[kind_key]](**other keys)``, naming ``field`` in any error."""
    one_of = f"one of {', '.join(kinds)}"
    require(isinstance(spec, dict), field, f"a table with {kind_key} = {one_of}", spec)
    kind = spec.get(kind_key)
    require(kind in kinds, f"{field}.{kind_key}", one_of, kind)
    fields = dataclasses.fields(kinds[kind])
    required = tuple(f.name for f in fields if f.default is dataclasses.MISSING)
    _check_keys(f"{field}.", spec, (kind_key, *(f.name for f in fields)), (kind_key, *required))
    with _context(f"{field}."):
        return kinds[kind](**{k: v for k, v in spec.items() if k != kind_key})


def _check_keys(prefix: str, table: dict[str, Any], allowed: tuple[str, ...], required: tuple[str, ...]) -> None:
    """Reject an unknown key or a missing required one."""
    for key in table:
        if key not in allowed:
            known = ", ".join(allowed)
            raise ScenarioError(f"{prefix}{key}: is not a known key; allowed keys are {known}")
    for key in required:
        if key not in table:
            raise ScenarioError(f"{prefix}{key}: is required")


def _from_trace(path: Path) -> Scenario:
    """A scenario replaying a trace file's arrival times and lengths."""
    trace = read_trace(path)
    n = len(trace.arrival_s)
    span = trace.arrival_s[-1] - trace.arrival_s[0]
    recorded = f"mean rate {(n - 1) / span:.3g} req/s" if span > 0 else "all at one time"
    return Scenario(
        name=path.stem,
        description=f"Replay of {path.name}: {n} requests, {recorded}.",
        source=str(path),
        assumptions=(
            f"Arrival times and lengths as recorded ({trace.skipped} rows with zero tokens"
            " skipped); with a rate, all times are scaled so that the mean rate equals it."
        ),
        prompt=Replay(trace.prompt_tokens),
        output=Replay(trace.output_tokens),
        arrivals=TraceArrivals(trace.arrival_s),
        num_requests=n,
    )
