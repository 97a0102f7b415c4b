"""Which searched parameters moved the objective most: Optuna's fANOVA importances, only over enough trials.

Optuna's default importance evaluator (fANOVA) fits a random forest (64
trees, leaves of one trial) to the completed trials and splits the
objective's variance among the parameters. Over a handful of trials each
leaf is one trial, so the split follows single measurements and the ranking
changes with the forest's seed. Below `MIN_TRIALS` completed trials the
importances are not shown, and wherever they are shown they say how many
trials they rest on.
"""

from __future__ import annotations

import warnings

import optuna

MIN_TRIALS = 10  # as many as Optuna's TPE sampler takes (n_startup_trials) before it trusts a model of the objective


def completed_count(study: optuna.Study) -> int:
    """The study's completed trials, those importances are drawn from."""
    return len(study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)))


def param_importances(study: optuna.Study) -> dict[str, float] | None:
    """Each searched parameter's share of the objective's variance, largest first; None below `MIN_TRIALS`
    completed trials or where Optuna cannot compute them (no parameter varies)."""
    if completed_count(study) < MIN_TRIALS:
        return None
    try:
        with warnings.catch_warnings():  # "some regimes have less than 2 trials" on conditional parameters
            warnings.simplefilter("ignore")
            return dict(optuna.importance.get_param_importances(study))
    except (ValueError, RuntimeError):
        return None


def too_few_text(count: int) -> str:
    """Why no importances are shown for a study with `count` completed trials."""
    return (
        f"Parameter importances need at least {MIN_TRIALS} completed trials (Optuna's fANOVA ranks noise on "
        f"fewer); this study has {count}"
    )
