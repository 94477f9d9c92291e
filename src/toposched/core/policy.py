"""Scheduler policies: named, with typed parameters, in a registry that lists the valid names."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from enum import StrEnum
from typing import Any

from toposched.placement.policies import POLICIES as PLACEMENT_POLICIES
from toposched.placement.policies import placement_policy
from toposched.placement.request import PlacementError
from toposched.placement.sharing import SHARE_POLICIES


class PolicyError(ValueError):
    """An unknown policy name or parameter, or a parameter of the wrong type or range."""


class Order(StrEnum):
    """`fair`: within-guarantee work first, then priority, then the queue below its share, then
    submission; `fifo`: submission order alone."""

    FAIR = "fair"
    FIFO = "fifo"


class SingleGpu(StrEnum):
    """How 1-GPU jobs are placed: by load (with hysteresis), or always one way."""

    ADAPTIVE = "adaptive"
    SPREAD = "spread"
    PACK = "pack"


class TypeChoice(StrEnum):
    """How a gang that accepts several GPU types gets one (core/typechoice.py)."""

    FASTEST = "fastest"
    BLIND = "blind"


_COERCE: Mapping[str, Callable[[Any], Any]] = {
    "single_gpu": SingleGpu,
    "order": Order,
    "type_choice": TypeChoice,
}


@dataclass(frozen=True)
class SchedulerPolicy:
    """The switches and numbers of one scheduling policy.

    pack_above / spread_below: allocated fraction of healthy GPUs at which adaptive placement
    of 1-GPU jobs turns to packing, and back to spreading (the gap keeps it from flapping).
    default_runtime_s: the run time assumed for jobs that declare no limit, when reservations
    judge whether a backfilled job ends in time (None: such jobs never end in time).
    stop_grace_s: how long a cancelled or failed gang's workers get to exit after SIGTERM.
    gang: False binds workers one at a time as GPUs free up, holding partial allocations
    (kube-scheduler without a gang plugin); such policies can deadlock, on purpose.
    placement: the node and GPU choice, a name in the placement registry
    (toposched.placement.policies, the same names `toposched place --policy` takes).
    share_placement: the node and GPU for a share of one GPU (placement/sharing.py):
    `toposched` (FGD's measure, interference among sharers breaking ties), `fgd`,
    `best-fit`, `gpu-packing` or `random`.
    reservation: the first blocked job keeps the GPUs that free up first (no starvation).
    backfill: later jobs may start while an earlier one is blocked (False: strict FIFO).
    preemption: a blocked job may stop running ones (core/reclaim.py): work another queue
    borrowed beyond its guarantee, and checkpointable work below (preempt_lower_priority: of
    lower priority in its queue; demote_after_gpu_h: demoted). A job that cannot checkpoint is
    stopped only to give back what its queue borrowed.
    grow_after_s: an elastic job runs this long at one size before it is grown again.
    demote_after_gpu_h: least attained service (as Tiresias): a job that has run this many
    GPU-hours ranks after jobs of its priority that have not, and a waiting job that has not
    may preempt it if it can checkpoint (None: no demotion; order by submission alone).
    promote_after_s: a demoted job that has waited this long ranks with the others again, so
    it cannot starve (None: never promoted).
    demoted_levels, level_ratio: demoted jobs wait in this many levels of attained service,
    in submission order within each (Tiresias' queues): level k holds the jobs that have had
    at least `demote_after_gpu_h * level_ratio ** (k - 1)` GPU-hours, the last level all
    those beyond. Only a job not demoted preempts for its service; the levels order the
    demoted ones among themselves (1: one level, submission order alone).
    Stops that pay (core/stoprule.py; docs/scheduler.md, "Preemption that pays"): least
    attained service stops a job for a waiting one only after it has waited
    `preempt_patience_s` (GPUs that free up meanwhile are its own). After its
    k-th stop (preempted, moved or shrunk) a job runs `k * stop_protect_s` seconds
    before least attained service or a migration may stop it again, and after `max_stops`
    stops never (None: no cap; 100 by default, a backstop that ends every job: two jobs
    promoted in turn that stop each other before either saves a checkpoint would otherwise
    never end); guarantees and priorities still preempt it. A demoted job is
    preempted for one that is not only when the run time it is expected to have left (its
    run time so far) exceeds the other's (at least `young_job_s`) by `pay_margin` times what
    the stop costs it: the work since its last checkpoint (every `checkpoint_interval_s` of
    work, where the job does not say) and `restore_s` to start again (None: no test).
    spread_by_model: a gang that may span nodes and names its model goes where the driver's
    performance model predicts the shortest step, on the fewest nodes within this fraction of
    it (0: the fastest; the default 0.1: within 10%), which may be more nodes than it needs
    (placement/by_model.py); drivers without a model (the server) place by the fewest nodes,
    as does None.
    extra_nodes: a gang split over one domain of a tier (rack, pod, cluster) spans at most this
    many nodes more than the fewest of such a domain's nodes it may use that could hold it
    (their GPUs less the failed ones and a cordoned node's, their CPUs and memory); it waits
    rather than take a wider split, even where its locality accepts one (None: any split its
    locality accepts). Under `spread_by_model` it decides whether a gang starts, and the model
    where (docs/placement.md).
    type_choice: on a cluster of several GPU types, a gang runs on one of them (unless it
    accepts mixed types). `fastest`: the fastest the driver's performance model predicts,
    unless a type within `type_tolerance` of it (0.25: 25% slower) leaves the GPUs that
    waiting jobs of one type only need; `blind`: the type found first in node order.
    """

    name: str = "toposched"
    gang: bool = True
    order: Order = Order.FAIR
    placement: str = "topology"
    share_placement: str = "toposched"
    reservation: bool = True
    backfill: bool = True
    preemption: bool = True
    preempt_lower_priority: bool = True
    elastic: bool = True
    migration: bool = True
    single_gpu: SingleGpu = SingleGpu.ADAPTIVE
    pack_above: float = 0.7
    spread_below: float = 0.5
    default_runtime_s: float | None = None
    stop_grace_s: float = 10.0
    grow_after_s: float = 60.0
    demote_after_gpu_h: float | None = 64.0
    promote_after_s: float | None = 604_800.0
    demoted_levels: int = 4
    level_ratio: float = 4.0
    preempt_patience_s: float = 3600.0
    stop_protect_s: float = 0.0
    max_stops: int | None = 100
    pay_margin: float | None = None
    young_job_s: float = 1800.0
    checkpoint_interval_s: float = 1800.0
    restore_s: float = 120.0
    keep_finished: int = 10_000
    spread_by_model: float | None = 0.1
    extra_nodes: int | None = 0
    type_choice: TypeChoice = TypeChoice.FASTEST
    type_tolerance: float = 0.25

    def __post_init__(self) -> None:
        for key, kind in _COERCE.items():
            value = getattr(self, key)
            try:
                object.__setattr__(self, key, kind(value))
            except ValueError:
                raise PolicyError(f"{key}: unknown value {value!r}") from None
        self._check_combinations()
        if not 0.0 <= self.spread_below < self.pack_above <= 1.0:
            raise PolicyError(
                "need 0 <= spread_below < pack_above <= 1, got "
                f"spread_below={self.spread_below}, pack_above={self.pack_above}"
            )
        if self.default_runtime_s is not None and not self.default_runtime_s > 0:
            raise PolicyError(f"default_runtime_s must be positive, got {self.default_runtime_s}")
        if self.stop_grace_s < 0:
            raise PolicyError(f"stop_grace_s must be >= 0, got {self.stop_grace_s}")
        if self.grow_after_s < 0:
            raise PolicyError(f"grow_after_s must be >= 0, got {self.grow_after_s}")
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise PolicyError(f"{f.name} must be a finite number, got {value}")
        if self.demote_after_gpu_h is not None and self.order is not Order.FAIR:
            raise PolicyError(
                "demote_after_gpu_h needs order 'fair' (fifo ignores service): "
                "set demote_after_gpu_h=null with order=fifo"
            )
        for key in ("demote_after_gpu_h", "promote_after_s", "checkpoint_interval_s"):
            value = getattr(self, key)
            if value is not None and not value > 0:
                raise PolicyError(f"{key} must be positive, got {value}")
        for key in (
            "stop_protect_s",
            "pay_margin",
            "young_job_s",
            "restore_s",
            "preempt_patience_s",
        ):
            value = getattr(self, key)
            if value is not None and not value >= 0:
                raise PolicyError(f"{key} must be >= 0, got {value}")
        if self.demoted_levels < 1:
            raise PolicyError(f"demoted_levels must be at least 1, got {self.demoted_levels}")
        if not self.level_ratio > 1:
            raise PolicyError(f"level_ratio must be more than 1, got {self.level_ratio}")
        if self.extra_nodes is not None and self.extra_nodes < 0:
            raise PolicyError(
                f"extra_nodes must be >= 0 (or null: any split), got {self.extra_nodes}"
            )
        if self.max_stops is not None and self.max_stops < 1:
            raise PolicyError(
                f"max_stops must be at least 1 (or null: no cap), got {self.max_stops}"
            )
        if self.keep_finished < 0:
            raise PolicyError(f"keep_finished must be >= 0, got {self.keep_finished}")
        if not self.type_tolerance >= 0:
            raise PolicyError(f"type_tolerance must be >= 0, got {self.type_tolerance}")
        if self.spread_by_model is not None and not self.spread_by_model >= 0:
            raise PolicyError(f"spread_by_model must be >= 0, got {self.spread_by_model}")

    def _check_combinations(self) -> None:
        """Refuse switches that cannot work together, saying which and why."""
        if self.share_placement not in SHARE_POLICIES:
            raise PolicyError(
                f"share_placement {self.share_placement!r}: expected one of "
                f"{', '.join(SHARE_POLICIES)}"
            )
        try:
            placing = placement_policy(self.placement)
        except PlacementError as err:
            raise PolicyError(f"placement: {err}") from None
        if self.gang and placing.gang is None:
            able = ", ".join(name for name, p in PLACEMENT_POLICIES.items() if p.gang)
            raise PolicyError(
                f"placement {self.placement!r} cannot place a whole gang on a cluster; with "
                f"gang admission use one of: {able}"
            )
        if not self.gang:
            if placing.worker is None:
                able = ", ".join(name for name, p in PLACEMENT_POLICIES.items() if p.worker)
                raise PolicyError(
                    f"gang=false binds one worker at a time, which placement "
                    f"{self.placement!r} cannot do; use one of: {able}"
                )
            needs_gang = [
                key
                for key in ("reservation", "preemption", "elastic", "migration")
                if getattr(self, key)
            ]
            if needs_gang:
                raise PolicyError(
                    f"gang=false binds workers one at a time, so {', '.join(needs_gang)} "
                    "(which act on whole gangs) cannot work: set them false"
                )


@dataclass(frozen=True)
class PolicyInfo:
    """A named scheduler policy: what it stands for, and its switches."""

    name: str
    summary: str
    base: SchedulerPolicy


SCHEDULER_POLICIES: dict[str, PolicyInfo] = {
    info.name: info
    for info in (
        PolicyInfo(
            "toposched",
            "gang admission, exact topology placement, reservation and backfill, guaranteed "
            "shares with borrowing and topology-aware reclaim, least attained service with "
            "checkpoint preemption, adaptive spread/pack, elastic growth, defragmenting migration",
            SchedulerPolicy(),
        ),
        PolicyInfo(
            "k8s-default",
            "kube-scheduler without gang plugins: workers bound one by one onto random GPUs as "
            "they free up, partial allocations held (can deadlock), no topology",
            SchedulerPolicy(
                name="k8s-default",
                demote_after_gpu_h=None,
                spread_by_model=None,
                extra_nodes=None,
                gang=False,
                order=Order.FIFO,
                placement="random",
                reservation=False,
                preemption=False,
                elastic=False,
                migration=False,
                single_gpu=SingleGpu.PACK,
            ),
        ),
        PolicyInfo(
            "fifo-gang-firstfit",
            "gang admission in strict FIFO order, topology-unaware first fit, no preemption",
            SchedulerPolicy(
                name="fifo-gang-firstfit",
                demote_after_gpu_h=None,
                spread_by_model=None,
                extra_nodes=None,
                order=Order.FIFO,
                placement="index-order",
                reservation=False,
                backfill=False,
                preemption=False,
                elastic=False,
                migration=False,
                single_gpu=SingleGpu.PACK,
            ),
        ),
        PolicyInfo(
            "hived-like",
            "HiveD-like: gang, topology-aware packing within the hierarchy, guaranteed shares "
            "with reclaim; no reservation, no adaptive spread, no elastic growth, no migration",
            SchedulerPolicy(
                name="hived-like",
                demote_after_gpu_h=None,
                spread_by_model=None,
                # HiveD gives a gang one cell of the lowest level that holds it (a node for 8
                # GPUs of a DGX-1): never a wider split than the fewest nodes.
                extra_nodes=0,
                reservation=False,
                elastic=False,
                migration=False,
                single_gpu=SingleGpu.PACK,
            ),
        ),
        PolicyInfo(
            "gandiva-like",
            "Gandiva-like: gang, packing by affinity, migration to open room, grow-shrink of "
            "elastic jobs when idle; no reservation and no guaranteed shares (FIFO order)",
            SchedulerPolicy(
                name="gandiva-like",
                demote_after_gpu_h=None,
                spread_by_model=None,
                extra_nodes=None,
                order=Order.FIFO,
                reservation=False,
                preemption=False,
                single_gpu=SingleGpu.PACK,
            ),
        ),
    )
}


def make_scheduler_policy(name: str, params: Mapping[str, Any] | None = None) -> SchedulerPolicy:
    """The policy `name` with `params` applied; errors name the bad parameter and the valid ones."""
    info = SCHEDULER_POLICIES.get(name)
    if info is None:
        known = ", ".join(SCHEDULER_POLICIES)
        raise PolicyError(f"unknown scheduler policy {name!r}; known policies: {known}")
    known_fields = {f.name: f for f in fields(SchedulerPolicy) if f.name != "name"}
    updates: dict[str, Any] = {}
    for key, value in (params or {}).items():
        spec = known_fields.get(key)
        if spec is None:
            raise PolicyError(
                f"policy {name!r} has no parameter {key!r}; valid: {', '.join(known_fields)}"
            )
        updates[key] = _typed(name, key, spec.type, value)
    return replace(info.base, **updates)


def _typed(policy: str, key: str, kind: object, value: Any) -> Any:
    where = f"policy {policy!r} parameter {key!r}"
    if key in _COERCE:
        try:
            return _COERCE[key](value)
        except ValueError:
            raise PolicyError(f"{where}: got {value!r}") from None
    text = str(kind)
    if text == "bool":
        if not isinstance(value, bool):
            raise PolicyError(f"{where} must be true or false, got {value!r}")
        return value
    if value is None and "None" in text:
        return None
    if "int" in text and "float" not in text:
        if isinstance(value, bool) or not isinstance(value, int):
            raise PolicyError(f"{where} must be an integer, got {value!r}")
        return value
    if "float" in text:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise PolicyError(f"{where} must be a number, got {value!r}")
        return float(value)
    return value
