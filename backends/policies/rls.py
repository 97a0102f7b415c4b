"""Recursive least squares with exponential forgetting (the online fit behind FastPP's ALP).

Each update folds one sample (x, y) into the estimate of theta in y ~ theta . x,
weighting a sample k updates old by lambda^k. P, the scaled inverse of the
weighted Gram matrix, starts at `initial_covariance` x I: a weak prior when
the features are of order one. Numerical guards: P is symmetrised after every
update; its trace is capped at the starting trace (forgetting inflates P along
directions the recent samples do not excite, "wind-up", which would make the
next sample in such a direction swing theta wildly); a P that stops being
finite or positive on its diagonal is reset to the prior, keeping theta.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


class RecursiveLeastSquares:
    """Online linear regression without intercept that forgets old samples geometrically."""

    def __init__(self, n_features: int, forgetting: float = 0.9975, initial_covariance: float = 1e3):
        if n_features < 1:
            raise ValueError(f"n_features must be at least 1, got {n_features}")
        if not 0 < forgetting <= 1:
            raise ValueError(f"forgetting must be in (0, 1], got {forgetting}")
        if not initial_covariance > 0:
            raise ValueError(f"initial_covariance must be positive, got {initial_covariance}")
        self.forgetting = forgetting
        self._prior = initial_covariance * np.eye(n_features)
        self._max_trace = initial_covariance * n_features
        self._theta = np.zeros(n_features)
        self._p = self._prior.copy()

    @property
    def coefficients(self) -> np.ndarray:
        """The current estimate of theta (a copy)."""
        return self._theta.copy()

    def predict(self, features: Sequence[float] | np.ndarray) -> float:
        """theta . x for one feature vector."""
        return float(self._theta @ self._vector(features))

    def update(self, features: Sequence[float] | np.ndarray, target: float) -> None:
        """Fold in one sample: y = target observed at features x."""
        x = self._vector(features)
        if not math.isfinite(target):
            raise ValueError(f"target must be finite, got {target}")
        px = self._p @ x
        gain = px / (self.forgetting + x @ px)
        self._theta = self._theta + gain * (target - self._theta @ x)
        p = (self._p - np.outer(gain, px)) / self.forgetting
        p = (p + p.T) / 2
        diagonal = p.diagonal()
        trace = float(diagonal.sum())
        if not math.isfinite(trace) or not np.isfinite(p).all() or (diagonal <= 0).any():
            p = self._prior.copy()
        elif trace > self._max_trace:
            p *= self._max_trace / trace
        self._p = p

    def _vector(self, features: Sequence[float] | np.ndarray) -> np.ndarray:
        x = np.asarray(features, dtype=float)
        if x.shape != self._theta.shape:
            raise ValueError(f"expected {self._theta.size} features, got shape {x.shape}")
        if not np.isfinite(x).all():
            raise ValueError(f"features must be finite, got {x}")
        return x
