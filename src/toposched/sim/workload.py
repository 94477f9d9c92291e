"""Trace jobs as scheduler jobs: the gang shape, locality and checkpoint contract they get."""

from __future__ import annotations

from dataclasses import dataclass

from toposched.core import After, Checkpoint, JobSpec, Locality, LocalityRule
from toposched.sim.traces import TraceJob


@dataclass(frozen=True)
class Workload:
    """How every trace job becomes a JobSpec, the same for each policy compared.

    A job of G GPUs is G one-GPU workers (one process per GPU, as data-parallel training
    runs them, and as Kubernetes binds them one pod per GPU). It prefers one node (one rack
    when it is larger than a node) and accepts any placement after waiting `relax_after_s`,
    as Philly's scheduler relaxed locality for waiting jobs. With `checkpoint_grace_s` set,
    every job saves its state on SIGTERM within that time, so it can be preempted or moved
    without losing more than the work since its last checkpoint: it saves every
    `checkpoint_interval_s` seconds of work, and a restart after a stop costs `restore_s`
    seconds (processes, framework and data loader start, restore from storage); otherwise a
    stopped job starts over, and its restart costs as much. Each worker asks its node for
    the trace's CPUs and memory per GPU and one of its GPU types (all of them one type: a
    gang does not mix types).
    """

    relax_after_s: float | None = 1800.0
    checkpoint_grace_s: float | None = 30.0
    checkpoint_interval_s: float = 1800.0
    restore_s: float = 120.0

    def spec(self, job: TraceJob, node_gpus: int) -> JobSpec:
        prefer = Locality.NODE if job.gpus <= node_gpus else Locality.RACK
        if self.relax_after_s is None:
            locality = LocalityRule(prefer)
        else:
            locality = LocalityRule(prefer, Locality.ANY, self.relax_after_s)
        checkpoint = None
        if self.checkpoint_grace_s is not None:
            checkpoint = Checkpoint(
                "SIGTERM", self.checkpoint_grace_s, interval_s=self.checkpoint_interval_s
            )
        return JobSpec(
            job.name,
            workers=job.gpus,
            gpus_per_worker=1,
            queue=job.queue,
            locality=locality,
            checkpoint=checkpoint,
            model=job.model,
            cpus=job.cpus,
            memory=job.memory,
            gpu_types=job.gpu_types,
            after=tuple(After.parse(text) for text in job.after),
            gpu_milli=job.gpu_milli,
        )


DEFAULT_WORKLOAD = Workload()
