"""Goodput search and the Optuna study over serving configs, calibration, and export of the best one.

What other packages may use is named here (`__all__`), each name imported
from its module on first use (PEP 562): importing the light ones (the SLO
parser, the storage names) does not load Optuna or SciPy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers see; at run time __getattr__ imports each name on first use
    from .calibrate import PASSES as PASSES
    from .calibrate import QUICK_PASSES as QUICK_PASSES
    from .calibrate import Fit as Fit
    from .calibrate import Measured as Measured
    from .calibrate import Point as Point
    from .calibrate import Variant as Variant
    from .calibrate import constants_to_fit as constants_to_fit
    from .calibrate import fit as fit
    from .calibrate import measure as measure
    from .calibrate import plan as plan
    from .calibrate import profile as profile
    from .calibrate import profiled_points as profiled_points
    from .calibrated import Provenance as Provenance
    from .calibrated import calibrated_profile as calibrated_profile
    from .calibrated import calibration_record as calibration_record
    from .confidence import Interval as Interval
    from .confidence import clear_win as clear_win
    from .confidence import interval_text as interval_text
    from .confidence import stored_interval as stored_interval
    from .confidence import win_text as win_text
    from .confirm import DEFAULT_TOP as DEFAULT_TOP
    from .confirm import ConfirmRow as ConfirmRow
    from .confirm import confirm_study as confirm_study
    from .confirm import ranks as ranks
    from .cross_rates import like_for_like as like_for_like
    from .cross_rates import study_runs as study_runs
    from .explain import KnobEffect as KnobEffect
    from .explain import effects_json as effects_json
    from .explain import knob_effects as knob_effects
    from .export import best_from_json as best_from_json
    from .export import export_best as export_best
    from .export import write_export as write_export
    from .importance import MIN_TRIALS as MIN_TRIALS
    from .importance import too_few_text as too_few_text
    from .inputs import DEFAULT_REPEATS as DEFAULT_REPEATS
    from .inputs import DEFAULT_TRIALS as DEFAULT_TRIALS
    from .inputs import TuneInputError as TuneInputError
    from .inputs import TuneInputs as TuneInputs
    from .inputs import build_spec as build_spec
    from .inputs import default_engine as default_engine
    from .objectives import GOODPUT as GOODPUT
    from .objectives import OBJECTIVES as OBJECTIVES
    from .objectives import Objective as Objective
    from .objectives import objective_named as objective_named
    from .slo import DEFAULT_PERCENTILE as DEFAULT_PERCENTILE
    from .slo import METRICS as METRICS
    from .slo import Limit as Limit
    from .slo import Slo as Slo
    from .slo import SLOError as SLOError
    from .slo import parse_slo as parse_slo
    from .space import default_params as default_params
    from .space import engine_search as engine_search
    from .space import knob_settings as knob_settings
    from .space import parse_fixes as parse_fixes
    from .space import suggest_config as suggest_config
    from .spec import TuneSpec as TuneSpec
    from .spec import space_context as space_context
    from .storage import GRACE_BEATS as GRACE_BEATS
    from .storage import HEARTBEAT_S as HEARTBEAT_S
    from .storage import check_storage as check_storage
    from .storage import default_storage as default_storage
    from .storage import open_storage as open_storage
    from .storage import shown as shown
    from .study import Progress as Progress
    from .study import TrialSummary as TrialSummary
    from .study import TuneOutcome as TuneOutcome
    from .study import open_store as open_store
    from .study import pull_study as pull_study
    from .study import recommended_trial as recommended_trial
    from .study import run_study as run_study
    from .study import saved_settings as saved_settings
    from .verdict import FREE_KNOBS as FREE_KNOBS
    from .verdict import Verdict as Verdict
    from .verdict import stored_verdict as stored_verdict
    from .workers import SAMPLERS as SAMPLERS
    from .workers import make_sampler as make_sampler

# each public name -> the module under this package that defines it (tests/test_layering.py: the same names as above)
_WHERE = {
    "Fit": "calibrate",
    "Measured": "calibrate",
    "Point": "calibrate",
    "Variant": "calibrate",
    "PASSES": "calibrate",
    "QUICK_PASSES": "calibrate",
    "constants_to_fit": "calibrate",
    "fit": "calibrate",
    "measure": "calibrate",
    "plan": "calibrate",
    "profile": "calibrate",
    "profiled_points": "calibrate",
    "Provenance": "calibrated",
    "calibrated_profile": "calibrated",
    "calibration_record": "calibrated",
    "Interval": "confidence",
    "clear_win": "confidence",
    "interval_text": "confidence",
    "stored_interval": "confidence",
    "win_text": "confidence",
    "ConfirmRow": "confirm",
    "DEFAULT_TOP": "confirm",
    "confirm_study": "confirm",
    "ranks": "confirm",
    "like_for_like": "cross_rates",
    "study_runs": "cross_rates",
    "KnobEffect": "explain",
    "effects_json": "explain",
    "knob_effects": "explain",
    "best_from_json": "export",
    "export_best": "export",
    "write_export": "export",
    "MIN_TRIALS": "importance",
    "too_few_text": "importance",
    "DEFAULT_REPEATS": "inputs",
    "DEFAULT_TRIALS": "inputs",
    "TuneInputError": "inputs",
    "TuneInputs": "inputs",
    "build_spec": "inputs",
    "default_engine": "inputs",
    "GOODPUT": "objectives",
    "OBJECTIVES": "objectives",
    "Objective": "objectives",
    "objective_named": "objectives",
    "DEFAULT_PERCENTILE": "slo",
    "Limit": "slo",
    "METRICS": "slo",
    "SLOError": "slo",
    "Slo": "slo",
    "parse_slo": "slo",
    "default_params": "space",
    "engine_search": "space",
    "knob_settings": "space",
    "parse_fixes": "space",
    "suggest_config": "space",
    "TuneSpec": "spec",
    "space_context": "spec",
    "GRACE_BEATS": "storage",
    "HEARTBEAT_S": "storage",
    "check_storage": "storage",
    "default_storage": "storage",
    "open_storage": "storage",
    "shown": "storage",
    "Progress": "study",
    "TrialSummary": "study",
    "TuneOutcome": "study",
    "open_store": "study",
    "pull_study": "study",
    "recommended_trial": "study",
    "run_study": "study",
    "saved_settings": "study",
    "FREE_KNOBS": "verdict",
    "Verdict": "verdict",
    "stored_verdict": "verdict",
    "SAMPLERS": "workers",
    "make_sampler": "workers",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> object:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
