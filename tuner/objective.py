"""One tuner trial: sample a config, measure its objective on the study's backend."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

import optuna

from ..backends import (
    ConfigError,
    ResolvedConfig,
    RunCancelled,
    RunObserver,
    RunResult,
    ServerError,
    ServingConfig,
    backend_entry,
    make_backend,
)
from ..errors import Cancelled
from ..scenarios import Scenario, load_scenario
from .goodput import MIN_RATE, find_goodput, workload_ceiling
from .objectives import GOODPUT, Objective
from .recovery import recover_abandoned, watched
from .slo import Slo
from .space import searched_flags, suggest_config
from .spec import PRECISION, TuneSpec, space_context
from .storage import LOST, has_heartbeat

# Optuna stores a pruned trial's last report as its value, which optuna-dashboard shows under the metric's name:
# a goodput study says what that value of a pruned trial is (see TrialObjective.__call__), so it is not read as
# goodput.
PRUNED_VALUE = "req/s within the SLO at the rate where it failed, not a goodput"


def metric_name(objective: Objective) -> str:
    """The study's value as optuna-dashboard heads it: the objective, and what a pruned trial's value is."""
    return f"{objective.label}; a pruned trial: {PRUNED_VALUE}" if objective == GOODPUT else objective.label


FINISHED = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
LIVE_PRECISION = 0.05  # goodput bracket for live servers: their goodput moves more than 2% between repeats
LIVE_RUN_LIMIT_S = 600.0  # a live goodput search tries no rate at which the workload takes longer to arrive
# a trial's metrics as Optuna's user attributes keep them: JSON numbers, None where a run has no such value, flags
Metrics = dict[str, Any]
WAIT_S = 0.5  # how often a worker waiting on other workers' trials (on any host) looks again


class TuneInterrupted(Cancelled):
    """The tune was asked to stop; the trial in progress is abandoned (and retried on resume)."""


class StopFlag(Protocol):
    def is_set(self) -> bool: ...


@dataclass(frozen=True)
class Measurement:
    """A config's objective value and what was measured on the way."""

    value: float | None  # None when pruned
    metrics: Metrics
    result: RunResult | None  # the run the value was measured on
    rate: float | None
    upper: float | None = None  # for pruned goodput searches: a rate known to fail


def search_precision(backend: str, precision: float = PRECISION) -> float:
    """The goodput bracket on `backend`: coarser on a live server (a paced backend), whose goodput is noisier."""
    return max(precision, LIVE_PRECISION) if backend_entry(backend).capabilities.paced else precision


class Evaluator:
    """Measures configs for one spec (scenario, SLO, objective) with common random numbers."""

    def __init__(self, spec: TuneSpec, stop: StopFlag | None = None):
        self.spec = spec
        self.scenario: Scenario = load_scenario(spec.scenario)
        self.slo: Slo | None = spec.slo
        self.stop = stop
        options = dict(spec.backend_options)
        if spec.objective == GOODPUT and backend_entry(spec.backend).capabilities.endpoint:
            options.setdefault("fresh_prompts", True)  # no rate served from the prefix cache an earlier rate filled
        self.backend = make_backend(spec.backend, **options)

    def run(self, config: ResolvedConfig, rate: float | None, timeline: bool = False) -> RunResult:
        """One run of the spec's workload (ServerError when a live server served none of it)."""
        if self.stop is not None and self.stop.is_set():
            raise TuneInterrupted()
        paced = self.backend.capabilities.paced  # a live run lasts its workload: let a stop cut it short
        observer = _StopObserver(self.stop) if paced and self.stop is not None else None
        try:
            result = self.backend.run(
                self.scenario,
                config,
                rate=rate,
                seed=self.spec.seed,
                num_requests=self.spec.requests,
                observer=observer,
                timeline=timeline,
            )
        except RunCancelled:
            raise TuneInterrupted() from None
        if result.live is not None and result.live.requests and not result.records:
            at = "" if rate is None else f" (at {rate:.4g} req/s)"  # None: the scenario's own arrivals
            raise ServerError(f"server: {result.live.served_line()}{at}")
        return result

    def close(self) -> None:
        """Release what the backend holds (a launched server); a later run starts afresh."""
        self.backend.close()

    def measure(self, config: ResolvedConfig, beat: float | None = None) -> Measurement:
        """The spec's objective for one config (goodput may stop early when it cannot beat `beat`)."""
        if self.spec.objective == GOODPUT:
            if self.slo is None:
                raise ConfigError("slo: the goodput objective needs an SLO such as ttft=2s,tpot=200ms")
            slo = self.slo
            requests = self.spec.requests or self.scenario.num_requests
            ceiling = workload_ceiling(requests, slo)
            precision, floor = search_precision(self.spec.backend, self.spec.precision), MIN_RATE
            if self.backend.capabilities.paced:  # a live server: no run longer than the limit
                floor = max(floor, requests / LIVE_RUN_LIMIT_S)
            found = find_goodput(
                lambda rate: self.run(config, rate),
                slo,
                self.scenario.rate or 1.0,
                precision,
                beat,
                ceiling,
                floor,
            )
            if found.pruned:  # its goodput is unknown: only that it fails the SLO at a rate it had to beat
                return Measurement(
                    None,
                    {
                        "fails_slo_at_rps": found.upper,
                        "attainment_at_fail": found.attainment,
                        "evaluations": found.evaluations,
                    },
                    None,
                    None,
                    found.upper,
                )
            metrics = {
                "goodput_rps": found.rate,
                "attainment": found.attainment,
                "evaluations": found.evaluations,
                "capped": found.capped,
            }
            if found.result is not None:
                metrics.update(self._latency(found.result))
            return Measurement(found.rate, metrics, found.result, found.rate)
        result = self.run(config, self.scenario.rate)
        metrics = self._latency(result)
        if self.slo is not None:
            metrics["attainment"] = self.slo.attainment(result)
        value = metrics[self.spec.objective.metric]
        return Measurement(value, metrics, result, self.scenario.rate)

    def _latency(self, result: RunResult) -> Metrics:
        """The run's latency metrics, with each percentile the SLO limits (ttft_p95_s) where they lack it."""
        return {**(self.slo.observed(result) if self.slo else {}), **_latency_metrics(result)}


class _StopObserver(RunObserver):
    """Cancels a paced run when the tune is asked to stop."""

    def __init__(self, stop: StopFlag):
        self.stop = stop

    def should_stop(self) -> bool:
        return self.stop.is_set()


def _latency_metrics(result: RunResult) -> Metrics:
    s = result.summary()
    ttft = s["ttft_s"] or {}  # None: no request finished (a live run that served nothing stops before this)
    tpot = s["tpot_s"] or {}  # None: every output is one token, so there is no TPOT
    return {
        "ttft_mean_s": ttft.get("mean"),
        "ttft_p90_s": ttft.get("p90"),
        "ttft_p99_s": ttft.get("p99"),
        "tpot_mean_s": tpot.get("mean"),
        "tpot_p90_s": tpot.get("p90"),
        "tpot_p99_s": tpot.get("p99"),
        "throughput_tok_s": s["throughput_tok_s"],
        "bubble_ratio": s["bubble_ratio"],
    }


def config_key(config: Mapping[str, object]) -> str:
    """One text for equal configs, whether their tuples are tuples or (stored and read back) lists."""
    return json.dumps(config, sort_keys=True)


def finished_with(study: optuna.Study, config: dict[str, object]) -> optuna.trial.FrozenTrial | None:
    """The first finished trial that measured `config` (repeats excluded), if any."""
    key = config_key(config)
    return next(
        (
            t
            for t in study.get_trials(deepcopy=False, states=FINISHED)
            if "duplicate_of" not in t.user_attrs
            and "config" in t.user_attrs
            and config_key(t.user_attrs["config"]) == key
        ),
        None,
    )


def claim_config(trial: optuna.Trial, config: dict[str, object], heartbeat: bool) -> optuna.trial.FrozenTrial | None:
    """Record `trial`'s config and return the trial that measured or is measuring it, if another one does.

    Take the study's lock around it: then no two trials, on any host, both
    find the config unclaimed. A trial that finds one is a repeat
    (`duplicate_of`) and is answered from it, never measured.
    """
    key = config_key(config)
    earlier = finished_with(trial.study, config) or next(
        (
            t
            for t in trial.study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,))
            if t.number != trial.number
            and "duplicate_of" not in t.user_attrs
            and "config" in t.user_attrs
            and config_key(t.user_attrs["config"]) == key
            and watched(t, heartbeat)
        ),
        None,
    )
    trial.set_user_attr("config", config)
    if earlier is not None:
        trial.set_user_attr("duplicate_of", earlier.number)
    return earlier


def completed_value(trial: optuna.trial.FrozenTrial) -> float:
    """A completed trial's value (Optuna types every trial's value as optional)."""
    if trial.value is None:
        raise ValueError(f"trial {trial.number} has no value: it did not complete")
    return trial.value


def best_value(study: optuna.Study) -> float | None:
    """The best completed objective value so far, if any."""
    try:
        return study.best_value
    except ValueError:
        return None


class TrialObjective:
    """Optuna's objective function: define-by-run config, measured by an Evaluator."""

    def __init__(
        self, spec: TuneSpec, stop: StopFlag | None = None, lock: AbstractContextManager[object] | None = None
    ):
        self.spec = spec
        self.evaluator = Evaluator(spec, stop)
        self.ctx = space_context(spec)
        self.stop = stop
        self.lock = lock or nullcontext()  # the study's lock: config claims and recovery of dead workers' trials
        self.heartbeat = has_heartbeat(spec.storage)

    def __call__(self, trial: optuna.Trial) -> float:
        try:
            return self._measure(trial)
        except LOST:  # the database went away: retried as an interrupted trial (if it is down, the heartbeat's)
            trial.set_user_attr("interrupted", True)
            raise

    def _measure(self, trial: optuna.Trial) -> float:
        draft: dict[str, Any] = suggest_config(trial, self.ctx, self.spec.fixed)
        flags = searched_flags(trial.params, draft)
        trial.set_user_attr("flags", flags)  # the run store's `params`
        as_run = {name: flags[name] for name, value in trial.params.items() if flags.get(name, value) != value}
        if as_run:  # what ran where it is not what Optuna sampled: the chunk on its tile, max-running within it
            trial.set_user_attr("params_as_run", as_run)
        for limit in self.evaluator.slo.limits if self.evaluator.slo else ():
            draft.setdefault(f"slo_{limit.metric}_s", limit.limit_s)  # SLO-driven controllers steer by the study's SLO
        try:
            config = ServingConfig.of(**draft).resolve()
        except ConfigError as err:  # a sampled combination the cluster cannot run
            trial.set_user_attr("infeasible", str(err))
            raise optuna.TrialPruned(str(err)) from None
        with self.lock:
            earlier = claim_config(trial, config.to_dict(), self.heartbeat)
        if earlier is not None:  # never measure a config twice: answer with its result
            return self._answer(trial, earlier)
        prunable = self.spec.objective == GOODPUT and "role" not in trial.user_attrs  # as metric_name says
        try:
            measured = self.evaluator.measure(config, best_value(trial.study) if prunable else None)
        except TuneInterrupted:
            trial.set_user_attr("interrupted", True)
            raise
        except ServerError as err:  # that config's server failed: this trial ends, the study goes on
            trial.set_user_attr("error", str(err))
            raise optuna.TrialPruned(str(err)) from None
        finally:
            self.evaluator.close()  # the next trial gets a fresh server
        trial.set_user_attr("metrics", measured.metrics)
        if measured.value is None:
            # how near it came: the requests/s that met the SLO at the rate it failed. Every pruned trial fails
            # at the same rate (the best so far), so reporting that rate alone would tie them all, and TPE would
            # take the earliest pruned configs as its "good" ones while few trials have completed.
            trial.report((measured.upper or 0.0) * measured.metrics["attainment_at_fail"], 0)
            trial.set_user_attr("value_is", PRUNED_VALUE)
            raise optuna.TrialPruned(f"fails the SLO at {measured.upper:.4g} req/s, below the best so far")
        return measured.value

    def _answer(self, trial: optuna.Trial, earlier: optuna.trial.FrozenTrial) -> float:
        """A repeat's value: that of the trial with the same config, once it has finished."""
        while earlier.state == optuna.trial.TrialState.RUNNING:  # measured elsewhere right now: wait for it
            if self.stop is not None and self.stop.is_set():
                trial.set_user_attr("interrupted", True)
                raise TuneInterrupted()
            time.sleep(WAIT_S)
            with self.lock:  # its worker may have died: fail its trial (and queue it again) if so
                recover_abandoned(trial.study, self.heartbeat)
            earlier = next(t for t in trial.study.get_trials(deepcopy=False) if t.number == earlier.number)
        trial.set_user_attr("metrics", earlier.user_attrs.get("metrics", {}))
        if earlier.state == optuna.trial.TrialState.FAIL:
            raise optuna.TrialPruned(f"the same config as trial {earlier.number}, which failed; its retry measures it")
        if earlier.state != optuna.trial.TrialState.COMPLETE:
            raise optuna.TrialPruned(f"the same config as trial {earlier.number}, which was pruned")
        return completed_value(earlier)
