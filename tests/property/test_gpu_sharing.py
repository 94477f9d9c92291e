"""Shares of GPUs: FGD's choice against brute force, and the core's books under shares."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.core import JobFinished, JobSpec, JobSubmitted, Scheduler, SchedulerPolicy
from toposched.core.actions import StartJob
from toposched.placement.sharing import (
    MILLI,
    SHARE_POLICIES,
    Ask,
    Board,
    Measure,
    NodeRoom,
    Task,
    Workload,
    after,
    share_policy,
    task_fragment,
)
from toposched.topology.clusterfile import parse_shorthand

TYPES = ("a", "b")
MILLIS = (100, 250, 300, 500, 700, 1000)


@st.composite
def rooms(draw: st.DrawFn) -> list[NodeRoom]:
    out = []
    for i in range(draw(st.integers(1, 4))):
        size = draw(st.sampled_from((1, 2, 4)))
        left = tuple(draw(st.sampled_from((0, 200, 500, 750, 1000))) for _ in range(size))
        cpus = draw(st.sampled_from((None, 0, 4000, 16000)))
        out.append(NodeRoom(i, draw(st.sampled_from(TYPES)), left, (16384,) * size, cpus))
    return out


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    tasks = draw(
        st.lists(
            st.tuples(
                st.sampled_from((0, 1, 1, 2)),
                st.sampled_from(MILLIS),
                st.sampled_from((0, 2000, 8000)),
                st.sampled_from((frozenset(), frozenset({"a"}))),
            ),
            min_size=1,
            max_size=5,
        )
    )
    counts: dict[Task, int] = {}
    for gpus, milli, cpus, types in tasks:
        task = Task(gpus, 0 if gpus == 0 else (MILLI if gpus > 1 else milli), cpus, types)
        counts[task] = counts.get(task, 0) + 1
    return Workload.typical(counts, cover=1.0)


def measure_by_hand(room: NodeRoom, workload: Workload) -> float:
    return sum(
        p * task_fragment(room.left, room.cpus, room.gpu_type, task) for task, p in workload.kinds
    )


@st.composite
def asks(draw: st.DrawFn) -> Ask:
    gpus = draw(st.sampled_from((0, 1, 1, 2)))
    milli = draw(st.sampled_from(MILLIS)) if gpus == 1 else MILLI
    return Ask(gpus, milli if gpus else 0, 0, draw(st.sampled_from((0, 2000, 8000))))


@settings(max_examples=300, deadline=None)
@given(rooms(), workloads(), asks())
def test_fgd_chooses_as_the_papers_simulator_scores(
    nodes: list[NodeRoom], workload: Workload, ask: Ask
) -> None:
    """Against every feasible (node, GPUs), found here without the policy's code: a share on
    any GPU with that much left, whole GPUs only on GPUs nobody shares (the first ones); each
    scored as FGD's simulator does, the measure's fall through a sigmoid to an integer of 100;
    the most points, then the lowest node (its scheduler's tie rule), then the first GPU."""
    choice = share_policy("fgd", workload).place(nodes, ask)
    feasible = []
    for room in nodes:
        if room.cpus is not None and ask.cpus > room.cpus:
            continue
        if ask.gpus == 0:
            gpu_sets: list[tuple[int, ...]] = [()]
        elif ask.shared:
            gpu_sets = [(g,) for g, x in enumerate(room.left) if x >= ask.milli]
        else:
            whole = [g for g, x in enumerate(room.left) if x == MILLI]
            gpu_sets = [tuple(whole[: ask.gpus])] if len(whole) >= ask.gpus else []
        for gpus in gpu_sets:
            rise = measure_by_hand(after(room, ask, gpus), workload) - measure_by_hand(
                room, workload
            )
            points = int(100 * (1 / (1 + math.exp(rise / 1000))))
            feasible.append((-points, room.index, gpus))
    if not feasible:
        assert choice is None
        return
    assert choice is not None
    assert (choice.node, choice.gpus) == min(feasible)[1:]


@settings(max_examples=200, deadline=None)
@given(rooms(), workloads())
def test_the_memoised_measure_is_the_measure(nodes: list[NodeRoom], workload: Workload) -> None:
    measure = Measure(workload)
    for room in nodes:
        assert abs(measure.of(room) - measure_by_hand(room, workload)) < 1e-9


@settings(max_examples=200, deadline=None)
@given(rooms(), asks(), st.sampled_from(SHARE_POLICIES), st.integers(0, 3))
def test_every_policy_gives_a_feasible_choice_or_none(
    nodes: list[NodeRoom], ask: Ask, name: str, seed: int
) -> None:
    workload = Workload.typical({Task(1, 500): 1, Task(1, MILLI): 1})
    choice = share_policy(name, workload, random.Random(seed)).place(nodes, ask)
    if choice is None:
        return
    room = nodes[choice.node]
    assert len(choice.gpus) == ask.gpus
    for g in choice.gpus:
        assert room.left[g] >= ask.milli
        if not ask.shared:
            assert room.left[g] == MILLI  # whole GPUs never on a shared one
    assert min(after(room, ask, choice.gpus).left, default=0) >= 0


@settings(max_examples=150, deadline=None)
@given(
    rooms(),
    workloads(),
    st.lists(st.tuples(asks(), st.booleans()), min_size=1, max_size=30),
    st.sampled_from(SHARE_POLICIES),
)
def test_a_board_chooses_as_the_policy_does_over_all_rooms(
    nodes: list[NodeRoom], workload: Workload, arrivals: list[tuple[Ask, bool]], name: str
) -> None:
    """Asks placed one after another, each on every node or on the odd ones: the Board, which
    scores again only the node that changed, chooses what the policy chooses looking at every
    room afresh (the same draws for `random`)."""
    board = Board(nodes, share_policy(name, workload, random.Random(5)))
    fresh = share_policy(name, workload, random.Random(5))
    rooms_now = list(nodes)
    for ask, odd in arrivals:
        allowed = [r.index for r in rooms_now if not odd or r.index % 2]
        want = fresh.place([rooms_now[i] for i in allowed], ask)
        assert board.choose(ask, allowed) == want
        if want is not None:
            board.land(want.node, ask, want.gpus)
            rooms_now[want.node] = after(rooms_now[want.node], ask, want.gpus)
    assert board.rooms == rooms_now


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from((0, 100, 250, 500, 750)), st.sampled_from((1, 2, 4)), st.booleans()
        ),
        min_size=1,
        max_size=25,
    ),
    st.sampled_from(SHARE_POLICIES),
)
def test_the_core_keeps_shares_whole_gpus_apart_under_every_event(
    jobs: list[tuple[int, int, bool]], name: str
) -> None:
    """Shares and whole-GPU jobs come and go on two small nodes; validate mode checks the
    books after every event (no GPU over 1000 thousandths, shares equal to the jobs', queue
    thousandths), and from the actions: a whole-GPU job never starts on a GPU a share
    holds, and the thousandths on each GPU never pass 1000."""
    policy = SchedulerPolicy(share_placement=name)
    sched = Scheduler(parse_shorthand("2*dgx1-v100/1"), policy, validate=True)
    shares: dict[tuple[str, int], dict[str, int]] = {}
    whole: dict[tuple[str, int], str] = {}
    running: dict[str, list[tuple[str, int]]] = {}
    now = 0.0

    def apply(actions: list[object]) -> None:
        for action in actions:
            if not isinstance(action, StartJob):
                continue
            pairs = [(w.node, g) for w in action.placement.workers for g in w.gpus]
            spec = sched.books.jobs[action.job].spec
            for pair in pairs:
                if spec.shared:
                    assert pair not in whole
                    shares.setdefault(pair, {})[action.job] = spec.gpu_milli
                    assert sum(shares[pair].values()) <= MILLI
                else:
                    assert pair not in shares and pair not in whole
                    whole[pair] = action.job
            running[action.job] = pairs

    for k, (milli, gpus, end_one) in enumerate(jobs):
        now += 1.0
        spec = JobSpec(f"j{k}", gpu_milli=milli) if milli else JobSpec(f"j{k}", 1, gpus)
        apply(sched.handle(JobSubmitted(now, spec)))
        if end_one and running:
            done = sorted(running)[0]
            for pair in running.pop(done):
                if pair in whole:
                    del whole[pair]
                else:
                    del shares[pair][done]
                    if not shares[pair]:
                        del shares[pair]
            now += 1.0
            apply(sched.handle(JobFinished(now, done, True)))
