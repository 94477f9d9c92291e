"""Each job's outcome of a few thousand Philly jobs per policy, pinned: a speed-up changes none.

The simulator and the core it drives are made faster from time to time; this pins what they
decide. Each case replays a prefix of the Philly trace (fixed seed) on a cluster small enough
that jobs queue, and compares every job's record (state, first start, finish, preemptions,
migrations, stops, a digest of its lost, held and useful GPU time, each start's nodes by their
index) and the cluster samples with tests/fixtures/sim/outcomes.tsv.xz, written at a commit
whose results were right. Times are compared to the microsecond.

A change meant to change what a policy decides rewrites the file (and says so in its commit):

    PYTHONPATH=src .venv/bin/python -m tests.integration.test_sim_outcomes --write
"""

from __future__ import annotations

import hashlib
import lzma
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from toposched.sim.engine import SimResult, Simulation
from toposched.sim.traces import Trace, read_trace
from toposched.topology.clusterfile import parse_shorthand

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "data" / "traces" / "philly" / "philly.csv"
GOLDEN = ROOT / "tests" / "fixtures" / "sim" / "outcomes.tsv.xz"
SHOWN = 5  # differing jobs a failure lists


@dataclass(frozen=True)
class Case:
    policy: str
    jobs: int
    cluster: str
    guarantees: tuple[tuple[str, int], ...] = ()

    @property
    def name(self) -> str:
        shares = "".join(f"+{queue}={gpus}" for queue, gpus in self.guarantees)
        return f"{self.policy}/{self.jobs}/{self.cluster}{shares}"


# The two policies of the whole-trace benchmark on 8 DGX-1s (toposched preempts, migrates and
# reserves there); both again with guaranteed shares (reclaim) on fewer nodes; the other
# policies on a shorter prefix.
SHARES = (("6214e9", 16), ("11cb48", 16))
CASES = (
    Case("toposched", 3000, "8*dgx1-v100/8"),
    Case("hived-like", 3000, "8*dgx1-v100/8"),
    Case("toposched", 1500, "6*dgx1-v100/8", SHARES),
    Case("hived-like", 1500, "6*dgx1-v100/8", SHARES),
    Case("k8s-default", 1000, "8*dgx1-v100/8"),
    Case("fifo-gang-firstfit", 1000, "8*dgx1-v100/8"),
    Case("gandiva-like", 1000, "8*dgx1-v100/8"),
)


@cache
def trace(jobs: int) -> Trace:
    return read_trace(TRACE, limit=jobs, seed=0)


def _t(value: float | None) -> str:
    return "-" if value is None else f"{value:.6f}"


def outcomes(case: Case) -> dict[str, str]:
    """Each job's record, and the samples' digest (key `samples`), as lines of text."""
    result: SimResult = Simulation(
        trace(case.jobs),
        parse_shorthand(case.cluster),
        case.policy,
        seed=0,
        guarantees=dict(case.guarantees),
    ).run()
    index = {node.name: str(i) for i, node in enumerate(result.cluster.nodes)}
    out = {}
    for j in result.jobs:
        state = j.state.value if j.state is not None else "-"
        starts = ";".join(",".join(index[n] for n in nodes) for nodes in j.placements)
        # The GPU time figures are kept as a digest: they change with any placement or speed,
        # and their digits would make most of the file.
        held = " ".join(_t(v) for v in (j.lost_gpu_s, j.gpu_s, j.speed_s, j.partial_gpu_s))
        out[j.trace.name] = "\t".join(
            (
                state,
                _t(j.first_start),
                _t(j.finish),
                str(j.preemptions),
                str(j.migrations),
                str(j.stops),
                hashlib.sha256(held.encode()).hexdigest()[:8],
                starts,
            )
        )
    samples = "\n".join(
        f"{_t(s.time)} {s.allocated} {s.queued} {s.fragmentation:.9f}" for s in result.samples
    )
    digest = hashlib.sha256(samples.encode()).hexdigest()[:16]
    out["samples"] = f"{len(result.samples)} {digest} end {_t(result.end)}"
    return out


def read_golden() -> dict[str, dict[str, str]]:
    golden: dict[str, dict[str, str]] = {}
    with lzma.open(GOLDEN, "rt", encoding="utf-8") as handle:
        for line in handle:
            case, job, record = line.rstrip("\n").split("\t", 2)
            golden.setdefault(case, {})[job] = record
    return golden


def write_golden() -> None:
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    with lzma.open(GOLDEN, "wt", encoding="utf-8") as packed:
        for case in CASES:
            for job, record in outcomes(case).items():
                packed.write(f"{case.name}\t{job}\t{record}\n")
            print(case.name, "written", file=sys.stderr)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_each_job_has_its_pinned_outcome(case: Case) -> None:
    want = read_golden().get(case.name)
    assert want is not None, f"no pinned outcomes for {case.name}: rewrite {GOLDEN.name}"
    got = outcomes(case)
    differ = [job for job in want.keys() | got.keys() if want.get(job) != got.get(job)]
    if not differ:
        return
    order = list(want)
    differ.sort(key=lambda job: order.index(job) if job in want else len(order))
    fields = "state start finish preemptions migrations stops "
    fields += "digest(lost_gpu_s gpu_s speed_s partial_gpu_s) starts"
    lines = [f"{len(differ)} of {len(want)} records differ in {case.name}; fields: {fields}"]
    for job in differ[:SHOWN]:
        lines += [f"  {job}", f"    pinned: {want.get(job)}", f"    now:    {got.get(job)}"]
    pytest.fail("\n".join(lines), pytrace=False)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit(__doc__)
    write_golden()
