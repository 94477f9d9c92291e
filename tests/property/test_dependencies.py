"""Pipelines of random DAGs of jobs (`JobSpec.after`), seen from the driver's side.

Jobs (with GPUs, or CPUs alone) each run after some earlier ones, `ok` or `any`; they are
submitted in order, and the jobs that run end as drawn (succeed, fail, cancelled) at random
moments. After every event:

- no job starts before each job it runs after `ok` has succeeded and each it runs after `any`
  has ended;
- a job ends `dependency-failed` only while pending, never having run, when a job it runs
  after `ok` has ended otherwise;
- a job that waits for jobs it runs after says which, those not yet ended.

And once every running job has ended: no job is left waiting (each ran, or ended without).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.builders import DGX1, cluster
from toposched.core import (
    Action,
    After,
    Event,
    JobCancelled,
    JobFinished,
    JobSpec,
    JobState,
    JobSubmitted,
    Scheduler,
    StartJob,
    Transition,
    Until,
    make_scheduler_policy,
)
from toposched.topology import preset
from toposched.topology.cluster import Node
from toposched.topology.resources import Hardware

OUTCOMES = ("ok", "fail", "cancel")


@st.composite
def pipelines(draw: st.DrawFn) -> tuple[list[JobSpec], dict[str, str]]:
    count = draw(st.integers(1, 9))
    specs: list[JobSpec] = []
    outcomes: dict[str, str] = {}
    for i in range(count):
        earlier = draw(st.lists(st.integers(0, i - 1), unique=True, max_size=3)) if i else []
        after = tuple(After(f"j{d}", draw(st.sampled_from(list(Until)))) for d in earlier)
        if draw(st.booleans()):
            cpus = draw(st.sampled_from([1000, 3000]))
            spec = JobSpec(f"j{i}", gpus_per_worker=0, cpus=cpus, after=after)
        else:
            spec = JobSpec(f"j{i}", gpus_per_worker=draw(st.sampled_from([1, 4, 8])), after=after)
        specs.append(spec)
        outcomes[spec.name] = draw(st.sampled_from(OUTCOMES))
    return specs, outcomes


@dataclass
class Pipeline:
    """The driver: what it learnt of each job from the actions it got back."""

    specs: dict[str, JobSpec]
    outcomes: dict[str, str]
    core: Scheduler
    state: dict[str, JobState] = field(default_factory=dict)
    ran: set[str] = field(default_factory=set)
    now: float = 0.0

    def send(self, event: Event) -> None:
        for action in self.core.handle(event):
            self.take(action)
        self.check_reasons()

    def take(self, action: Action) -> None:
        name = action.job
        deps = self.specs[name].after
        if isinstance(action, StartJob):
            for dep in deps:
                got = self.state[dep.job]
                assert got.terminal, f"{name} started before {dep.job} ended ({got})"
                assert dep.until is Until.ANY or got is JobState.SUCCEEDED, (
                    f"{name} started though {dep.job} ended {got}"
                )
            self.ran.add(name)
        elif isinstance(action, Transition):
            if action.new is JobState.DEPENDENCY_FAILED:
                assert action.old is JobState.PENDING and name not in self.ran
                assert any(
                    dep.until is Until.OK
                    and self.state[dep.job].terminal
                    and self.state[dep.job] is not JobState.SUCCEEDED
                    for dep in deps
                ), f"{name} ended dependency-failed with its dependencies {deps} fine"
                assert action.reason.startswith("dependency ")
            self.state[name] = action.new

    def check_reasons(self) -> None:
        for name, got in self.state.items():
            if got is not JobState.PENDING:
                continue
            live = [d for d in self.specs[name].after if not self.state[d.job].terminal]
            reason = self.core.job(name).reason
            if live:
                assert reason == "waits for " + ", ".join(d.waits() for d in live), reason
            else:
                assert not reason.startswith("waits for"), reason

    def end_one(self, name: str) -> None:
        """Job `name` (running) ends as drawn."""
        self.now += 1.0
        outcome = self.outcomes[name]
        if outcome == "cancel":
            self.send(JobCancelled(self.now, name))
            self.send(JobFinished(self.now, name, False))  # the stop signal ended it
        else:
            self.send(JobFinished(self.now, name, outcome == "ok"))

    def running(self) -> list[str]:
        return sorted(n for n, s in self.state.items() if s is JobState.RUNNING)


def node() -> Node:
    return Node("n0", preset(DGX1), hardware=Hardware("V100", 0, 4000, None))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pipelines(), st.data())
def test_jobs_run_after_their_dependencies_and_none_is_left_waiting(
    pipeline: tuple[list[JobSpec], dict[str, str]], data: st.DataObject
) -> None:
    specs, outcomes = pipeline
    core = Scheduler(cluster(node()), make_scheduler_policy("toposched", {}), validate=True)
    driver = Pipeline({s.name: s for s in specs}, outcomes, core)
    for spec in specs:
        driver.send(JobSubmitted(driver.now, spec))
        # Some running jobs end before the next submission; a waiting one may be cancelled.
        for name in data.draw(st.lists(st.sampled_from(driver.running() or ["-"]), max_size=2)):
            if driver.state.get(name) is JobState.RUNNING:
                driver.end_one(name)
        waiting = driver.state[spec.name] is JobState.PENDING
        if outcomes[spec.name] == "cancel" and waiting and data.draw(st.booleans()):
            driver.send(JobCancelled(driver.now, spec.name))
    while driver.running():
        driver.end_one(driver.running()[0])
    left = {n: s for n, s in driver.state.items() if not s.terminal}
    assert not left, f"left waiting: {left}"
    assert core.books.deps.unmet == {} and core.books.deps.waiters == {}
