"""Topology on or off per job: a job that turns it off is placed by plain GPU counting."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from toposched.placement.capacity import Capacity
from toposched.placement.gang import GangRequest, Placement, Shortfall
from toposched.placement.index_order import first_fit
from toposched.placement.policies import GangPlacer
from toposched.topology.cluster import Tier


@dataclass(frozen=True)
class TopologySwitch:
    """`place` for the jobs that want topology (the default); first fit on the lowest free GPU
    indices, what the kubelet's device manager gives, for a job that says `topology` false.
    Either way the job's constraints (locality, selector, fit, GPU type) hold."""

    place: GangPlacer

    def __call__(
        self,
        cap: Capacity,
        request: GangRequest,
        network: Mapping[Tier, float],
        exclude: Mapping[int, int] | None = None,
    ) -> Placement | Shortfall:
        if request.topology:
            return self.place(cap, request, network, exclude)
        return first_fit(cap, request, network, exclude)
