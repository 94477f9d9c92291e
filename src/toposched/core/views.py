"""Read-only views of the core for drivers: a job's state and reason, explanations in plain
words, and `CoreView`, all that a driver may read of the books (it changes nothing)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from toposched.core.actions import StopKind
from toposched.core.books import Books
from toposched.core.changes import stop_signal
from toposched.core.job import After, JobSpec, JobState
from toposched.core.ordering import Cut, Waiting
from toposched.core.policy import SchedulerPolicy
from toposched.core.records import JobRecord, Reservation, Said
from toposched.core.reservation import describe
from toposched.placement.gang import Placement


@dataclass(frozen=True)
class JobView:
    """What the core tells a driver about one job."""

    name: str
    state: JobState
    placement: Placement | None
    reason: str
    restarts: int
    history: tuple[tuple[float, str], ...]
    spec: JobSpec | None = None
    submitted: float = 0.0
    started: float | None = None


class CoreView:
    """What drivers read of the core: jobs, who holds which GPU, failed GPUs, queues, labels,
    reasons and explanations, and the stop signal the core would send."""

    def __init__(self, books: Books, waiting: Waiting, policy: SchedulerPolicy) -> None:
        self._books = books
        self._waiting = waiting
        self.policy = policy

    def knows(self, name: str) -> bool:
        """The core holds this job (live, or ended and not yet forgotten)."""
        return name in self._books.jobs

    def job(self, name: str) -> JobView:
        rec = self._books.job(name)
        return _view(rec, self.reason(rec))

    def jobs(self) -> list[JobView]:
        """Every job the core holds, in submission order (the queue walked once for the
        reasons of them all)."""
        recs = sorted(self._books.jobs.values(), key=lambda r: r.seq)
        reasons = self.reasons(r.name for r in recs)
        return [_view(rec, reasons[rec.name]) for rec in recs]

    def waiting_in(self, queue: str) -> int:
        """The jobs of `queue` waiting: filed to be tried, or for jobs they run after (those
        are few, and walked)."""
        jobs = self._books.jobs
        held = sum(jobs[name].spec.queue == queue for name in self._books.deps.unmet)
        return self._waiting.lists.per_queue.get(queue, 0) + held

    def pending(self) -> Iterator[JobRecord]:
        """Pending jobs in the order the next cycle would try them."""
        return self._waiting.in_order()

    def owners(self) -> dict[tuple[str, int], str]:
        """(node, GPU) -> the job holding it."""
        nodes = self._books.capacity.nodes
        return {(nodes[i].name, gpu): job for (i, gpu), job in self._books.owner.items()}

    def shares(self) -> dict[tuple[str, int], dict[str, tuple[int, int]]]:
        """(node, GPU) -> each job holding a share of it, with its (thousandths, MiB)."""
        nodes = self._books.capacity.nodes
        return {
            (nodes[i].name, gpu): dict(on_gpu) for (i, gpu), on_gpu in self._books.shares.items()
        }

    def unhealthy(self, node: str) -> frozenset[int]:
        """The failed GPUs of `node`."""
        i = self._books.capacity.index.get(node)
        mask = 0 if i is None else self._books.unhealthy.get(i, 0)
        return frozenset(g for g in range(mask.bit_length()) if mask >> g & 1)

    def free(self) -> Iterator[tuple[str, int, int]]:
        """(node, its GPUs, the mask of its free ones) for every node in the cluster."""
        cap = self._books.capacity
        for i in cap.present_indices():
            yield cap.nodes[i].name, cap.nodes[i].size, cap.free[i]

    def labels(self, node: str) -> dict[str, str]:
        return dict(self._books.labels.get(node, {}))

    def held(self, node: str) -> tuple[int, int]:
        """Millicores and bytes of memory the jobs on `node` hold (0, 0 for an unknown node)."""
        cap = self._books.capacity
        i = cap.index.get(node)
        return (0, 0) if i is None else (cap.used_cpus[i], cap.used_memory[i])

    def waiting_and_running(self) -> dict[str, tuple[int, int]]:
        """Per queue: its jobs waiting, and those holding GPUs (running or stopping)."""
        out: dict[str, tuple[int, int]] = {}
        for rec in self._books.jobs.values():
            if rec.state.terminal:
                continue
            waiting, holding = out.get(rec.spec.queue, (0, 0))
            pending = rec.state is JobState.PENDING
            out[rec.spec.queue] = (waiting + pending, holding + (not pending))
        return out

    def queues(self) -> dict[str, tuple[int, int]]:
        """(guaranteed, used) GPUs per queue."""
        return {q.name: (q.guaranteed, q.used) for q in self._books.queues.values()}

    def partial_holds(self) -> dict[str, int]:
        """GPUs bound to waiting jobs, by job (only policies without gang admission bind
        workers before the whole gang fits)."""
        return dict(self._books.held_waiting)

    def attained_service(self, name: str) -> float | None:
        """The GPU-seconds of service job `name` has had by the core's time, as least attained
        service counts them (since its last promotion): what a driver persists and hands back
        in `JobRestored.service_gpu_s`. None for a job the core no longer holds."""
        rec = self._books.jobs.get(name)
        if rec is None:
            return None
        return max(0.0, rec.service(self._books.now) - rec.forgiven)

    def stop_signal(self, spec: JobSpec, kind: StopKind) -> tuple[str, float]:
        """The signal and grace the core sends when it stops `spec` for `kind`: a driver that
        carries on a stop after a restart sends the same."""
        return stop_signal(spec, kind, self.policy)

    def reason(self, rec: JobRecord) -> str:
        """The last recorded reason; a job not yet tried says which jobs are ahead of it."""
        noted = self._noted(rec)
        if noted is not None:
            return noted
        ahead: list[str] = []
        for other in self._waiting.in_order():
            if other.name == rec.name:
                break
            ahead.append(other.name)
        return _queued(ahead)

    def reasons(self, names: Iterable[str]) -> dict[str, str]:
        """`reason` of many jobs: the queue is walked once for all, not once per job (a driver
        that tells thousands of waiting jobs why they wait)."""
        order: list[str] | None = None
        position: dict[str, int] = {}
        out: dict[str, str] = {}
        for name in names:
            rec = self._books.job(name)
            noted = self._noted(rec)
            if noted is None:
                if order is None:
                    order = [r.name for r in self._waiting.in_order()]
                    position = {job: i for i, job in enumerate(order)}
                noted = _queued(order[: position.get(name, len(order))])
            out[name] = noted
        return out

    def state(self, name: str) -> JobState:
        """A job's state alone (what `job` gives, without the cost of its reason)."""
        return self._books.job(name).state

    def _noted(self, rec: JobRecord) -> str | None:
        """Why the job is as it is, as recorded; None for a waiting job not yet tried. A job
        the latest cycles did not reach is told what stopped them, the newest word winning; a
        free GPU count is the one of now (jobs started since the note took some)."""
        if rec.state is not JobState.PENDING:
            return rec.reason
        books, waiting = self._books, self._waiting
        if books.deps.blocked(rec.name):  # said as it is now: those ended since are left out
            return books.deps.waits(rec.name)
        holder = books.reservation is not None and books.reservation.job == rec.name
        text = None if rec.reason == "submitted" else rec.reason
        newest = (rec.tried, text, rec.said)
        filed = waiting.lists.filed.get(rec.name)
        note = waiting.shape_notes.get(filed[1]) if filed else None
        # A cycle that stopped before this job still said why its shape cannot start.
        if note is not None and note[0] > newest[0] and not holder:
            newest = note
        cut = waiting.cut
        if cut is not None and cut.cycle > newest[0] and cut.head != rec.name and not holder:
            res = books.reservation
            if res is not None and books.jobs[res.job].state is not JobState.PENDING:
                res = None  # its holder has started since
            newest = (cut.cycle, _cut_text(cut, res), None)
        _, text, said = newest
        return text if text is None or said is None else self._as_now(rec, text, said)

    def _as_now(self, rec: JobRecord, text: str, said: Said) -> str:
        """A note with what it states brought up to now: the free GPU count, the jobs on its
        reserved GPUs, and no waiting behind a reservation whose holder has started."""
        books = self._books
        if said.reserved:
            text, _, _ = text.partition("; reserved ")
            res = books.reservation
            if res is not None and res.job == rec.name:
                text = f"{text}; {describe(books, res, self.policy.default_runtime_s)}"
        free = books.capacity.total_free
        if said.free is not None and said.free != free:
            text = text.replace(f"; {said.free} are free", f"; {free} are free", 1)
        behind = said.behind
        holder = books.jobs.get(behind) if behind is not None else None
        if behind is not None and (holder is None or holder.state is not JobState.PENDING):
            for words in (
                f" outside the GPUs reserved for {behind}; waiting behind it",
                f"; waiting behind {behind}",
            ):
                text = text.replace(words, "", 1)
        return text

    def explain(self, name: str, when: Callable[[float], str] | None = None) -> str:
        """Why a job waits, or why it runs where it runs, in plain words; `when` shows an event
        time (a driver on a wall clock prints a date, the default `t=<seconds>`)."""
        rec = self._books.job(name)
        spec = rec.spec
        locality = spec.locality
        lines = [
            f"job {rec.name}: {rec.state.value}; queue {spec.queue}, priority {spec.priority}, "
            f"{spec.workers} worker(s) x {spec.gpus_per_worker} GPU(s), "
            f"locality {locality.prefer.value}"
            + (
                f" (then {locality.accept.value} after {locality.relax_after_s:g} s)"
                if locality.accept
                else ""
            )
            + (f", on nodes labelled {spec.selector.describe()}" if spec.selector else "")
        ]
        if spec.after:
            lines.append(f"after: {', '.join(self._after(dep) for dep in spec.after)}")
        if rec.placement is not None:
            lines.append(f"placement: {rec.placement.describe()}")
        if self.policy.demote_after_gpu_h is not None:
            lines.append(self._service(rec))
        lines.append(f"now: {self.reason(rec)}")
        show = when or (lambda t: f"t={t:g}")
        lines.extend(f"  {show(t)}: {text}" for t, text in rec.log)
        return "\n".join(lines)

    def _after(self, dep: After) -> str:
        """`prep:ok (succeeded)`: a job it runs after, and its state if the core holds it."""
        other = self._books.jobs.get(dep.job)
        return f"{dep} ({other.state.value if other is not None else 'ended'})"

    def _service(self, rec: JobRecord) -> str:
        waiting = self._waiting
        served = rec.service(self._books.now)
        text = f"service: {served / 3600:.2f} GPU-hours"
        levels = waiting.policy.demoted_levels
        if rec.state is JobState.PENDING:
            level = waiting.waiting_level(rec)
            if level and levels > 1:
                return (
                    f"{text} (demoted, level {level} of {levels}: ranks after jobs at lower levels)"
                )
            demoted = level >= 1
        else:
            demoted = waiting.demoted(rec)
        return text + (" (demoted: ranks after jobs that have had less)" if demoted else "")


def _view(rec: JobRecord, reason: str) -> JobView:
    return JobView(
        rec.name,
        rec.state,
        rec.placement,
        reason,
        rec.restarts,
        tuple(rec.log),
        rec.spec,
        rec.submitted,
        rec.started,
    )


def _queued(ahead: list[str]) -> str:
    """A waiting job not yet tried: the jobs ahead of it, the first few by name."""
    if not ahead:
        return "queued; next to be tried"
    named = ", ".join(ahead[:3])
    more = f" and {len(ahead) - 3} more" if len(ahead) > 3 else ""
    return f"queued behind {named}{more}"


def _cut_text(cut: Cut, res: Reservation | None) -> str:
    if cut.head is not None:
        return f"waiting behind {cut.head}, which cannot start yet (jobs start in order)"
    behind = f"; waiting behind {res.job}" if res is not None else ""
    return f"no GPU is free{behind}"
