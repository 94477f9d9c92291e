"""Between the wire (a stored submission) and the core's JobSpec and the executor's RunSpec."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toposched.common.frameworks import Kind, Member, kind_of, local_members
from toposched.common.jobfields import stored_value
from toposched.core.job import (
    After,
    Checkpoint,
    Elastic,
    IdleAction,
    IdleRule,
    JobSpec,
    LocalityRule,
    RestartPolicy,
)
from toposched.placement.gang import Placement, WorkerSlot
from toposched.topology.cluster import NodeSelector, Tier
from toposched.topology.resources import parse_cpus, parse_memory

MIB = 2**20


def core_spec(name: str, owner: str, queue: str, spec: dict[str, Any]) -> JobSpec:
    """The core's view of a stored submission (already validated by the wire schema); a
    field it leaves out has the table's default (common/jobfields.py)."""

    def value(field: str) -> Any:
        return stored_value(spec, field)

    elastic = spec.get("elastic")
    checkpoint = spec.get("checkpoint")
    return JobSpec(
        name,
        workers=spec["workers"],
        gpus_per_worker=spec["gpus"],
        queue=queue,
        owner=owner,
        priority=spec["priority"],
        locality=LocalityRule.parse(spec["locality"]),
        elastic=Elastic(elastic["min"], elastic["max"]) if elastic else None,
        checkpoint=(
            Checkpoint(checkpoint["signal"], checkpoint["grace_s"], checkpoint.get("interval_s"))
            if checkpoint
            else None
        ),
        restart=RestartPolicy(spec["restart"]),
        max_restarts=spec["max_restarts"],
        limit_s=spec.get("limit_s"),
        selector=NodeSelector.of(spec.get("selector")),
        cpus=parse_cpus(value("cpus") or 0),
        memory=parse_memory(value("memory") or 0),
        gpu_memory=parse_memory(value("gpu_memory") or 0),
        gpu_types=tuple(value("gpu_type") or ()),
        mixed_types=bool(value("mixed_types")),
        model=value("model"),
        topology_level=value("topology_level"),
        topology_prefer=value("topology_prefer"),
        topology=bool(value("gputopology")),
        idle=idle_rule(value("idle")),
        interactive=bool(value("interactive")),
        after=tuple(After.parse(text) for text in value("after")),
        mig=value("mig") or "",
        gpu_milli=gpu_milli(value("gpu_fraction")),
        gpu_share_mib=gpu_share_mib(value("gpu_memory_share")),
    )


def gpu_milli(fraction: float | None) -> int:
    """The core's thousandths for a stored `gpu_fraction`: 0 (whole GPUs) for none or 1."""
    if fraction is None or fraction >= 1:
        return 0
    return round(fraction * 1000)


def gpu_share_mib(quantity: str | int | None) -> int:
    """The core's MiB for a stored `gpu_memory_share` (rounded up to whole MiB); 0 for none."""
    if not quantity:
        return 0
    return -(-parse_memory(quantity) // MIB)


# What core_spec reads of every stored spec, by type (the rest have defaults).
NEEDED = {
    "workers": int,
    "gpus": int,
    "priority": int,
    "locality": str,
    "restart": str,
    "max_restarts": int,
}


def spec_problem(spec: dict[str, Any]) -> str | None:
    """Why a stored spec (an object) is of no use to the server, or None: one without a
    command, or without a field every job has (`{}`, written by another program or a bad
    disk), is listed as `corrupt` rather than stopping a start or a list. Run on every row
    read, so only these cheap checks (a few microseconds; core_spec whole takes 60)."""
    command = spec.get("command")
    if not (isinstance(command, list) and command and all(isinstance(w, str) for w in command)):
        return "it has no command (a list of words)"
    for name, kind in NEEDED.items():
        value = spec.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"it has no {name} ({kind.__name__})"
    return None


def idle_rule(stored: Mapping[str, Any] | None) -> IdleRule | None:
    """A stored idle rule (the wire's IdleIn, its `after` in seconds) as the core's."""
    if not stored:
        return None
    return IdleRule(float(stored["after"]), float(stored["below"]), IdleAction(stored["action"]))


def job_kind(spec: Mapping[str, Any]) -> tuple[Kind, int]:
    """A stored submission's kind and parameter servers (one stored before kinds: pytorch)."""
    return kind_of(str(spec.get("kind") or Kind.PYTORCH.value)), int(spec.get("ps") or 0)


def local_processes(spec: Mapping[str, Any], workers: int) -> list[Member]:
    """The processes the local executor runs for a stored submission on `workers` workers, in
    the order of their logs: the workers, then parameter servers; an MPI job's launcher alone."""
    kind, ps = job_kind(spec)
    return local_members(kind, workers, ps)


def placement_json(placement: Placement) -> list[dict[str, Any]]:
    """One entry per worker, in rank order, plus the ring and tier the core chose (and the
    start of a MIG instance: `mig_start`)."""
    rows: list[dict[str, Any]] = []
    for slot in placement.workers:
        row = {
            "node": slot.node,
            "gpus": list(slot.gpus),
            "ring_gbps": placement.bandwidth_gbps,
            "tier": placement.tier.name.lower(),
        }
        if slot.instance is not None:
            row["mig_start"] = slot.instance
        rows.append(row)
    return rows


def placement_from_json(rows: list[dict[str, Any]]) -> Placement:
    slots = tuple(WorkerSlot(row["node"], tuple(row["gpus"]), row.get("mig_start")) for row in rows)
    first = rows[0] if rows else {}
    return Placement(slots, first.get("ring_gbps"), Tier[str(first.get("tier", "node")).upper()])
