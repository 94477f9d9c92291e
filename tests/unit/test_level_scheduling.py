"""The scheduler places gangs by network level: NVLink cliques whole, required levels kept."""

from __future__ import annotations

from tests.builders import job, scheduler, submit
from toposched.common.jobspec import core_spec
from toposched.core import JobFinished, Scheduler
from toposched.server.jobschema import JobSubmit
from toposched.topology.clusterfile import parse_shorthand


def _nodes(s: Scheduler, name: str) -> set[str]:
    placement = s.view.job(name).placement
    assert placement is not None, s.explain(name)
    return set(placement.gpus_by_node())


def test_nvcf_598_a_two_node_gang_goes_whole_into_the_empty_clique() -> None:
    """NVIDIA/nvcf#598: a partly full clique next to an empty one; bin-packing split the gang
    and one pod waited for good. Two 4-GPU trays free in one clique, spread one GPU each over
    the other clique's trays: the gang goes whole into one clique, on two trays."""
    s = scheduler(parse_shorthand("2*gb200-nvl72"), extra_nodes=None)
    # Clique 0 (trays 0-17): 3 GPUs busy on each tray; clique 1 empty.
    s.handle(*submit(*(job(f"busy{i}", 3) for i in range(18)), t=0))
    s.handle(*submit(job("gang", 4, workers=2), t=1))
    used = _nodes(s, "gang")
    assert len(used) == 2
    assert all(int(n.rsplit("-", 1)[1]) >= 18 for n in used), used


def test_a_required_level_no_domain_holds_says_so_and_waits() -> None:
    s = scheduler(parse_shorthand("2*gb200-nvl72"), extra_nodes=None)
    s.handle(*submit(job("big", 4, workers=19, topology_level="clique"), t=0))
    assert "within one clique (topology_level)" in s.explain("big")
    assert s.view.job("big").placement is None


def test_job_fields_reach_the_core() -> None:
    wire = JobSubmit.model_validate(
        {"name": "j", "command": ["true"], "topology_level": "clique", "topology_prefer": "leaf"}
    )
    fields = wire.model_dump(exclude_none=True)
    spec = core_spec("j", "ann", "default", fields)
    assert (spec.topology_level, spec.topology_prefer) == ("clique", "leaf")
    assert spec.needs.levels == ("clique", "leaf")


def test_a_preferred_level_falls_back_to_the_usual_placement() -> None:
    s = scheduler(parse_shorthand("4*hgx-h100/leaf=2"), extra_nodes=None)
    s.handle(*submit(job("a", 8), job("c", 8), t=0))  # one node of each leaf busy
    s.handle(*submit(job("p", 8, workers=2, topology_prefer="leaf"), t=1))
    assert len(_nodes(s, "p")) == 2
    s.handle(JobFinished(2, "p", True))


def test_nvcf_598_the_old_rule_would_split_the_gang_across_cliques() -> None:
    """nvcf#598 where bin-packing bites: one tray free in a full clique, and a clique with
    room on every tray. Packing for the fewest nodes puts half the gang on that tray and half
    in the other clique (three trays, one of them across the network at 50 GB/s); the gang goes
    whole into the clique that holds it, on four trays at 900 GB/s."""
    s = scheduler(parse_shorthand("2*gb200-nvl72"), extra_nodes=None)
    # Clique 0 (trays 0-17): 3 GPUs busy on each tray.
    s.handle(*submit(*(job(f"a{i}", 3) for i in range(18)), t=0))
    # Clique 1 (trays 18-35): two 2-GPU jobs per tray (best fit packs them), then one of each
    # pair ends: 2 GPUs free on every tray.
    s.handle(*submit(*(job(f"p{i}", 2) for i in range(36)), t=1))
    assert _nodes(s, "p0") == _nodes(s, "p1") == {"gb200-nvl72-18"}
    s.handle(*(JobFinished(2, f"p{i}", True) for i in range(1, 36, 2)))
    s.handle(JobFinished(3, "a0", True))  # tray 0 free: room for two of the gang's workers
    s.handle(*submit(job("gang", 2, workers=4), t=4))
    used = _nodes(s, "gang")
    assert all(int(n.rsplit("-", 1)[1]) >= 18 for n in used), used
    assert len(used) == 4


def test_a_reservation_keeps_nodes_of_one_domain_of_the_required_level() -> None:
    """A gang held to one clique waits for trays of one clique: the three that free up first
    (trays 0, 18, 19) straddle two cliques and could never start it."""
    s = scheduler(parse_shorthand("2*gb200-nvl72"), extra_nodes=None)
    ends = {0: 100, 18: 110, 19: 120, 1: 300, 2: 310}
    s.handle(*submit(*(job(f"t{i}", 4, limit_s=ends.get(i, 1000)) for i in range(36)), t=0))
    assert all(_nodes(s, f"t{i}") == {f"gb200-nvl72-{i}"} for i in range(36))
    s.handle(*submit(job("big", 4, workers=3, topology_level="clique"), t=1))
    reservation = s.books.reservation
    assert reservation is not None and reservation.job == "big"
    kept = sorted(s.books.capacity.nodes[i].name for i in reservation.gpus)
    assert kept == ["gb200-nvl72-0", "gb200-nvl72-1", "gb200-nvl72-2"]
