"""Model names a trace job may carry, the default mix drawn for traces without them, aliases."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from functools import cache
from itertools import accumulate
from types import MappingProxyType

from toposched.perf.registry import Catalog
from toposched.sim.traces.job import TraceError
from toposched.sim.traces.rows import UNKNOWN_MODEL, RowError

# The performance model's catalog names (issue 4 §1), spelled as the Tiresias traces spell
# them; `gpt2` is the GPT-style transformer.
MODEL_NAMES: tuple[str, ...] = (
    "vgg11",
    "vgg16",
    "vgg19",
    "resnet50",
    "resnet101",
    "resnet152",
    "inception3",
    "inception4",
    "googlenet",
    "alexnet",
    "bert-large",
    "gpt2",
    "lstm",
)

# No trace here records what its jobs trained, so the default assumes nothing: every catalog
# model is equally likely. Users who know their workload pass their own mix.
DEFAULT_MODEL_MIX: Mapping[str, float] = MappingProxyType(dict.fromkeys(MODEL_NAMES, 1.0))

_KNOWN = frozenset(MODEL_NAMES)


def _known_list() -> str:
    return ", ".join(MODEL_NAMES)


@cache
def _catalog_aliases() -> Mapping[str, str]:
    return Catalog.load().aliases


class ModelMix:
    """A checked mix of catalog models (weights need not sum to 1) and seeded draws from it."""

    def __init__(self, mix: Mapping[str, float] | None = None) -> None:
        weights = DEFAULT_MODEL_MIX if mix is None else mix
        names: list[str] = []
        values: list[float] = []
        for name, weight in weights.items():
            if name not in _KNOWN:
                raise TraceError(f"model mix: unknown model {name!r}; known: {_known_list()}")
            if not isinstance(weight, int | float) or not math.isfinite(weight) or weight < 0:
                raise TraceError(f"model mix: weight of {name!r} must be a number >= 0")
            if weight > 0:
                names.append(name)
                values.append(float(weight))
        if not names:
            raise TraceError("model mix: needs at least one model with a weight > 0")
        self.names: tuple[str, ...] = tuple(names)
        self.cum_weights: tuple[float, ...] = tuple(accumulate(values))

    def draw(self, rng: random.Random, k: int) -> list[str]:
        """`k` models drawn independently, in order, from `rng`."""
        return rng.choices(self.names, cum_weights=self.cum_weights, k=k)


class ModelNames:
    """Turns a model name written in a trace into a catalog name, through the user's aliases.

    Names match after stripping and lower-casing (traces disagree on `VGG16` vs `vgg16`).
    """

    def __init__(self, aliases: Mapping[str, str] | None = None) -> None:
        table = {name: name for name in MODEL_NAMES}
        # The performance catalog's own aliases (`resnet-50`, `transformer`) hold here too, so
        # a name `toposched perf` accepts is one a trace may carry.
        table.update(
            (alias, target) for alias, target in _catalog_aliases().items() if target in _KNOWN
        )
        for alias, target in (aliases or {}).items():
            canonical = target.strip().lower()
            if canonical not in _KNOWN:
                raise TraceError(
                    f"model alias {alias!r} -> {target!r}: {target!r} is not a catalog model; "
                    f"known: {_known_list()}"
                )
            table[alias.strip().lower()] = canonical
        self._table = table

    def resolve(self, written: str, column: str) -> str:
        """The catalog name for `written`; a name neither known nor aliased is a bad row."""
        found = self._table.get(written.strip().lower())
        if found is None:
            raise RowError(
                UNKNOWN_MODEL,
                f"unknown model {written!r}; known: {_known_list()}; "
                "map other names with model_aliases",
                column,
            )
        return found
