"""FGD's own simulator as the peer: its Go module built once, run by its experiments' protocol.

The peer is `simon`, the simulator of Weng et al., "Beware of Fragmentation" (USENIX ATC'23),
module github.com/hkust-adsl/kubernetes-scheduler-simulator at the commit pinned below. This
module builds it from the Go module proxy into a cache outside git (~/.cache/toposched/fgdsim or
$TOPOSCHED_FGDSIM_CACHE), or takes a `simon` binary named by $TOPOSCHED_FGDSIM_BIN, writes the
openb node list and pod list as the YAML its data/ scripts make, runs its FGD and best-fit
policies as its experiments/ scripts do, and reads their figures from its log.

The protocol (its experiments/README.md and run_scripts/generate_run_scripts.py): the pods are
shuffled (seed 42 for the first of its ten repeats) and resampled until they ask for 130% of the
cluster's GPUs ("workload tuning" 1.3); every pod arrives and stays (no deletions); after each
arrival the simulator logs the GPU thousandths allocated and arrived. The point of measurement is
arrived demand at 100% of the cluster's GPUs (Fig. 11-14 of the paper): the allocation ratio is
the mean of the ratios logged there (merge_alloc_discrete.py's rounding), and the unallocated
GPUs are the cluster's GPUs less those allocated (fractions counted: 100% less the ratio).

Run: .venv/bin/python benchmarks/fgd_peer.py [--trace CSV] [--nodes CSV] [--policy fgd|best-fit]
     [--seed 42] [--until PCT] [--keep DIR] [--smoke]
     .venv/bin/python benchmarks/fgd_peer.py --read LOG [LOG ...]   (logs kept by --keep)
     .venv/bin/python benchmarks/fgd_peer.py --build   (make fgdsim-binary: once per machine,
     before the smoke, whose runner gives each script 120 s)
Prints a table and a JSON last line (the figures per policy). --smoke: every 50th node of the
node list (25 nodes, 116 GPUs) and the first 300 pods, both policies (CI; the first run builds the
simulator). Where the simulator cannot be had (no Go, or the module proxy does not give the
module) the smoke writes every input, says NOT RUN and exits 0, unless $TOPOSCHED_FGDSIM_STRICT
is set; a full run exits 1. --until 102 stops each run once the figures at 100% are whole (the
curve past it is cut). A run whose scheduler failed on a pod is flagged, and a full run then
exits 1: the simulator's filter and its score plugin read a node's GPUs from two caches that its
binding updates asynchronously; where they disagree (seen on a busy machine) the score fails and
the pod is counted unplaced, so the figures are no longer the policy's.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_TRACE = ROOT / "data" / "traces" / "openb" / "openb_pod_list_default.csv"
DEFAULT_NODES = ROOT / "data" / "clusters" / "openb" / "openb_node_list_gpu_node.csv"

MODULE = "github.com/hkust-adsl/kubernetes-scheduler-simulator"
# Its newest commit (8f3d641, 2024-07-31; the paper's artifact is tag atc23, whose simulator
# code is the same): a commit without a semantic version tag, named as Go names it.
VERSION = "v0.0.0-20240731153805-8f3d6417353c"
CACHE_ENV = "TOPOSCHED_FGDSIM_CACHE"
BINARY_ENV = "TOPOSCHED_FGDSIM_BIN"
STRICT_ENV = "TOPOSCHED_FGDSIM_STRICT"  # set: a smoke that cannot have the simulator fails
FIRST_BUILD = "a few minutes on 2 cores"
SMOKE_PODS = 300

TUNE_RATIO = 1.3  # pods resampled to ask 130% of the cluster's GPUs
FIRST_SEED = 42  # the first of the ten repeats (42..51)
MEASURE_AT = 100  # arrived demand, in % of the cluster's GPUs

# policy -> (its score plugin, the GPU selection its Open-Gpu-Share reserve step uses):
# generate_config_and_run.py makes FGD choose the GPU by its own score, best-fit by "best".
POLICIES: dict[str, tuple[str, str]] = {
    "fgd": ("FGDScore", "FGDScore"),
    "best-fit": ("BestFitScore", "best"),
}
# policy -> the prefix of its columns in issue 42's JSON line (fgd_sim_*, bestfit_sim_*)
JSON_PREFIX = {"fgd": "fgd_sim", "best-fit": "bestfit_sim"}

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu")
GPU_MILLI = "alibabacloud.com/gpu-milli"
GPU_COUNT = "alibabacloud.com/gpu-count"
GPU_MODEL = "alibabacloud.com/gpu-card-model"


class BuildError(RuntimeError):
    """The simulator cannot be built or found here; the message says why and what to do."""


class PeerError(RuntimeError):
    """A run of the simulator failed or its log lacks what the protocol reads."""


# ---------------------------------------------------------------------------------------------
# Building


def go_command() -> str | None:
    """The `go` command, or None where the machine has no Go."""
    return shutil.which("go")


def cache_root() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV]).expanduser()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "toposched" / "fgdsim"


def build_key(go: str) -> str:
    """What a build is named by: the pinned version and the Go that builds it."""
    version = subprocess.run(
        [go, "env", "GOVERSION"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return f"{VERSION}-{hashlib.sha256(version.encode()).hexdigest()[:12]}"


def built() -> Path | None:
    """The `simon` to run: $TOPOSCHED_FGDSIM_BIN, else the cached build, else None."""
    named = os.environ.get(BINARY_ENV)
    if named:
        path = Path(named).expanduser()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise BuildError(f"${BINARY_ENV} is {named}: not an executable file")
        return path
    go = go_command()
    if go is None:
        return None
    path = cache_root() / build_key(go) / "simon"
    return path if path.is_file() else None


def build(say: Callable[[str], None] = print) -> Path:
    """The `simon` binary, built from the pinned module where missing."""
    have = built()
    if have is not None:
        return have
    go = go_command()
    if go is None:
        raise BuildError(
            "no `go` command: FGD's simulator is built from its Go module (install Go 1.26 or "
            f"newer), or set ${BINARY_ENV} to a `simon` built from {MODULE}@{VERSION}"
        )
    env = {
        **os.environ,
        "GOTOOLCHAIN": os.environ.get("GOTOOLCHAIN", "local"),
        "GOFLAGS": "-mod=mod -buildvcs=false",
        "CGO_ENABLED": "0",
    }
    say(f"fetching {MODULE}@{VERSION} from the Go module proxy ...")
    fetched = subprocess.run(
        [go, "mod", "download", "-json", f"{MODULE}@{VERSION}"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    source, error = _downloaded(fetched.stdout)
    if source is None:
        reason = error or fetched.stderr.strip() or "no answer"
        raise BuildError(
            f"the Go module proxy gave no {MODULE}@{VERSION}: {reason}\n"
            f"Build `simon` (its ./cmd) from that commit elsewhere and set ${BINARY_ENV} to it."
        )
    home = cache_root() / build_key(go)
    home.parent.mkdir(parents=True, exist_ok=True)
    say(f"building simon ({FIRST_BUILD}) ...")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(dir=home.parent, prefix=".building-") as scratch:
        # The module cache is read-only and a main module's replace directives (its Kubernetes
        # fork) apply only when building inside it: build in a writable copy of its tree.
        tree = Path(scratch) / "src"
        shutil.copytree(source, tree)
        for path in [tree, *tree.rglob("*")]:
            path.chmod(path.stat().st_mode | stat.S_IWUSR)
        out = Path(scratch) / "simon"
        done = subprocess.run(
            [go, "build", "-trimpath", "-ldflags", "-s -w", "-o", str(out), "./cmd"],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise BuildError(f"`go build` of simon failed:\n{done.stderr[-4000:]}")
        home.mkdir(exist_ok=True)
        os.replace(out, home / "simon")
    say(f"built simon in {time.monotonic() - started:.0f} s: {home / 'simon'}")
    return home / "simon"


def _downloaded(answer: str) -> tuple[Path | None, str | None]:
    """From `go mod download -json`'s answer: the module's folder (None where it failed) and
    the error it names, if any."""
    try:
        info = json.loads(answer)
    except json.JSONDecodeError:
        return None, None
    if not isinstance(info, dict):
        return None, None
    if info.get("Error"):
        return None, str(info["Error"])
    return (Path(info["Dir"]) if info.get("Dir") else None), None


# ---------------------------------------------------------------------------------------------
# Inputs, as the simulator's data/ scripts write them


def _rows(path: Path, required: Sequence[str]) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: no column {', '.join(missing)} (has {reader.fieldnames})")
        return list(reader)


def _integer(path: Path, line: int, column: str, text: str) -> int:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{path}:{line}: {column} is {text!r}, not a number") from None
    if value < 0 or value != int(value):
        raise ValueError(f"{path}:{line}: {column} is {text!r}, not a whole number >= 0")
    return int(value)


def node_documents(path: Path, limit: Iterable[int] | None = None) -> list[dict[str, Any]]:
    """The openb node list as Node objects, as data/node_yaml/openb_node_list_gpu_node.yaml
    has them; `limit` picks rows by index."""
    rows = _rows(path, NODE_COLUMNS)
    picked = list(limit) if limit is not None else range(len(rows))
    nodes = []
    for index in picked:
        row, line = rows[index], index + 2
        gpus = _integer(path, line, "gpu", row["gpu"])
        resources = {
            GPU_COUNT: str(gpus),
            GPU_MILLI: str(gpus * 1000),
            "cpu": f"{_integer(path, line, 'cpu_milli', row['cpu_milli'])}m",
            "memory": f"{_integer(path, line, 'memory_mib', row['memory_mib'])}Mi",
            "pods": "1001",
        }
        labels = {
            "beta.kubernetes.io/os": "linux",
            "kubernetes.io/hostname": row["sn"],
            "kubernetes.io/os": "linux",
        }
        if row["model"]:
            labels[GPU_MODEL] = row["model"]
        nodes.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"labels": labels, "name": row["sn"]},
                "status": {"allocatable": dict(resources), "capacity": dict(resources)},
            }
        )
    return nodes


def pod_documents(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The openb pod list as Pod objects, as data/pod_csv_to_yaml.py writes them (a GPU pod's
    thousandths clamped to 0..1000, its accepted GPU types as the card-model annotation)."""
    rows = _rows(path, POD_COLUMNS)
    pods = []
    for index, row in enumerate(rows[:limit] if limit is not None else rows):
        line = index + 2
        requests = {
            "cpu": f"{_integer(path, line, 'cpu_milli', row['cpu_milli'])}m",
            "memory": f"{_integer(path, line, 'memory_mib', row['memory_mib'])}Mi",
        }
        annotations: dict[str, str] = {}
        gpus = _integer(path, line, "num_gpu", row["num_gpu"])
        if gpus:
            # A list without gpu_milli (multigpu50) asks whole GPUs.
            given = row.get("gpu_milli")
            milli = _integer(path, line, "gpu_milli", given) if given else 1000
            annotations[GPU_MILLI] = str(min(milli, 1000))
            annotations[GPU_COUNT] = str(gpus)
            spec = "|".join(t for t in (row.get("gpu_spec") or "").split("|") if t)
            if spec:
                annotations[GPU_MODEL] = spec
        metadata: dict[str, Any] = {"name": row["name"], "namespace": "paib-gpu"}
        if annotations:
            metadata["annotations"] = annotations
        container = {
            "name": "main",
            "image": "tensorflow:latest",
            "imagePullPolicy": "Always",
            "resources": {"requests": requests, "limits": dict(requests)},
        }
        pods.append(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": metadata,
                "spec": {
                    "containers": [container],
                    "restartPolicy": "OnFailure",
                    "dnsPolicy": "Default",
                },
            }
        )
    return pods


def cluster_config(cluster_dir: Path, seed: int) -> dict[str, Any]:
    """generate_config_and_run.py's cluster config with the experiments' flags (-tune 1.3
    -tuneseed SEED --shuffle-pod=true; no descheduling, no inflation, no new workload)."""
    return {
        "apiVersion": "simon/v1alpha1",
        "kind": "Config",
        "metadata": {"name": "simon-openb-config"},
        "spec": {
            "appList": None,
            "cluster": {"customConfig": str(cluster_dir)},
            "newNode": "example/newnode/gpushare",
            "customConfig": {
                "shufflePod": True,
                "exportConfig": {},
                "workloadInflationConfig": {"ratio": 1, "seed": 233},
                "workloadTuningConfig": {"ratio": TUNE_RATIO, "seed": seed},
                "descheduleConfig": {"ratio": 0.0},
                "newWorkloadConfig": None,
                "typicalPodsConfig": {
                    "isInvolvedCpuPods": True,
                    "podPopularityThreshold": 95,
                    "podIncreaseStep": 1,
                    "gpuResWeight": 0,
                },
            },
        },
    }


def scheduler_config(policy: str) -> dict[str, Any]:
    """generate_config_and_run.py's scheduler config for `-FGD 1000 -gpusel FGD -dimext share
    -norm max` (fgd) or `-BestFit 1000` (best-fit: its defaults, share and max)."""
    if policy not in POLICIES:
        raise ValueError(f"policy {policy!r}: the peer runs {', '.join(POLICIES)}")
    score, gpu_selection = POLICIES[policy]
    methods = {"dimExtMethod": "share", "normMethod": "max"}
    disabled = [
        *(s for s, _ in POLICIES.values()),
        "RandomScore",
        "DotProductScore",
        "GpuClusteringScore",
        "GpuPackingScore",
        "ImageLocality",
        "NodeAffinity",
        "PodTopologySpread",
        "TaintToleration",
        "NodeResourcesBalancedAllocation",
        "InterPodAffinity",
        "NodeResourcesLeastAllocated",
        "NodePreferAvoidPods",
    ]
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1beta1",
        "kind": "KubeSchedulerConfiguration",
        "percentageOfNodesToScore": 100,
        "profiles": [
            {
                "schedulerName": "simon-scheduler",
                "plugins": {
                    "filter": {"enabled": [{"name": "Open-Gpu-Share"}]},
                    "preScore": {"disabled": [{"name": "RandomScore"}], "enabled": None},
                    "score": {
                        "disabled": [{"name": n} for n in dict.fromkeys(disabled)],
                        "enabled": [{"name": score, "weight": 1000}],
                    },
                    "reserve": {"enabled": [{"name": "Open-Gpu-Share"}]},
                    "bind": {
                        "disabled": [{"name": "DefaultBinder"}],
                        "enabled": [{"name": "Simon"}],
                    },
                },
                "pluginConfig": [
                    {"name": score, "args": dict(methods)},
                    {"name": "Open-Gpu-Share", "args": {"gpuSelMethod": gpu_selection, **methods}},
                ],
            }
        ],
    }


# ---------------------------------------------------------------------------------------------
# Reading its log

# logrus text lines: time="..." level=info msg="[Alloc]; Used nodes: 52; ... Arrived GPU Milli: 7\n"
_ALLOC = re.compile(
    r"\[Alloc\]; Used nodes: (\d+); Used GPUs: (\d+); Used GPU Milli: (\d+); "
    r"Total GPUs: (\d+); Arrived GPU Milli: (\d+)"
)
_ORIGIN = re.compile(r"Number of original workload pods: (\d+)")
_TUNED = re.compile(r"\[Tune\] Num of Pods after Tuning: (\d+)")
_FAILED = re.compile(r"\] failed to schedule pod\(")
# kube-scheduler's klog line when a plugin fails on a pod (the pod then counts as failed)
_SCHEDULER_ERROR = re.compile(r"\"Error selecting node for pod\"")
_SCORE_PLUGIN = re.compile(r'msg="\s+(\w+Score): \d+')
_CREATE = re.compile(r"\] attempt to create pod\([^/)]*/([^)]+)\)")
_COPY = re.compile(r"-tuned-\d+$")
_UNSCHEDULED = re.compile(r"there are (\d+) unscheduled pods")
_ANALYSIS = re.compile(r"Cluster Analysis Results \((\w+)\)")
_GPU_SUMMARY = re.compile(r"msg=\"\s*(Gpu|MilliGpu)\s*:\s*[\d.]+% \((\d+)/(\d+)\)")


@dataclass
class SimonLog:
    """What one run of `simon apply` logged."""

    total_gpus: int = 0
    score_plugin: str | None = None  # the policy's, from the config the log opens with
    original_pods: int | None = None
    tuned_pods: int | None = None
    failed_pods: int = 0
    # placements the scheduler gave up on because a plugin failed, not because nothing fits
    scheduler_errors: int = 0
    unscheduled_pods: int | None = None
    # (arrived GPU thousandths, allocated GPU thousandths) after each arrival, in order
    points: list[tuple[int, int]] = field(default_factory=list)
    # the pods in the order they arrived; NAME-tuned-N is a copy of NAME the tuning added
    arrivals: list[str] = field(default_factory=list)
    # the final Cluster Analysis: GPUs with any thousandth allocated, thousandths allocated
    final_gpus_used: int | None = None
    final_milli_used: int | None = None

    def policy(self) -> str | None:
        """The peer's policy that ran (told by its score plugin), or None if not one of POLICIES."""
        return next((p for p, (score, _) in POLICIES.items() if score == self.score_plugin), None)

    def arrived_pct(self) -> float:
        """How much demand had arrived at the last line, in % of the cluster's GPUs."""
        return self.points[-1][0] / self.total_gpus / 10 if self.points else 0.0

    def curve(self) -> dict[int, float]:
        """merge_alloc_discrete.py's curve: for each whole % of the cluster's GPUs arrived
        (0..130), the mean allocation ratio (%) logged there (or within 1% where none is)."""
        if not self.total_gpus:
            raise PeerError("the log has no [Alloc] line: the simulator did not run the pods")
        # Python's round() on purpose: the authors' script rounds with it (half to even).
        rows = [
            (round(arrived / self.total_gpus / 10, 0), round(used / self.total_gpus / 10, 2))
            for arrived, used in self.points
        ]
        curve = {}
        for percent in range(0, 131):
            near = [a for r, a in rows if r == percent] or [
                a for r, a in rows if percent - 1 <= r <= percent + 1
            ]
            if near:
                curve[percent] = round(sum(near) / len(near), 2)
        return curve

    def alloc_ratio(self, at: int = MEASURE_AT) -> float:
        """The allocation ratio (% of the cluster's GPUs) when `at`% has arrived."""
        curve = self.curve()
        if at not in curve:
            raise PeerError(f"the run stopped at {self.arrived_pct():.1f}% arrived, before {at}%")
        return curve[at]

    def unallocated_gpus(self, at: int = MEASURE_AT) -> float:
        """The cluster's GPUs not allocated when `at`% has arrived (fractions counted)."""
        return round(self.total_gpus * (100 - self.alloc_ratio(at)) / 100, 1)


def parse_log(text: str) -> SimonLog:
    """Read what the protocol needs from a `simon apply` log (its stdout and stderr)."""
    log = SimonLog()
    tag = None
    for line in text.splitlines():
        alloc = _ALLOC.search(line)
        if alloc:
            log.total_gpus = int(alloc.group(4))
            log.points.append((int(alloc.group(5)), int(alloc.group(3))))
            continue
        if _FAILED.search(line):
            log.failed_pods += 1
            continue
        plugin = _SCORE_PLUGIN.search(line)
        if plugin and log.score_plugin is None:
            log.score_plugin = plugin.group(1)
            continue
        if _SCHEDULER_ERROR.search(line):
            log.scheduler_errors += 1
            continue
        created = _CREATE.search(line)
        if created:
            log.arrivals.append(created.group(1))
            continue
        for pattern, name in (
            (_ORIGIN, "original_pods"),
            (_TUNED, "tuned_pods"),
            (_UNSCHEDULED, "unscheduled_pods"),
        ):
            found = pattern.search(line)
            if found:
                setattr(log, name, int(found.group(1)))
        heading = _ANALYSIS.search(line)
        if heading:
            tag = heading.group(1)
        summary = _GPU_SUMMARY.search(line)
        if summary and tag == "InitSchedule":
            if summary.group(1) == "Gpu":
                log.final_gpus_used = int(summary.group(2))
            else:
                log.final_milli_used = int(summary.group(2))
    return log


# ---------------------------------------------------------------------------------------------
# Running


@dataclass(frozen=True)
class PeerFigures:
    """One policy of the peer on one node list and pod list, at the point of measurement."""

    policy: str
    trace: str
    seed: int
    total_gpus: int
    unallocated_gpus: float
    alloc_ratio: float  # % of the cluster's GPUs
    pods: int  # after tuning
    failed_pods: int  # of all pods (past the point of measurement too)
    scheduler_errors: int  # see SimonLog: a run with any is not its policy's figure
    wall_s: float
    curve: dict[int, float]
    # the pods of the list in the order the simulator placed them, copies by their original's
    # name: the order (and the tuning's copies) a side-by-side replay takes
    arrivals: tuple[str, ...]

    def row(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k not in ("curve", "arrivals")}


def original_name(logged: str) -> str:
    """The pod of the list that an arrival is (the tuning names its copies NAME-tuned-N)."""
    return _COPY.sub("", logged)


def json_fields(figures: Iterable[PeerFigures]) -> dict[str, float]:
    """The peer's columns of issue 42's JSON line: fgd_sim_* and bestfit_sim_*."""
    fields = {}
    for f in figures:
        prefix = JSON_PREFIX[f.policy]
        fields[f"{prefix}_unallocated_gpus"] = f.unallocated_gpus
        fields[f"{prefix}_alloc_ratio"] = f.alloc_ratio
    return fields


def _write_yaml_stream(path: Path, documents: Iterable[dict[str, Any]]) -> None:
    path.write_text("\n---\n".join(yaml.safe_dump(d, sort_keys=False) for d in documents))


def prepare(
    folder: Path,
    pods_csv: Path,
    nodes_csv: Path,
    policy: str,
    seed: int = FIRST_SEED,
    node_rows: Iterable[int] | None = None,
    pod_limit: int | None = None,
) -> tuple[Path, Path]:
    """Write into `folder` what one run reads: the node and pod YAML (cluster/), the cluster
    config and the scheduler config; their paths."""
    scheduler = scheduler_config(policy)  # an unknown policy is refused before anything is written
    cluster = folder / "cluster"
    cluster.mkdir(parents=True, exist_ok=True)
    _write_yaml_stream(cluster / "nodes.yaml", node_documents(nodes_csv, node_rows))
    _write_yaml_stream(cluster / "pods.yaml", pod_documents(pods_csv, pod_limit))
    cc, sc = folder / "cluster-config.yaml", folder / "scheduler-config.yaml"
    cc.write_text(yaml.safe_dump(cluster_config(cluster, seed), sort_keys=False))
    sc.write_text(yaml.safe_dump(scheduler, sort_keys=False))
    return cc, sc


def run(
    binary: Path,
    pods_csv: Path,
    nodes_csv: Path,
    policy: str,
    seed: int = FIRST_SEED,
    work: Path | None = None,
    node_rows: Iterable[int] | None = None,
    pod_limit: int | None = None,
    until: int | None = None,
) -> PeerFigures:
    """Run the peer's `policy` on a node list and a pod list by its protocol; its inputs and
    log are kept in `work` (a temporary folder if None). `until`: stop the simulator once the
    demand arrived rounds past that % of the cluster's GPUs (the figures at MEASURE_AT are
    whole from MEASURE_AT + 2 on; the rest of the curve is then cut)."""
    if until is not None and until < MEASURE_AT + 2:
        raise ValueError(f"until={until}: the point of measurement needs {MEASURE_AT + 2} or more")
    with tempfile.TemporaryDirectory(prefix="fgdsim-") as scratch:
        folder = Path(work) if work is not None else Path(scratch)
        cc, sc = prepare(folder, pods_csv, nodes_csv, policy, seed, node_rows, pod_limit)
        log_path = folder / f"simon-{policy}.log"
        command = [str(binary), "apply", "--extended-resources", "gpu", "-f", str(cc)]
        command += ["--default-scheduler-config", str(sc)]
        started = time.monotonic()
        with log_path.open("w") as log_file:
            proc = subprocess.Popen(
                command,
                cwd=folder,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
            stopped = _wait(proc, log_path, until)
        wall = time.monotonic() - started
        text = log_path.read_text(errors="replace")
        if proc.returncode != 0 and not stopped:
            raise PeerError(f"simon exited {proc.returncode} ({log_path}):\n{text[-3000:]}")
        log = parse_log(text)
        return PeerFigures(
            policy=policy,
            trace=pods_csv.name,
            seed=seed,
            total_gpus=log.total_gpus,
            unallocated_gpus=log.unallocated_gpus(),
            alloc_ratio=log.alloc_ratio(),
            pods=log.tuned_pods or log.original_pods or 0,
            failed_pods=log.failed_pods,
            scheduler_errors=log.scheduler_errors,
            wall_s=round(wall, 1),
            curve=log.curve(),
            arrivals=tuple(original_name(n) for n in log.arrivals),
        )


def _wait(proc: subprocess.Popen[bytes], log_path: Path, until: int | None) -> bool:
    """Wait for the simulator; with `until`, stop it once its log has passed that point.
    Whether it was stopped."""
    if until is None:
        proc.wait()
        return False
    read = 0
    while proc.poll() is None:
        time.sleep(1.0)
        with log_path.open("rb") as handle:
            handle.seek(read)
            chunk = handle.read()
        # Only whole lines: the last may still be written.
        read += chunk.rfind(b"\n") + 1
        points = [
            _ALLOC.search(line) for line in chunk[: chunk.rfind(b"\n") + 1].decode().splitlines()
        ]
        passed = [
            int(m.group(5)) / int(m.group(4)) / 10 >= until + 0.5 for m in points if m is not None
        ]
        if any(passed):
            proc.terminate()
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            return True
    return False


def smoke_cut(nodes_csv: Path, every: int = 50) -> list[int]:
    """Every `every`-th node of the list: a small cluster with each kind of node the list's
    order passes (its P100, T4, G2, V100 ... runs)."""
    with nodes_csv.open(newline="") as handle:
        count = sum(1 for _ in handle) - 1
    return list(range(0, count, every))


def read_logs(paths: Sequence[Path]) -> int:
    """Print the figures of logs kept by --keep (a run still going: where it has got to)."""
    rows = []
    for path in paths:
        log = parse_log(path.read_text(errors="replace"))
        policy = log.policy() or log.score_plugin or "?"
        figures: dict[str, Any]
        try:
            figures = {"unallocated_gpus": log.unallocated_gpus(), "alloc_ratio": log.alloc_ratio()}
            shown = f"{figures['unallocated_gpus']:.1f} GPUs unallocated, {figures['alloc_ratio']}%"
        except PeerError as err:
            figures = {"unallocated_gpus": None, "alloc_ratio": None, "not_yet": str(err)}
            shown = "not at the point of measurement yet"
        rows.append(
            {
                "log": str(path),
                "policy": policy,
                "total_gpus": log.total_gpus,
                "pods": log.tuned_pods or log.original_pods,
                "arrived_pct": round(log.arrived_pct(), 2),
                "failed_pods": log.failed_pods,
                "scheduler_errors": log.scheduler_errors,
                **figures,
            }
        )
        print(
            f"{path}: {policy}, {log.arrived_pct():.1f}% arrived, {shown}, "
            f"{log.scheduler_errors} scheduler errors"
        )
    print(json.dumps({"logs": rows}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trace", type=Path, default=DEFAULT_TRACE, help="an openb pod list")
    parser.add_argument("--nodes", type=Path, default=DEFAULT_NODES, help="an openb node list")
    parser.add_argument("--policy", choices=tuple(POLICIES), action="append")
    parser.add_argument("--seed", type=int, default=FIRST_SEED)
    parser.add_argument("--keep", type=Path, help="keep the inputs and logs in this folder")
    parser.add_argument(
        "--until", type=int, help=f"stop each run past this %% arrived ({MEASURE_AT + 2} or more)"
    )
    parser.add_argument("--smoke", action="store_true", help="25 nodes, 300 pods (CI)")
    parser.add_argument(
        "--read", type=Path, nargs="+", metavar="LOG", help="read simon logs kept before; run none"
    )
    parser.add_argument(
        "--build", action="store_true", help="build simon where missing, print where; run none"
    )
    args = parser.parse_args(argv)
    if args.read:
        return read_logs(args.read)
    if args.build:
        try:
            print(build(lambda line: print(line, file=sys.stderr, flush=True)))
        except BuildError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        return 0
    for path in (args.trace, args.nodes):
        if not path.is_file():
            parser.error(f"no file {path}")
    policies = args.policy or list(POLICIES)

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    node_rows = smoke_cut(args.nodes) if args.smoke else None
    pod_limit = SMOKE_PODS if args.smoke else None
    try:
        started = time.monotonic()
        binary = build(say)
        build_s = time.monotonic() - started
    except BuildError as err:
        print(f"error: {err}", file=sys.stderr)
        if not args.smoke or os.environ.get(STRICT_ENV):
            return 1
        # Without the simulator the smoke still writes every input it would have run.
        with tempfile.TemporaryDirectory(prefix="fgdsim-") as scratch:
            for policy in policies:
                folder = Path(scratch) / policy
                prepare(folder, args.trace, args.nodes, policy, args.seed, node_rows, pod_limit)
        print(
            f"fgd_peer smoke: NOT RUN, FGD's simulator cannot be had here (inputs written; "
            f"${STRICT_ENV}=1 makes this a failure)"
        )
        return 0
    results = []
    for policy in policies:
        work = args.keep / policy if args.keep else None
        say(f"running the peer's {policy} on {args.trace.name} ...")
        try:
            results.append(
                run(
                    binary,
                    args.trace,
                    args.nodes,
                    policy,
                    args.seed,
                    work,
                    node_rows,
                    pod_limit,
                    args.until,
                )
            )
        except (PeerError, ValueError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
    print(f"FGD's own simulator ({MODULE}@{VERSION}), {args.trace.name}, seed {args.seed}")
    print(
        f"{'policy':<10}{'GPUs':>8}{'pods':>8}{'unalloc GPUs':>14}{'alloc %':>9}"
        f"{'sched errors':>14}{'wall s':>8}"
    )
    for r in results:
        print(
            f"{r.policy:<10}{r.total_gpus:>8}{r.pods:>8}{r.unallocated_gpus:>14.1f}"
            f"{r.alloc_ratio:>9.2f}{r.scheduler_errors:>14}{r.wall_s:>8.1f}"
        )
    print(
        json.dumps(
            {
                "trace": args.trace.name,
                "smoke": args.smoke,
                "binary_ready_s": round(build_s, 1),
                **json_fields(results),
                "peer": [r.row() for r in results],
            }
        )
    )
    if any(r.scheduler_errors for r in results):
        # See the module's docstring: a pod the score plugin failed on is counted unplaced.
        print(
            "warning: the simulator's scheduler failed on some pods (sched errors): those runs' "
            "figures are not their policy's; rerun on a quieter machine",
            file=sys.stderr,
        )
        return 0 if args.smoke else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
