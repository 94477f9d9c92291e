"""How well predicted step times match measured ones, as placement ratios T(p)/T(1 GPU)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations

from toposched.perf.measurements import Measurement

PAIR_GAP = 0.10
"""Two placements are ordered by the protocol when their measured times differ by more."""


@dataclass(frozen=True)
class RatioError:
    """One placement shape at one batch: measured and predicted T(p)/T(1), and the error."""

    shape: tuple[int, ...]
    batch: int
    measured: float
    predicted: float

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1.0


@dataclass(frozen=True)
class Metrics:
    """The protocol's figures for one job: ratio errors, and the ordering of placement pairs."""

    errors: tuple[RatioError, ...]
    pairs: int
    pairs_ordered: int

    @property
    def median(self) -> float:
        return statistics.median(abs(e.error) for e in self.errors) if self.errors else 0.0

    @property
    def worst(self) -> float:
        return max((abs(e.error) for e in self.errors), default=0.0)

    @property
    def pair_accuracy(self) -> float:
        return self.pairs_ordered / self.pairs if self.pairs else 1.0


def ratio_metrics(rows: Sequence[tuple[Measurement, float]], gap: float = PAIR_GAP) -> Metrics:
    """Score (measurement, predicted seconds) pairs of one job on one GPU type.

    Rows of the same placement shape (GPUs per node, in any node order: `13` and `31` are one
    placement to the model) and batch are one measurement, their median. A shape's ratio is its
    time over the 1-GPU time at the same batch (shapes whose batch has no 1-GPU row are
    skipped). Pairs: two shapes with as many GPUs at one batch whose measured times differ by
    more than `gap` (the protocol's PAIR_GAP); a pair counts as ordered when the faster one is
    predicted strictly faster.
    """
    measured: dict[tuple[tuple[int, ...], int], list[float]] = defaultdict(list)
    predicted: dict[tuple[tuple[int, ...], int], float] = {}
    for m, t in rows:
        measured[(m.shape, m.batch)].append(m.step_s)
        predicted[(m.shape, m.batch)] = t
    times = {key: statistics.median(values) for key, values in measured.items()}
    errors: list[RatioError] = []
    groups: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for (shape, batch), time in sorted(times.items()):
        single = times.get(((1,), batch))
        if single is None or shape == (1,):
            continue
        ratio = time / single
        guess = predicted[(shape, batch)] / predicted[((1,), batch)]
        errors.append(RatioError(shape, batch, ratio, guess))
        groups[(sum(shape), batch)].append((time, predicted[(shape, batch)]))
    pairs = ordered = 0
    for group in groups.values():
        for (ta, pa), (tb, pb) in combinations(group, 2):
            if max(ta, tb) / min(ta, tb) <= 1.0 + gap:
                continue
            pairs += 1
            ordered += (pa < pb) if ta < tb else (pb < pa)
    return Metrics(tuple(errors), pairs, ordered)
