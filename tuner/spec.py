"""A tune's spec: plain data every worker runs by, and its settings as a stored study keeps them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..scenarios import load_scenario
from .objectives import GOODPUT, Objective
from .slo import Slo, parse_slo
from .space import SpaceContext
from .storage import HEARTBEAT_S

PRECISION = 0.02  # relative width of a goodput search's final bracket; objectives this close tie
SERVER_SETTINGS = ("launch", "model_path")  # backend options that change what is measured (see settings())


@dataclass(frozen=True)
class TuneSpec:
    """Everything a tuner worker needs; plain data so it can cross process boundaries."""

    study: str
    storage: str
    scenario: str
    model: str
    hardware: str
    devices: int
    objective: Objective = GOODPUT
    slo: Slo | None = None
    seed: int = 0
    requests: int | None = None
    fixed: dict[str, object] = field(default_factory=dict)
    sampler: str = "tpe"
    trials: int | None = None
    deadline: float | None = None  # time.time() after which no new trial starts
    precision: float = PRECISION
    modes: tuple[str, ...] | None = None  # restrict the search to these modes (e.g. an engine's)
    backend: str = "sim"  # the registered backend every trial runs on
    engine: str = "vllm"  # whose default config is the baseline trial
    repeats: int = 1  # seeds each finalist's goodput is measured on, for its interval
    backend_options: dict[str, object] = field(default_factory=dict)  # make_backend's keyword options
    heartbeat_s: int = HEARTBEAT_S  # on a database storage: seconds between a running trial's heartbeats

    def settings(self) -> dict[str, object]:
        """What a resumed study must agree on, as Optuna's study attributes keep it (the objective by name, the SLO
        as text).

        Of the backend options only the engine launched and the weights it
        loads count ("server"); an endpoint, a program path, a timeout or a
        log folder may change between invocations.
        """
        server = {k: self.backend_options[k] for k in SERVER_SETTINGS if k in self.backend_options} or None
        return {
            "backend": self.backend,
            "engine": self.engine,
            "scenario": self.scenario,
            "model": self.model,
            "hardware": self.hardware,
            "devices": self.devices,
            "objective": self.objective.name,
            "slo": self.slo.text() if self.slo else None,
            "seed": self.seed,
            "requests": self.requests,
            "modes": list(self.modes) if self.modes else None,
            "fixed": {k: list(v) if isinstance(v, tuple) else v for k, v in sorted(self.fixed.items())},
            "server": server,
        }


def space_context(spec: TuneSpec) -> SpaceContext:
    """The search space of `spec`: its cluster, its baseline engine, its workload's longest prompt and its backend."""
    workload = load_scenario(spec.scenario).workload(seed=spec.seed, num_requests=spec.requests)
    return SpaceContext(
        spec.model,
        spec.hardware,
        spec.devices,
        engine=spec.engine,
        longest_prompt=max(r.prompt_tokens for r in workload.requests),
        modes=spec.modes,
        backend=spec.backend,
    )


def saved_slo(settings: Mapping[str, object]) -> Slo | None:
    """The SLO a stored study's settings keep as text (`TuneSpec.settings`), read once where the study is read."""
    text = settings.get("slo")
    return parse_slo(str(text)) if text else None
