"""The driver kit: what every shell around the core does, in one base class.

A driver (the simulator, the server runtime, the Kubernetes scheduler) turns what happens in its
world into core events, feeds them one at a time, and carries out the actions that come back in
the order they came. Each StartJob and StopJob is followed by the Transition that records it; the
kit pairs them and hands each Transition to `on_transition` with its start or stop, and a start
or stop left without one is a bug in the core (`DriverError`). Carrying out may produce events
of its own (a start that failed): `post` queues them behind the event being carried out, so
that the core sees every event in order. After a restart, `restore` rebuilds the core from what
the driver stored: jobs that hold GPUs first, then waiting jobs in submission order. Drivers
read the core's state through `view` (`toposched.core.views.CoreView`), never its books.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable, Sequence

from toposched.core import (
    Action,
    Ended,
    Event,
    JobRestored,
    JobSpec,
    Placement,
    Scheduler,
    StartJob,
    StopJob,
    StopKind,
    Transition,
)
from toposched.core.errors import BatchRefused
from toposched.core.views import CoreView


class DriverError(AssertionError):
    """The core's actions broke their contract (a start or stop without its transition)."""


class Driver(ABC):
    """Feeds events to one `Scheduler` and carries out its actions; subclasses say how."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.core = scheduler
        self.view: CoreView = scheduler.view
        self._events: deque[Event] = deque()

    def replace_core(self, scheduler: Scheduler) -> None:
        """Drive a new core from now on (one rebuilt from stored state), forgetting posted
        events."""
        self.core = scheduler
        self.view = scheduler.view
        self._events.clear()

    def feed(self, *events: Event) -> None:
        """Hand events to the core and carry out what it asks, including the events that
        carrying out posts, until none is left."""
        self._events.extend(events)
        while self._events:
            event = self._events.popleft()
            self.carry_out(self.decide(event), event.time)

    def feed_batch(self, events: Sequence[Event]) -> None:
        """Hand the core several events at once, for one scheduling cycle after them all
        (`Scheduler.handle_batch`), and carry out its answer; then the events that carrying
        out posts, one by one. A refused event is raised once the others' answer is carried
        out."""
        if not events:
            return
        now = max(event.time for event in events)
        try:
            actions = self.core.handle_batch(events)
        except BatchRefused as err:
            self.carry_out(err.actions, now)
            raise err.cause from None
        self.carry_out(actions, now)
        self.feed()

    def post(self, event: Event) -> None:
        """An event that carrying out produced; the core takes it after the current one."""
        self._events.append(event)

    def drop_posted(self) -> None:
        """Forget posted events (a driver that can no longer carry out decisions)."""
        self._events.clear()

    def decide(self, event: Event) -> list[Action]:
        """The core's answer to one event (a driver may time it, or log it)."""
        return self.core.handle(event)

    def carry_out(self, actions: Iterable[Action], now: float) -> None:
        """Pair each start and stop with its Transition and hand them to `on_transition`, in
        the order the core decided them."""
        starts: dict[str, StartJob] = {}
        stops: dict[str, StopJob] = {}
        for action in actions:
            match action:
                case StartJob():
                    starts[action.job] = action
                case StopJob():
                    stops[action.job] = action
                case Transition():
                    start, stop = starts.pop(action.job, None), stops.pop(action.job, None)
                    self.on_transition(action, start, stop, now)
                case _:
                    raise DriverError(f"unknown action {action!r}")
        left = sorted({*starts, *stops})
        if left:
            raise DriverError(f"a start or stop without its transition: {', '.join(left)}")

    @abstractmethod
    def on_transition(
        self, t: Transition, start: StartJob | None, stop: StopJob | None, now: float
    ) -> None:
        """Carry out one state change: launch `start`'s workers, signal `stop`'s, persist."""

    def restore(
        self,
        now: float,
        spec: JobSpec,
        submitted: float,
        placement: Placement | None = None,
        restarts: int = 0,
        stopping: StopKind | None = None,
        service_gpu_s: float = 0.0,
        ended: Ended = (),
        started: float | None = None,
    ) -> None:
        """Give the core back one stored job: running (or being stopped) on `placement` since
        `started`, or waiting, with the service it had had by `now`
        (`CoreView.attained_service`) and, for a waiting one, how the jobs it runs after that
        the core no longer holds ended. Raises SchedulingError, changing nothing, if the
        placement no longer fits."""
        self.feed(
            JobRestored(
                now, spec, submitted, placement, restarts, stopping, service_gpu_s, ended, started
            )
        )

    def stop_signal(self, spec: JobSpec, kind: StopKind) -> tuple[str, float]:
        """The signal and grace the core would send to stop `spec` for `kind`: a stop carried
        on after a restart sends the same."""
        return self.view.stop_signal(spec, kind)
