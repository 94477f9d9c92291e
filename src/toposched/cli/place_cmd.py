"""`toposched place`: choose GPUs inside one node, one request or a JSONL file of many."""

from __future__ import annotations

import json
from typing import Any

import typer

from toposched.cli.output import (
    EXIT_BAD_INPUT,
    EXIT_NOT_ENOUGH_GPUS,
    answer_requests,
    console,
    emit_json,
    fail,
)
from toposched.discovery.files import load_topology
from toposched.placement import (
    POLICIES,
    Mode,
    NodePlacement,
    NodePolicy,
    NodeRequest,
    NotEnoughGPUs,
    PlacementError,
    make_policy,
)
from toposched.topology import NodeTopology, TopologyError

REQUEST_KEYS = {"topology", "gpus", "busy", "policy", "mode", "params"}


def parse_busy(text: str) -> frozenset[int]:
    """`1,5` -> {1, 5}; empty -> nothing busy."""
    busy: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit():
            raise PlacementError(f"--busy takes GPU indices separated by commas, got {part!r}")
        busy.add(int(part))
    return frozenset(busy)


def placement_json(placement: NodePlacement) -> dict[str, Any]:
    return {"gpus": list(placement.gpus), "ring_bandwidth_gbps": placement.ring_bandwidth_gbps}


class Batch:
    """Answers many requests in one process: topologies and policies are built once each."""

    def __init__(self) -> None:
        self._topologies: dict[str, NodeTopology] = {}
        self._policies: dict[str, NodePolicy] = {}

    def topology(self, spec: str) -> NodeTopology:
        if spec not in self._topologies:
            self._topologies[spec] = load_topology(spec)
        return self._topologies[spec]

    def policy(self, name: str, params: dict[str, Any]) -> NodePolicy:
        key = json.dumps([name, params], sort_keys=True)
        if key not in self._policies:
            self._policies[key] = make_policy(name, params)
        return self._policies[key]

    def answer(self, request: Any) -> NodePlacement:
        if not isinstance(request, dict):
            raise PlacementError("a request must be a JSON object")
        unknown = sorted(set(request) - REQUEST_KEYS)
        if unknown:
            raise PlacementError(
                f"unknown key {unknown[0]!r}; valid keys: {', '.join(sorted(REQUEST_KEYS))}"
            )
        for key in ("topology", "gpus"):
            if key not in request:
                raise PlacementError(f"missing key {key!r}")
        spec, busy, params = request["topology"], request.get("busy", []), request.get("params", {})
        if not isinstance(spec, str):
            raise PlacementError("topology must be a preset name or a file path (a string)")
        if not isinstance(busy, list) or not all(
            isinstance(b, int) and not isinstance(b, bool) for b in busy
        ):
            raise PlacementError("busy must be a list of GPU indices")
        if not isinstance(params, dict):
            raise PlacementError("params must be an object")
        mode = _mode(request.get("mode", Mode.PACK.value))
        policy = self.policy(str(request.get("policy", "topology")), params)
        return policy.place(
            NodeRequest(self.topology(spec), request["gpus"], frozenset(busy), mode)
        )


def _mode(value: Any) -> Mode:
    try:
        return Mode(value)
    except ValueError:
        raise PlacementError(f"unknown mode {value!r}; expected spread or pack") from None


def run_batch(path: str) -> int:
    """One JSON result per request line, in order; returns the exit status."""
    batch = Batch()
    return answer_requests(
        path,
        lambda request: placement_json(batch.answer(request)),
        (PlacementError, TopologyError),
        _error,
    )


def _error(line: int, err: Exception) -> tuple[dict[str, Any], int]:
    if isinstance(err, NotEnoughGPUs):
        error = {"code": "not_enough_gpus", "line": line, "message": str(err)}
        return {"error": error}, EXIT_NOT_ENOUGH_GPUS
    message = f"not JSON: {err.msg}" if isinstance(err, json.JSONDecodeError) else str(err)
    return {"error": {"code": "bad_request", "line": line, "message": message}}, EXIT_BAD_INPUT


def place(
    topology: str | None = typer.Option(None, "--topology", "-t", help="Preset name or file."),
    gpus: int | None = typer.Option(None, "--gpus", "-k", help="How many GPUs to place."),
    busy: str = typer.Option("", "--busy", help="GPUs already taken, e.g. 1,5."),
    policy: str = typer.Option("topology", "--policy", help=f"One of: {', '.join(POLICIES)}."),
    mode: str = typer.Option("pack", "--mode", help="For 1-GPU requests: spread or pack."),
    seed: int | None = typer.Option(None, "--seed", help="Seed of the random policy."),
    requests: str | None = typer.Option(
        None, "--requests", help="JSONL file of requests, - for stdin."
    ),
    json_out: bool = typer.Option(False, "--json", help="JSON: gpus and ring_bandwidth_gbps."),
) -> None:
    """Choose GPUs for a job inside one node. Exit 3 if not enough are free, 2 on bad input."""
    if requests is not None:
        if topology is not None or gpus is not None:
            fail("--requests takes every request from the file; drop --topology and --gpus")
        raise typer.Exit(run_batch(requests))
    if topology is None or gpus is None:
        fail("give --topology and --gpus (or --requests FILE)")
    try:
        params = {} if seed is None else {"seed": seed}
        node = load_topology(topology)
        request = NodeRequest(node, gpus, parse_busy(busy), _mode(mode))
        placement = make_policy(policy, params).place(request)
    except NotEnoughGPUs as err:
        fail(str(err), EXIT_NOT_ENOUGH_GPUS)
    except (PlacementError, TopologyError) as err:
        fail(str(err))
    if json_out:
        emit_json(placement_json(placement))
        return
    chosen = ",".join(map(str, placement.gpus))
    ring = placement.ring_bandwidth_gbps
    ring_text = "single GPU, no ring" if ring is None else f"ring {ring:g} GB/s"
    console.print(f"GPUs {chosen} of {node.name or topology} ({policy}, {mode}): {ring_text}")
