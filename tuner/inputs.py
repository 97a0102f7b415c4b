"""From what the operator asked for to a tune's spec: every input checked before any work, the field named.

The command line and the console parse their texts (the SLO, the objective's
name) into `TuneInputs`; `build_spec` checks them and fills in the defaults.
"""

from __future__ import annotations

import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import optuna

from ..backends import (
    MODES,
    ConfigError,
    ServingConfig,
    backend_entry,
    backend_tag,
    check_footprint,
    check_knobs_read,
    load_hardware,
    weight_bytes_per_device,
)
from ..errors import InputError
from ..scenarios import load_scenario
from .objectives import GOODPUT, Objective
from .slo import Slo
from .space import default_params, engine_search, parse_fixes, suggest_config
from .spec import TuneSpec, space_context
from .storage import HEARTBEAT_S, check_storage, default_storage
from .workers import make_sampler

DEFAULT_TRIALS = 50
DEFAULT_REPEATS = 5  # seeds per finalist: a t-interval over 5 values is about +-1.2 standard deviations


class TuneInputError(InputError):
    """A tune input is not allowed; `field` names the command-line flag (and the console field) it belongs to."""

    def __init__(self, option: str, message: str):
        super().__init__(message, field=option)


@dataclass(frozen=True)
class TuneInputs:
    """A tune as the operator asks for it, its texts parsed but not yet checked (None: the default)."""

    scenario: str
    model: str = ServingConfig.model
    hardware: str = ServingConfig.hardware
    devices: int | None = None
    slo: Slo | None = None
    objective: Objective | None = None  # None: goodput when an SLO is given
    fixes: tuple[str, ...] = ()
    trials: int | None = None
    timeout: float | None = None
    study: str | None = None
    storage: str | None = None
    sampler: str = "tpe"
    seed: int = 0
    rate: float | None = None
    requests: int | None = None
    engine: str | None = None  # the engine tuned for, whose modes alone are searched (None: the hardware's default)
    backend: str = "sim"  # the registered backend trials run on
    backend_options: dict[str, object] = field(default_factory=dict)  # its make_backend options (a live launch)
    repeats: int = 1  # seeds the best and the default are measured on, for their intervals
    heartbeat_s: int = HEARTBEAT_S  # on a database storage: seconds between a running trial's heartbeats


def default_devices(model: str, hardware: str) -> int:
    """The fewest devices (a power of two) that hold the weights with a tenth of memory left for KV cache."""
    profile = ServingConfig.of(model=model, hardware=hardware)
    m, hw = profile.model_profile, profile.hardware_profile
    devices = 1
    while devices <= 1024:
        per_device = weight_bytes_per_device(m, devices, m.num_layers) / 1e9
        rank = hw.per_rank(devices)
        if per_device <= rank.memory_gb * rank.memory_utilization - rank.activation_reserve_gb - 0.1 * rank.memory_gb:
            return devices
        devices *= 2
    raise ConfigError(f"devices: {model} does not fit on up to 1024 {hardware} devices")


def default_engine(hardware: str) -> str:
    """The engine an export targets unless told: vLLM-Ascend on Ascend hardware (its profile's platform), else vLLM."""
    return "vllm-ascend" if load_hardware(hardware).platform == "ascend" else "vllm"


def build_spec(inputs: TuneInputs, db: str | Path) -> TuneSpec:
    """Validate every input before any work and build the worker spec (study and storage named after `db`)."""
    scenario = load_scenario(inputs.scenario)
    # trials keep no timeline: the config does not change the footprint
    check_footprint(
        inputs.backend,
        scenario,
        None,
        num_requests=inputs.requests,
        seed=inputs.seed,
        rate=inputs.rate,
        timeline=False,
    )
    scenario.workload(seed=inputs.seed, rate=inputs.rate, num_requests=inputs.requests)
    objective = inputs.objective or (GOODPUT if inputs.slo else None)
    if objective is None:
        raise TuneInputError("slo", "give --slo (for goodput) or --objective ttft|throughput")
    slo = inputs.slo.as_stored() if inputs.slo else None
    if objective == GOODPUT:
        if slo is None:
            raise TuneInputError("slo", "the goodput objective needs an SLO such as ttft=2s,tpot=200ms")
        if not scenario.requires_rate:
            raise TuneInputError(
                "scenario",
                f"goodput searches Poisson rates; scenario {scenario.name} has no rate "
                "(use azure-conv, sharegpt, cnn, cnn-reversed or --objective ttft)",
            )
    if inputs.trials is not None and inputs.trials < 1:
        raise TuneInputError("trials", f"must be a positive integer, got {inputs.trials}")
    if inputs.repeats < 1:
        raise TuneInputError("repeats", f"must be a positive integer, got {inputs.repeats}")
    if inputs.repeats > 1 and objective != GOODPUT:
        raise TuneInputError("repeats", "intervals are measured for the goodput objective; use --repeats 1")
    if inputs.heartbeat_s < 1:
        raise TuneInputError("heartbeat", f"must be a positive whole number of seconds, got {inputs.heartbeat_s}")
    if inputs.timeout is not None and not inputs.timeout > 0:
        raise TuneInputError("timeout", f"must be a positive number of seconds, got {inputs.timeout}")
    fixed: dict[str, Any] = parse_fixes(list(inputs.fixes))
    check_knobs_read(inputs.backend, fixed)  # a pin its backend does not read would not be what the trials ran
    devices = inputs.devices or _devices_from_fixes(fixed) or default_devices(inputs.model, inputs.hardware)
    if devices < 1:
        raise TuneInputError("devices", f"must be a positive integer, got {devices}")
    if "tp" in fixed and "pp" in fixed and int(fixed["tp"]) * int(fixed["pp"]) != devices:
        raise ConfigError(f"fix: tp x pp = {int(fixed['tp']) * int(fixed['pp'])} but --devices is {devices}")
    runs_on = backend_entry(inputs.backend).capabilities
    modes = None if set(MODES) <= set(runs_on.modes) else tuple(m for m in MODES if m in runs_on.modes)
    engine = inputs.engine or default_engine(inputs.hardware)
    modes, fixed = engine_search(engine, modes, fixed)  # every winner must launch on the engine tuned for
    trials = inputs.trials if inputs.trials is not None else (None if inputs.timeout else DEFAULT_TRIALS)
    name = inputs.study or default_study_name(
        scenario.name,
        inputs.model,
        inputs.hardware,
        devices,
        objective.name,
        slo.text() if slo else "",
        backend_tag(inputs.backend),
    )
    make_sampler(inputs.sampler, 0)
    spec = TuneSpec(
        study=name,
        storage=inputs.storage or default_storage(db),
        scenario=inputs.scenario,
        model=inputs.model,
        hardware=inputs.hardware,
        devices=devices,
        objective=objective,
        slo=slo,
        seed=inputs.seed,
        requests=inputs.requests,
        fixed=fixed,
        sampler=inputs.sampler,
        trials=trials,
        deadline=None if inputs.timeout is None else time.time() + inputs.timeout,
        modes=modes,
        backend=inputs.backend,
        backend_options=dict(inputs.backend_options),
        engine=engine,
        repeats=inputs.repeats,
        heartbeat_s=inputs.heartbeat_s,
    )
    ctx = space_context(spec)
    fixed_trial = cast(optuna.Trial, optuna.trial.FixedTrial(default_params(ctx, fixed)))  # answers as a Trial does
    default: dict[str, Any] = suggest_config(fixed_trial, ctx, fixed)
    ServingConfig.of(**default).resolve()  # the pins must leave at least the engine default runnable
    if inputs.storage:  # last: a database is reached (its tables made) only for an otherwise valid tune
        try:
            check_storage(inputs.storage)
        except ConfigError as err:
            raise TuneInputError("storage", str(err).removeprefix("storage: ")) from None
    return spec


def default_study_name(*parts: object) -> str:
    """A study name made of the settings that define it, so the same settings resume the same study."""
    return re.sub(r"[^A-Za-z0-9.@=,-]+", "-", "-".join(str(p) for p in parts if p != ""))


def _devices_from_fixes(fixed: Mapping[str, Any]) -> int | None:
    return int(fixed["tp"]) * int(fixed["pp"]) if "tp" in fixed and "pp" in fixed else None
