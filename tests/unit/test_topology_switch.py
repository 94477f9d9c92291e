"""Topology on or off per job (Arena's `--gputopology`): a job that turns it off is placed as
plain GPU counting places it, whatever the scheduler's placement policy, and says so."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.builders import (
    DGX1,
    PCIE8,
    job,
    project,
    queued,
    scheduler,
    started,
    submit,
    uniform,
)
from toposched.core import JobFinished, Scheduler, StartJob
from toposched.core.policy import make_scheduler_policy
from toposched.placement.gang import ring_gbps
from toposched.topology.presets import preset


def reason_of(s: Scheduler, name: str) -> str:
    return s.books.jobs[name].reason


def test_the_seeds_comparison_on_a_dgx1_with_one_gpu_busy() -> None:
    """GPU 0 busy, then 4 x 1 GPU: off, GPUs 1-4 (PCIe between 1,2 and 4: a 6 GB/s ring at
    worst); on, an NVLink ring of four."""
    off = scheduler(DGX1)
    off.handle(*submit(job("busy", 1, topology=False)))
    got = project(off.handle(*submit(job("x", 1, workers=4, topology=False), t=1)))
    assert got == [queued("x"), *started("x", {"n0": (1, 2, 3, 4)})]
    on = scheduler(DGX1)
    on.handle(*submit(job("busy", 1, topology=False)))
    actions = on.handle(*submit(job("x", 1, workers=4), t=1))
    placement = next(a.placement for a in actions if isinstance(a, StartJob))
    gpus = placement.gpus_by_node()["n0"]
    assert 0 not in gpus
    topology = preset(DGX1)
    # The best ring of 4 on a DGX-1 is all NVLink; the first-fit set is not.
    assert ring_gbps(topology, gpus) > ring_gbps(topology, (1, 2, 3, 4))  # type: ignore[operator]


def test_the_reason_says_how_the_gpus_were_chosen() -> None:
    s = scheduler(DGX1)
    s.handle(*submit(job("off", 1, workers=2, topology=False), job("on", 1, workers=2)))
    assert reason_of(s, "off").endswith(
        "topology off for this job: the lowest free GPU indices, first fit"
    )
    assert reason_of(s, "on").endswith("best placement now")
    plain = Scheduler(
        uniform(DGX1, 1), make_scheduler_policy("fifo-gang-firstfit", {}), validate=True
    )
    plain.handle(*submit(job("j", 1, workers=2)))
    assert "best" not in reason_of(plain, "j")
    assert reason_of(plain, "j").endswith(
        "placed by the index-order policy (it ignores the topology)"
    )


SIZES = st.lists(st.tuples(st.sampled_from([1, 2, 4]), st.integers(1, 4)), min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(jobs=SIZES, ends=st.lists(st.integers(0, 7), max_size=4))
def test_topology_off_places_as_the_index_order_policy_does(
    jobs: list[tuple[int, int]], ends: list[int]
) -> None:
    """The same stream, jobs with topology off under the topology placement and the same jobs
    under index-order placement, gets the same GPUs at every step (ends included): off is exactly
    plain GPU counting."""
    switched = scheduler(PCIE8, 2)
    # The same policy in all else (backfill, reservations), with index-order placement.
    plain = scheduler(PCIE8, 2, placement="index-order")
    names = [f"j{i}" for i in range(len(jobs))]
    for i, (gpus, workers) in enumerate(jobs):
        a = switched.handle(*submit(job(names[i], gpus, workers, topology=False), t=i))
        b = plain.handle(*submit(job(names[i], gpus, workers), t=i))
        assert _starts(a) == _starts(b)
    for t, pick in enumerate(ends, start=len(jobs)):
        name = names[pick % len(names)]
        if switched.books.jobs[name].state.value != "running":
            continue
        a = switched.handle(JobFinished(t, name, True))
        b = plain.handle(JobFinished(t, name, True))
        assert _starts(a) == _starts(b)


def _starts(actions: Sequence[object]) -> list[tuple[str, dict[str, tuple[int, ...]]]]:
    return [(a.job, a.placement.gpus_by_node()) for a in actions if isinstance(a, StartJob)]
