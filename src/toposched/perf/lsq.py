"""Bounded nonlinear least squares (Levenberg-Marquardt in a logistic change of variables)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

Vector = NDArray[np.float64]
Residuals = Callable[[Vector], Vector]

_MAX_STEP = 2.0  # the longest step in the free variables (a factor of e^2 in odds)
_EDGE = 1e-3  # how close to a bound a search may start (the map is flat at the bounds)


@dataclass(frozen=True)
class Solution:
    """The best point found, its sum of squared residuals and the iterations it took."""

    x: Vector
    cost: float
    iterations: int


def _to_free(x: Vector, low: Vector, high: Vector) -> Vector:
    share = np.clip((x - low) / (high - low), _EDGE, 1.0 - _EDGE)
    return np.asarray(np.log(share / (1.0 - share)), dtype=np.float64)


def _to_bounded(z: Vector, low: Vector, high: Vector) -> Vector:
    # A logistic map keeps every trial point inside its bounds, so the model never sees an
    # unphysical value (a negative bandwidth, an overlap above 1) however the step goes.
    return np.asarray(low + (high - low) / (1.0 + np.exp(-np.clip(z, -40.0, 40.0))))


def least_squares(
    residuals: Residuals,
    starts: Sequence[Sequence[float]],
    low: Sequence[float],
    high: Sequence[float],
    *,
    max_iterations: int = 200,
    tolerance: float = 1e-10,
) -> Solution:
    """Minimise sum(residuals(x)^2) with low <= x <= high, from each start; keep the best.

    Levenberg-Marquardt with a forward-difference Jacobian, run on z where
    x = low + (high - low) * logistic(z). Deterministic: no random restarts.
    """
    lo = np.asarray(low, dtype=np.float64)
    hi = np.asarray(high, dtype=np.float64)
    if lo.shape != hi.shape or np.any(hi <= lo):
        raise ValueError("every parameter needs low < high")
    best: Solution | None = None
    for start in starts:
        found = _levenberg_marquardt(
            lambda z: residuals(_to_bounded(z, lo, hi)),
            _to_free(np.asarray(start, dtype=np.float64), lo, hi),
            max_iterations,
            tolerance,
        )
        solution = Solution(_to_bounded(found.x, lo, hi), found.cost, found.iterations)
        if best is None or solution.cost < best.cost:
            best = solution
    if best is None:
        raise ValueError("give at least one start")
    return best


def _levenberg_marquardt(
    residuals: Residuals, z: Vector, max_iterations: int, tolerance: float
) -> Solution:
    r = residuals(z)
    cost = float(r @ r)
    damping = 1e-3
    step_size = 1e-6
    for iteration in range(1, max_iterations + 1):
        jacobian = np.empty((r.size, z.size))
        for i in range(z.size):
            dz = np.zeros_like(z)
            dz[i] = step_size
            jacobian[:, i] = (residuals(z + dz) - r) / step_size
        gradient = jacobian.T @ r
        normal = jacobian.T @ jacobian
        scale = np.diag(normal).copy() + 1e-12
        while True:
            step = np.linalg.solve(normal + damping * np.diag(scale), -gradient)
            # A long step lands where the logistic map is flat and the search stalls there.
            longest = float(np.max(np.abs(step)))
            if longest > _MAX_STEP:
                step *= _MAX_STEP / longest
            trial = residuals(z + step)
            trial_cost = float(trial @ trial)
            if trial_cost < cost:
                gain = cost - trial_cost
                z, r, cost = z + step, trial, trial_cost
                damping = max(damping / 3.0, 1e-12)
                break
            damping *= 4.0
            if damping > 1e10:
                return Solution(z, cost, iteration)
        if gain <= tolerance * max(cost, 1e-12):
            return Solution(z, cost, iteration)
    return Solution(z, cost, max_iterations)
