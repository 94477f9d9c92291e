"""Which GPU type a gang that accepts several runs on (docs/placement.md, "GPU types")."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from toposched.core.ordering import Waiting
from toposched.core.policy import SchedulerPolicy
from toposched.placement.capacity import Capacity
from toposched.placement.gang import GangRequest, Placement
from toposched.placement.typed import placement_key

# (the model a job trains or None, a GPU type key) -> its speed there relative to other types,
# higher is faster; None where the driver's performance model does not know.
TypeSpeed = Callable[[str | None, str], float | None]


class FastestType:
    """The fastest acceptable type, unless a type about as fast (within the policy's
    `type_tolerance`) leaves the GPUs that waiting jobs of one type only need: then that one.

    The rule, in order: (1) about as fast as the fastest; (2) does not take GPUs of a type
    below what waiting jobs that accept only that type need; (3) faster; (4) the placement
    objective (lowest tier, fewest nodes, best ring); (5) the type's name."""

    def __init__(self, waiting: Waiting, policy: SchedulerPolicy, speed: TypeSpeed | None) -> None:
        self.waiting = waiting
        self.policy = policy
        self.speed = speed

    def __call__(self, cap: Capacity, request: GangRequest, found: Mapping[str, Placement]) -> str:
        speeds = {t: self._speed(request.model, t) for t in found}
        fastest = max(speeds.values())
        need = self.single_type_demand(cap)
        tolerance = 1.0 + self.policy.type_tolerance

        def key(t: str) -> tuple[object, ...]:
            about = speeds[t] * tolerance >= fastest
            short = need.get(t, 0) > 0 and cap.free_by_type[t] - found[t].gpus < need[t]
            return (not about, short, -speeds[t], placement_key(cap, found[t]), t)

        return min(found, key=key)

    def _speed(self, model: str | None, gpu_type: str) -> float:
        known = self.speed(model, gpu_type) if self.speed is not None else None
        return 1.0 if known is None else known

    def single_type_demand(self, cap: Capacity) -> dict[str, int]:
        """GPUs that waiting jobs accepting one present GPU type only need, by type."""
        need: dict[str, int] = {}
        for shape, count in self.waiting.lists.shapes.items():
            workers, per_worker, _, needs = shape
            if needs is None or not needs.where.gpu_types:
                continue
            accepted = [t for t in cap.gpu_types if needs.where.fit.accepts_key(t)]
            if len(accepted) == 1:
                need[accepted[0]] = need.get(accepted[0], 0) + count * workers * per_worker
        return need
