"""Kubernetes objects read as the core sees them: the node topology annotation (the same model
as `topology parse`), pods, gangs, and clear errors for objects that cannot be used."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from toposched.core import IdleAction, IdleRule, Locality
from toposched.kube.annotations import (
    AnnotationError,
    decode_gpus,
    decode_topology,
    encode_gpus,
    encode_topology,
    opted_in,
)
from toposched.kube.driver import gang_key, group_key, kind_of
from toposched.kube.gangspec import encode_idle, gang_spec, min_member, parse_idle
from toposched.kube.objects import (
    GROUP_LABEL,
    KNOWN_ONLY,
    SCHEDULER_PLUGINS,
    TOPOLOGY_KNOWN,
    VOLCANO,
    VOLCANO_GROUP,
    ObjectError,
    node_from,
    pod_from,
)
from toposched.topology import preset
from toposched.topology.cluster import EVERY_NODE, SCHEDULE_LABEL, NodeSelector, Tier
from toposched.topology.smi import parse_smi

FIXTURE = "tests/fixtures/topologies/hgx-h100-8gpu-nv18.txt"


def node_obj(name: str, annotation: str | None, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if annotation is not None:
        meta["annotations"] = {"toposched.io/topology": annotation}
    return {"kind": "Node", "metadata": meta, "status": {"allocatable": {"nvidia.com/gpu": "8"}}}


def pod_obj(name: str, gpus: Any = 1, **extra: Any) -> dict[str, Any]:
    limits = {} if gpus is None else {"nvidia.com/gpu": gpus}
    obj: dict[str, Any] = {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "uid": f"uid-{name}", "labels": {}},
        "spec": {
            "schedulerName": "toposched",
            "containers": [{"name": "c", "resources": {"limits": limits}}],
        },
        "status": {"phase": "Pending"},
    }
    for key, value in extra.items():
        obj["metadata"][key] = value
    return obj


def test_the_annotation_round_trips_a_real_capture() -> None:
    with open(FIXTURE) as f:
        topology = parse_smi(f.read())
    text = encode_topology(topology, unhealthy=[3])
    read = decode_topology(text)
    assert read.topology == topology and read.unhealthy == {3} and not read.stale
    assert json.loads(text)["links"] == topology.codes()  # the model of `topology parse --json`


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{", "is not JSON"),
        ('{"version": 2, "links": [["X"]]}', "version 2 unknown"),
        ('{"version": 1, "links": "NV1"}', "links must be a list of lists"),
        ('{"version": 1, "links": [["X", "NV1"], ["NV2", "X"]]}', "not symmetric"),
        ('{"version": 1, "links": [["X", "QQ"], ["QQ", "X"]]}', "GPU0->GPU1"),
        ('{"version": 1, "gpus": 3, "links": [["X"]]}', "gpus is 3 but links has 1 rows"),
        ('{"version": 1, "links": [["X"]], "unhealthy": [4]}', "unhealthy must list GPU"),
        ('{"version": 1, "links": [["X"]], "numa": [0, 1]}', "numa must list one value per GPU"),
    ],
)
def test_a_bad_annotation_says_what_is_wrong(text: str, words: str) -> None:
    with pytest.raises(AnnotationError, match=words):
        decode_topology(text)


def test_gpu_annotations() -> None:
    assert decode_gpus(encode_gpus([3, 1])) == (1, 3)
    for bad in ("", "a,b", "1,1", "-1"):
        with pytest.raises(AnnotationError):
            decode_gpus(bad)


def test_a_node_opts_in_by_either_label_and_keeps_its_rack_and_zone() -> None:
    text = encode_topology(preset("dgx1-v100"))
    ack, _, _ = node_from(node_obj("a", text, **{"ack.node.gpu.schedule": "topology"}))
    own, _, _ = node_from(
        node_obj(
            "b",
            text,
            **{
                "toposched.io/gpu-schedule": "topology",
                "toposched.io/rack": "r7",
                "topology.kubernetes.io/zone": "z1",
            },
        )
    )
    plain, _, _ = node_from(node_obj("c", text))
    assert ack.labels[SCHEDULE_LABEL] == own.labels[SCHEDULE_LABEL] == "topology"
    assert plain.labels[SCHEDULE_LABEL] == "default"
    assert (own.rack, own.pod) == ("r7", "z1")
    assert opted_in({"ack.node.gpu.schedule": "topology"}) and not opted_in({})


@pytest.mark.parametrize(
    ("annotation", "problem"),
    [
        (None, r"node n: no toposched\.io/topology annotation"),
        ("nope", r"node n: toposched\.io/topology is not JSON"),
        (
            encode_topology(preset("dgx1-v100"), stale=True),
            "node n: its agent marked the topology stale",
        ),
    ],
)
def test_a_node_without_a_usable_annotation_has_unknown_topology(
    annotation: str | None, problem: str
) -> None:
    """Its allocatable GPUs, counted only (never topology-aware, even if opted in), labelled
    for the selector of jobs that do not accept unknown topology; the problem said."""
    obj = node_obj("n", annotation, **{"toposched.io/gpu-schedule": "topology"})
    node, gpus, why = node_from(obj)
    assert why is not None and re.match(problem, why)
    assert node.size == 8 and gpus.unhealthy == frozenset() and not gpus.stale
    assert node.labels[SCHEDULE_LABEL] == "default"
    assert node.labels[TOPOLOGY_KNOWN] == "false" and not KNOWN_ONLY.matches(node.labels)
    known, _, nothing = node_from(node_obj("k", encode_topology(preset("dgx1-v100"))))
    assert nothing is None and KNOWN_ONLY.matches(known.labels)


def test_a_node_of_unknown_topology_and_no_gpus_is_refused() -> None:
    obj = node_obj("n", None)
    obj["status"] = {}
    with pytest.raises(ObjectError, match=r"node n: unknown GPU topology and no allocatable"):
        node_from(obj)


@pytest.mark.parametrize(("value", "selector"), [(None, KNOWN_ONLY), ("true", EVERY_NODE)])
def test_only_a_job_that_says_so_may_use_nodes_of_unknown_topology(
    value: str | None, selector: NodeSelector
) -> None:
    on_pod = {} if value is None else {"toposched.io/accept-unknown-topology": value}
    pod = pod_from(pod_obj("w0", 1, annotations=on_pod))
    assert gang_spec("team-a/w0", [pod], 1).selector == selector
    group = {"metadata": {"annotations": on_pod}, "spec": {"minMember": 1}}
    plain = pod_from(pod_obj("w1", 1))
    assert gang_spec("team-a/g", [plain], 1, group).selector == selector


def test_accepting_unknown_topology_is_true_or_false() -> None:
    pod = pod_from(pod_obj("w0", 1, annotations={"toposched.io/accept-unknown-topology": "yes"}))
    with pytest.raises(ObjectError, match=r'accept-unknown-topology must be "true" or "false"'):
        gang_spec("team-a/w0", [pod], 1)


def test_a_gang_that_saves_on_sigterm_is_checkpointable_with_its_shortest_grace() -> None:
    saves = {"toposched.io/checkpoint": "true"}
    first, second = pod_obj("w0", 2, annotations=saves), pod_obj("w1", 2)
    first["spec"]["terminationGracePeriodSeconds"] = 90
    second["spec"]["terminationGracePeriodSeconds"] = 45
    spec = gang_spec("team-a/g", [pod_from(first), pod_from(second)], 2)
    assert spec.checkpoint is not None
    assert (spec.checkpoint.signal, spec.checkpoint.grace_s) == ("SIGTERM", 45.0)
    plain = pod_from(pod_obj("w2", 1))
    assert gang_spec("team-a/w2", [plain], 1).checkpoint is None
    group = {"metadata": {"annotations": saves}, "spec": {"minMember": 1}}
    assert (
        gang_spec("team-a/g2", [plain], 1, group).checkpoint
        == gang_spec("team-a/g3", [pod_from(pod_obj("w3", 1, annotations=saves))], 1).checkpoint
    )  # on the PodGroup or the pod; Kubernetes' default grace of 30 s


def test_an_idle_rule_comes_from_the_podgroup_or_the_pod_and_reads_back_as_written() -> None:
    rule = {"toposched.io/idle": "after=30m,below=3,action=stop"}
    on_pod = gang_spec("team-a/w0", [pod_from(pod_obj("w0", 1, annotations=rule))], 1).idle
    assert on_pod == IdleRule(1800.0, 3.0, IdleAction.STOP)
    group = {"metadata": {"annotations": {"toposched.io/idle": "after=1h"}}, "spec": {}}
    plain = pod_from(pod_obj("w1", 1, annotations=rule))
    assert gang_spec("team-a/g", [plain], 1, group).idle == IdleRule(3600.0)  # the group's wins
    assert gang_spec("team-a/w2", [pod_from(pod_obj("w2", 1))], 1).idle is None
    assert parse_idle("j", encode_idle(on_pod)) == on_pod
    assert encode_idle(on_pod) == "after=1800,below=3,action=stop"
    marked = pod_obj("w3", 1, annotations={"toposched.io/gpu-idle-since": "1700000000"})
    assert pod_from(marked).idle_since == 1_700_000_000.0
    junk = pod_obj("w4", 1, annotations={"toposched.io/gpu-idle-since": "soon"})
    assert pod_from(junk).idle_since is None  # not the agent's: as if absent


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("30m", "must read after=TIME"),
        ("below=5", "needs after=TIME"),
        ("after=0s", "after must be a positive time"),
        ("after=1h,below=500", "below must be a percentage in"),
        ("after=1h,action=kill", "action notify or stop"),
        ("after=1h,after=2h", "must read after=TIME"),
    ],
)
def test_a_bad_idle_annotation_is_refused_naming_it(text: str, said: str) -> None:
    pod = pod_from(pod_obj("w0", 1, annotations={"toposched.io/idle": text}))
    with pytest.raises(ObjectError, match=said):
        gang_spec("team-a/w0", [pod], 1)


def test_a_gang_says_how_often_it_checkpoints_on_the_podgroup_or_the_pod() -> None:
    saves = {"toposched.io/checkpoint": "true", "toposched.io/checkpoint-interval": "20m"}
    spec = gang_spec("team-a/w0", [pod_from(pod_obj("w0", 1, annotations=saves))], 1)
    assert spec.checkpoint is not None and spec.checkpoint.interval_s == 1200.0
    group = {"metadata": {"annotations": {**saves, "toposched.io/checkpoint-interval": "900"}}}
    plain = pod_from(pod_obj("w1", 1, annotations=saves))
    grouped = gang_spec("team-a/g", [plain], 1, {**group, "spec": {"minMember": 1}})
    assert grouped.checkpoint is not None and grouped.checkpoint.interval_s == 900.0
    silent = {"toposched.io/checkpoint": "true"}
    said = gang_spec("team-a/w2", [pod_from(pod_obj("w2", 1, annotations=silent))], 1)
    assert said.checkpoint is not None and said.checkpoint.interval_s is None


@pytest.mark.parametrize(
    ("annotations", "said"),
    [
        ({"toposched.io/checkpoint-interval": "30m"}, 'it needs toposched.io/checkpoint: "true"'),
        (
            {"toposched.io/checkpoint": "true", "toposched.io/checkpoint-interval": "often"},
            "checkpoint-interval must be a time such as 30m",
        ),
        (
            {"toposched.io/checkpoint": "true", "toposched.io/checkpoint-interval": "nan"},
            "checkpoint-interval must be a positive time",
        ),
        (
            {"toposched.io/checkpoint": "true", "toposched.io/checkpoint-interval": "31d"},
            "must be at most 30d",
        ),
    ],
)
def test_a_bad_checkpoint_interval_is_refused_naming_it(
    annotations: dict[str, str], said: str
) -> None:
    pod = pod_from(pod_obj("w0", 1, annotations=annotations))
    with pytest.raises(ObjectError, match=said):
        gang_spec("team-a/w0", [pod], 1)


def test_a_checkpoint_annotation_and_grace_must_be_usable() -> None:
    pod = pod_from(pod_obj("w0", 1, annotations={"toposched.io/checkpoint": "yes"}))
    with pytest.raises(ObjectError, match=r'checkpoint must be "true" or "false"'):
        gang_spec("team-a/w0", [pod], 1)
    obj = pod_obj("w1", 1)
    obj["spec"]["terminationGracePeriodSeconds"] = -1
    with pytest.raises(ObjectError, match=r"terminationGracePeriodSeconds -1"):
        pod_from(obj)


def test_the_allocatable_count_names_no_gpu() -> None:
    """A device plugin's count says how many, not which (and is 0 while it restarts): only
    the agent's `unhealthy` list marks GPUs failed."""
    obj = node_obj("n", encode_topology(preset("dgx1-v100"), unhealthy=[2]))
    obj["status"]["allocatable"]["nvidia.com/gpu"] = "0"
    _, gpus, _ = node_from(obj)
    assert gpus.unhealthy == {2}


def test_pods_and_gangs() -> None:
    pod = pod_from(pod_obj("w0", "2", labels={"scheduling.x-k8s.io/pod-group": "g"}))
    assert (pod.gpus, pod.group, pod.queue, pod.node) == (2, "g", "team-a", None)
    volcano = pod_from(pod_obj("w1", 2, annotations={"scheduling.k8s.io/group-name": "g"}))
    assert volcano.group == "g"
    group = {
        "metadata": {
            "name": "g",
            "namespace": "team-a",
            "annotations": {"toposched.io/locality": "node,rack@60"},
        },
        "spec": {"minMember": 2},
    }
    spec = gang_spec("team-a/g#1", [pod, volcano], min_member(group), group)
    assert (spec.workers, spec.gpus_per_worker, spec.queue) == (2, 2, "team-a")
    assert spec.locality.prefer is Locality.NODE and spec.locality.accept is Locality.RACK
    assert spec.locality.allowed(0).tier is Tier.NODE


@pytest.mark.parametrize(
    ("obj", "words"),
    [
        (pod_obj("p", "two"), "nvidia.com/gpu limit 'two' in container 'c' is not a whole number"),
        (pod_obj("p", "1.5"), "is not a whole number of GPUs"),
        (pod_obj("p", 1, annotations={"toposched.io/gpus": "x"}), "toposched.io/gpus must list"),
    ],
)
def test_a_bad_pod_says_what_is_wrong(obj: dict[str, Any], words: str) -> None:
    with pytest.raises(ObjectError, match=words):
        pod_from(obj)


def test_a_pod_names_its_gang_by_label_or_by_volcanos_annotation() -> None:
    """One name, `g`, three gangs: a scheduler-plugins PodGroup's, a Volcano PodGroup's, and a
    pod of its own. The label wins over the annotation, as it always did."""
    plugins = pod_from(pod_obj("a", 1, labels={GROUP_LABEL: "g"}))
    volcano = pod_from(pod_obj("b", 1, annotations={VOLCANO_GROUP: "g"}))
    both = pod_from(pod_obj("c", 1, labels={GROUP_LABEL: "g"}, annotations={VOLCANO_GROUP: "h"}))
    alone = pod_from(pod_obj("g", 1))
    assert (plugins.group_kind, volcano.group_kind) == (SCHEDULER_PLUGINS, VOLCANO)
    assert (both.group, both.group_kind) == ("g", SCHEDULER_PLUGINS)
    assert len({gang_key(p) for p in (plugins, volcano, alone)}) == 3
    group = {"metadata": {"namespace": "team-a", "name": "g"}}
    for p in (plugins, volcano):
        assert group_key(p.group_kind, group) == gang_key(p)
        assert kind_of(gang_key(p)) is p.group_kind
    assert kind_of(gang_key(alone)) is None
    assert VOLCANO.prefix == "/apis/scheduling.volcano.sh/v1beta1"


def test_bad_gangs_say_what_is_wrong() -> None:
    with pytest.raises(ObjectError, match=r"spec\.minMember 'four' is not a positive integer"):
        min_member({"metadata": {"name": "g", "namespace": "a"}, "spec": {"minMember": "four"}})
    volcano = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "metadata": {"name": "g", "namespace": "a"},
        "spec": {"minMember": 0},
    }
    with pytest.raises(ObjectError, match=r"a/g \(scheduling\.volcano\.sh/v1beta1\): spec"):
        min_member(volcano)
    mixed = [pod_from(pod_obj("a", 1)), pod_from(pod_obj("b", 2))]
    with pytest.raises(ObjectError, match="must ask the same number of GPUs, these ask 1, 2"):
        gang_spec("team-a/g#1", mixed, 2)


def test_the_docs_annotation_command_runs_as_written(tmp_path: Path) -> None:
    """docs/kubernetes.md's `python -c` that turns `nvidia-smi topo -m` into the annotation."""
    text = (Path(__file__).parents[2] / "docs" / "kubernetes.md").read_text()
    found = re.search(r"python -c '(.*?)' topo\.txt", text, re.S)
    assert found is not None, "the example is gone from docs/kubernetes.md"
    capture = tmp_path / "topo.txt"
    capture.write_text(Path(FIXTURE).read_text())
    done = subprocess.run(
        [sys.executable, "-c", found.group(1), str(capture)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert decode_topology(done.stdout).topology == parse_smi(capture.read_text())


def test_the_proxy_wire_refuses_headers_it_cannot_carry() -> None:
    """kube/reads.py's ProxyWire carries the read API through the API server's proxy; a
    request with headers (a submit's idempotency key) is refused, never sent without them."""
    from toposched.kube.reads import ProxyWire

    class NoApi:
        def raw(self, *args: object) -> object:
            raise AssertionError("nothing may be sent")

    wire = ProxyWire(NoApi(), "/base")  # type: ignore[arg-type]
    with pytest.raises(NotImplementedError, match=r"headers \['Idempotency-Key'\]"):
        wire.send("POST", "/jobs", json={}, headers={"Idempotency-Key": "k"})
