"""The manifests in deploy/kubernetes/: schema-valid, least-privilege, and agreeing with each other.

Every document is validated against the Kubernetes OpenAPI schemas that `kubernetes-validate`
ships (strict: an unknown field is an error), except custom resources of a group that
podgroup-crd.yaml defines, which are validated against that CRD's own openAPIV3Schema. Those are
routed by API group, never handed to kubernetes-validate: it drops the domain from a group, so
`scheduling.x-k8s.io/v1alpha1` and the in-tree `scheduling.k8s.io/v1alpha1` map to the same
schema file (Kubernetes 1.35 ships an unrelated in-tree PodGroup under that name).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
KUSTOMIZATION = "kustomization.yaml"
EXAMPLE = "example-job.yaml"

# The newest Kubernetes version whose schemas the installed kubernetes-validate ships
# (1.37.0 with kubernetes-validate 1.37).
K8S_VERSION = kubernetes_validate.latest_version()

NAMESPACE = "toposched-system"
SERVICE_ACCOUNT = "toposched-scheduler"
LEASE = "toposched-scheduler"
QUEUES_CONFIGMAP = "toposched-queues"
SCHEDULER_NAME = "toposched"
HTTP_PORT = 8080
POD_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
CLUSTER_SCOPED_KINDS = {
    "Namespace",
    "FlowSchema",
    "PriorityLevelConfiguration",
    "ClusterRole",
    "ClusterRoleBinding",
    "CustomResourceDefinition",
    "PriorityClass",
}

Doc = dict[str, Any]

# What the scheduler may do, (API group, resource) -> verbs: exactly this and nothing more.
CLUSTER_GRANTS: dict[tuple[str, str], set[str]] = {
    ("", "pods"): {"get", "list", "watch"},
    ("", "pods/binding"): {"create"},
    ("", "pods/eviction"): {"create"},
    ("", "pods/status"): {"patch"},
    ("", "nodes"): {"get", "list", "watch"},
    ("", "events"): {"create"},
    ("scheduling.x-k8s.io", "podgroups"): {"get", "list", "watch", "patch"},
    ("scheduling.volcano.sh", "podgroups"): {"get", "list", "watch", "patch"},
    ("scheduling.volcano.sh", "podgroups/status"): {"patch"},
    ("scheduling.k8s.io", "podgroups"): {"get", "list", "watch", "patch"},
    ("scheduling.k8s.io", "podgroups/status"): {"patch"},
    # Dynamic Resource Allocation: its pods' claims, allocated and reserved before a bind.
    ("resource.k8s.io", "resourceclaims"): {"get", "list", "watch"},
    ("resource.k8s.io", "resourceclaims/status"): {"patch", "update"},
    ("resource.k8s.io", "resourceclaims/binding"): {"patch", "update"},
}
# In the scheduler's own namespace only.
NAMESPACED_GRANTS: dict[tuple[str, str], set[str]] = {
    ("coordination.k8s.io", "leases"): {"get", "create", "update"},
    ("", "configmaps"): {"get", "list", "watch"},
    ("", "pods"): {"patch"},  # the leader's label on its own pod (scheduler.yaml's Service)
}


# --- loading -------------------------------------------------------------------------------------


def manifest_files() -> list[str]:
    return sorted(p.name for p in DEPLOY.glob("*.yaml") if p.name != KUSTOMIZATION)


def load(name: str) -> list[Doc]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d is not None]


def all_docs() -> list[tuple[str, int, Doc]]:
    return [(name, i, doc) for name in manifest_files() for i, doc in enumerate(load(name))]


def doc_id(name: str, index: int, doc: Doc) -> str:
    meta = doc.get("metadata") or {}
    return f"{name}#{index}:{doc.get('kind')}/{meta.get('name')}"


def find(kind: str, name: str | None = None, file: str | None = None) -> list[Doc]:
    return [
        doc
        for f, _, doc in all_docs()
        if doc.get("kind") == kind
        and (name is None or doc["metadata"]["name"] == name)
        and (file is None or f == file)
    ]


def one(kind: str, name: str | None = None, file: str | None = None) -> Doc:
    found = find(kind, name, file)
    assert len(found) == 1, f"expected one {kind} {name or ''} in {file or 'deploy/kubernetes'}"
    return found[0]


def group_of(api_version: str) -> str:
    return api_version.rpartition("/")[0]


# --- the CRD's schema ----------------------------------------------------------------------------


def custom_schemas() -> dict[tuple[str, str, str], Doc]:
    """(group, version, kind) -> openAPIV3Schema for each CRD in deploy/kubernetes/."""
    schemas = {}
    for crd in find("CustomResourceDefinition"):
        spec = crd["spec"]
        for version in spec["versions"]:
            key = (spec["group"], version["name"], spec["names"]["kind"])
            schemas[key] = version["schema"]["openAPIV3Schema"]
    return schemas


def closed(schema: Any) -> Any:
    """The schema with unknown fields forbidden where the API server would prune them.

    An object with `properties` and neither `additionalProperties` nor
    `x-kubernetes-preserve-unknown-fields` keeps only its declared fields on the server
    (kubectl's default strict field validation rejects the others); JSON Schema allows them
    unless told, so say so. Objects without `properties` (such as `metadata`) stay open.
    """
    if isinstance(schema, list):
        return [closed(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: closed(v) for k, v in schema.items()}
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def custom_errors(doc: Doc) -> list[str]:
    key = (group_of(doc["apiVersion"]), doc["apiVersion"].rpartition("/")[2], doc["kind"])
    schema = custom_schemas().get(key)
    assert schema is not None, f"no CRD in deploy/kubernetes/ defines {key}"
    validator = jsonschema.Draft4Validator(closed(schema))
    return [
        f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in validator.iter_errors(doc)
    ]


def structural_problems(schema: Doc, path: str = "") -> Iterator[str]:
    """Where the schema is not structural: each node needs a type (or int-or-string)."""
    if not ("type" in schema or schema.get("x-kubernetes-int-or-string")):
        yield f"{path or '<root>'}: no type"
    for name, sub in schema.get("properties", {}).items():
        yield from structural_problems(sub, f"{path}.{name}")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from structural_problems(schema["additionalProperties"], f"{path}.*")
    if isinstance(schema.get("items"), dict):
        yield from structural_problems(schema["items"], f"{path}[]")


# --- every document is valid ---------------------------------------------------------------------


@pytest.mark.parametrize("name", manifest_files())
def test_each_file_holds_named_resources(name: str) -> None:
    docs = load(name)
    assert docs, f"{name} holds no document"
    for i, doc in enumerate(docs):
        assert isinstance(doc, dict), f"{name}#{i} is not a mapping"
        for key in ("apiVersion", "kind"):
            assert doc.get(key), f"{name}#{i} has no {key}"
        assert (doc.get("metadata") or {}).get("name"), f"{name}#{i} has no metadata.name"


@pytest.mark.parametrize(
    ("name", "index", "doc"), [pytest.param(*d, id=doc_id(*d)) for d in all_docs()]
)
def test_document_is_valid(name: str, index: int, doc: Doc) -> None:
    where = f"{name}#{index} ({doc['kind']}/{doc['metadata']['name']})"
    if group_of(doc["apiVersion"]) in {group for group, _, _ in custom_schemas()}:
        errors = custom_errors(doc)
        assert not errors, f"{where} against its CRD's schema:\n" + "\n".join(errors)
        return
    try:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    except kubernetes_validate.SchemaNotFoundError as e:
        problem = e.message
    except kubernetes_validate.ValidationError as e:
        path = ".".join(map(str, e.path)) or "<root>"
        problem = f"invalid for Kubernetes {e.version}: {path}: {e.message}"
    else:
        return
    pytest.fail(f"{where}: {problem}")


@pytest.mark.parametrize(
    ("name", "index", "doc"), [pytest.param(*d, id=doc_id(*d)) for d in all_docs()]
)
def test_namespace_is_explicit_where_needed(name: str, index: int, doc: Doc) -> None:
    # kustomization.yaml sets no namespace, so a namespaced resource must name its own.
    namespace = doc["metadata"].get("namespace")
    if doc["kind"] in CLUSTER_SCOPED_KINDS:
        assert namespace is None, f"{name}#{index}: a cluster-scoped {doc['kind']} has a namespace"
    else:
        assert namespace, f"{name}#{index}: {doc['kind']} has no namespace"


# --- the PodGroup CRD ----------------------------------------------------------------------------


def test_crd_defines_the_coscheduling_podgroup() -> None:
    crd = one("CustomResourceDefinition", file="podgroup-crd.yaml")
    spec = crd["spec"]
    assert crd["metadata"]["name"] == "podgroups.scheduling.x-k8s.io"
    assert (spec["group"], spec["scope"]) == ("scheduling.x-k8s.io", "Namespaced")
    assert (spec["names"]["kind"], spec["names"]["plural"]) == ("PodGroup", "podgroups")
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1alpha1", True, True)
    assert version["subresources"] == {"status": {}}
    schema = version["schema"]["openAPIV3Schema"]
    jsonschema.Draft4Validator.check_schema(schema)
    assert list(structural_problems(schema)) == []
    props = schema["properties"]
    min_member = props["spec"]["properties"]["minMember"]
    assert (min_member["type"], min_member["minimum"]) == ("integer", 1)
    assert {"minMember", "scheduleTimeoutSeconds", "minResources"} <= set(
        props["spec"]["properties"]
    )
    assert {"phase", "scheduled", "running", "succeeded", "failed"} <= set(
        props["status"]["properties"]
    )


def example_podgroup() -> Doc:
    return one("PodGroup", "vgg16", file=EXAMPLE)


def test_example_podgroup_passes_the_crd_schema() -> None:
    assert custom_errors(example_podgroup()) == []


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "minMember"), "four"),
        (("spec", "minMember"), 0),
        (("spec", "scheduleTimeoutSeconds"), "10m"),
        (("spec", "minResources", "nvidia.com/gpu"), "four"),
        (("spec", "minMembers"), 4),  # a typo: unknown fields are rejected
        (("status", "running"), "all"),
    ],
    ids=lambda x: ".".join(x) if isinstance(x, tuple) else repr(x),
)
def test_broken_podgroup_fails_the_crd_schema(path: tuple[str, ...], value: object) -> None:
    # The schema check is not vacuous: each of these breaks the example PodGroup.
    broken = copy.deepcopy(example_podgroup())
    node = broken
    for part in path[:-1]:
        node = node.setdefault(part, {})
    node[path[-1]] = value
    assert custom_errors(broken), f"{'.'.join(path)}: {value!r} passed the PodGroup schema"


# --- RBAC ----------------------------------------------------------------------------------------


def grants(role: Doc) -> dict[tuple[str, str], set[str]]:
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def roles() -> list[Doc]:
    return find("ClusterRole") + find("Role")


@pytest.mark.parametrize("role", roles(), ids=lambda r: f"{r['kind']}/{r['metadata']['name']}")
def test_role_has_no_wildcards_or_dangerous_verbs(role: Doc) -> None:
    for rule in role["rules"]:
        assert "nonResourceURLs" not in rule, rule
        for key in ("apiGroups", "resources", "verbs", "resourceNames"):
            assert all("*" not in item for item in rule.get(key, [])), f"{key} wildcard: {rule}"
        assert not {"escalate", "bind", "impersonate", "deletecollection"} & set(rule["verbs"])
        assert not {"secrets", "serviceaccounts/token"} & set(rule["resources"]), rule


def test_cluster_role_grants_exactly_what_the_scheduler_needs() -> None:
    assert grants(one("ClusterRole", SERVICE_ACCOUNT)) == CLUSTER_GRANTS


def test_every_kind_of_podgroup_the_scheduler_reads_is_granted() -> None:
    """The scheduler lists, watches and patches each kind of PodGroup it knows, and writes the
    status of those whose operators wait for a queued phase and of Kubernetes' own (its
    PodGroupInitiallyScheduled condition): the ClusterRole follows the code."""
    from toposched.kube.objects import GANG_KINDS, UPSTREAM

    granted = grants(one("ClusterRole", SERVICE_ACCOUNT))
    for kind in GANG_KINDS:
        assert granted[(kind.group, "podgroups")] == {"get", "list", "watch", "patch"}
        status = granted.get((kind.group, "podgroups/status"), set())
        writes = kind.queued_phase or kind is UPSTREAM
        assert status == ({"patch"} if writes else set()), kind.group


def test_volcanos_crd_is_not_shipped() -> None:
    """Volcano installs its own CRD; shipping another copy would fight over it."""
    names = {crd["metadata"]["name"] for crd in find("CustomResourceDefinition")}
    assert names == {"podgroups.scheduling.x-k8s.io"}


def test_namespaced_role_grants_exactly_leases_configmaps_and_its_pods_labels() -> None:
    role = one("Role", SERVICE_ACCOUNT)
    assert role["metadata"]["namespace"] == NAMESPACE
    assert grants(role) == NAMESPACED_GRANTS
    # Reading and renewing a lease is limited to the scheduler's own Lease (create cannot be).
    for rule in role["rules"]:
        if "leases" in rule["resources"] and set(rule["verbs"]) - {"create"}:
            assert rule.get("resourceNames") == [LEASE], rule


def test_pods_can_be_read_bound_and_evicted_but_never_made_or_deleted() -> None:
    """Across the cluster, pods are only read (and bound and evicted, by their subresources);
    in the scheduler's own namespace they may be patched too: the leader's label."""
    for role in roles():
        for (group, resource), verbs in grants(role).items():
            if (group, resource) == ("", "pods"):
                allowed = {"get", "list", "watch"} | (
                    {"patch"} if role["kind"] == "Role" else set()
                )
                assert verbs <= allowed, f"{role['kind']} may {verbs} pods"


def test_leases_and_configmaps_only_in_the_namespaced_role() -> None:
    cluster = {resource for _, resource in grants(one("ClusterRole", SERVICE_ACCOUNT))}
    assert not {"leases", "configmaps"} & cluster
    for role in find("ClusterRole"):
        assert not any(r == "leases" for _, r in grants(role))


@pytest.mark.parametrize(
    ("kind", "role_kind"), [("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")]
)
def test_bindings_give_the_roles_to_the_service_account_only(kind: str, role_kind: str) -> None:
    binding = one(kind, SERVICE_ACCOUNT)
    sa = one("ServiceAccount", SERVICE_ACCOUNT)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": role_kind,
        "name": one(role_kind, SERVICE_ACCOUNT)["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": SERVICE_ACCOUNT,
            "namespace": sa["metadata"]["namespace"],
        }
    ]
    if kind == "RoleBinding":
        assert binding["metadata"]["namespace"] == NAMESPACE


# --- the Deployment agrees with the RBAC, the Service, the image and the example ----------------


def deployment() -> Doc:
    return one("Deployment", "toposched-scheduler", file="scheduler.yaml")


def container() -> Doc:
    [c] = deployment()["spec"]["template"]["spec"]["containers"]
    return c


def port_number(port: int | str) -> int:
    if isinstance(port, int):
        return port
    [number] = [p["containerPort"] for p in container()["ports"] if p.get("name") == port]
    return int(number)


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_deployment_runs_the_kube_scheduler_with_leader_election() -> None:
    dep = deployment()
    pod = dep["spec"]["template"]["spec"]
    command = container()["command"]
    assert command[:3] == ["toposched", "kube", "scheduler"]
    assert "--in-cluster" in command and "--kubeconfig" not in command
    assert flag(command, "--scheduler-name") == SCHEDULER_NAME
    assert dep["spec"]["replicas"] == 2
    assert "--leader-elect" in command  # two replicas: only the Lease holder may bind
    assert "--namespace" not in command  # it would restrict the scheduler to one namespace
    assert dep["metadata"]["namespace"] == NAMESPACE
    assert pod["serviceAccountName"] == SERVICE_ACCOUNT
    assert pod.get("automountServiceAccountToken", True)
    assert "schedulerName" not in pod  # the default scheduler places the scheduler itself
    selector = dep["spec"]["selector"]["matchLabels"]
    assert selector.items() <= dep["spec"]["template"]["metadata"]["labels"].items()
    [env] = [e for e in container()["env"] if e["name"] == "POD_NAMESPACE"]
    assert env["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}


def test_command_exists_in_the_cli() -> None:
    # Skipped only while the `kube` sub-command is not in the tree at all.
    pytest.importorskip("toposched.cli.kube_cmd", exc_type=ModuleNotFoundError)
    import typer.main

    from toposched.cli.main import app

    command = container()["command"]
    node: Any = typer.main.get_command(app)
    for word in command[1:3]:
        assert word in node.commands, f"`{' '.join(command[:3])}`: no sub-command {word!r}"
        node = node.commands[word]
    options = {
        opt for param in node.params if param.param_type_name == "option" for opt in param.opts
    }
    given = {arg for arg in command[3:] if arg.startswith("--")}
    assert given <= options, f"not options of `{' '.join(command[:3])}`: {given - options}"


def test_service_account_and_roles_live_in_the_deployments_namespace() -> None:
    assert one("ServiceAccount", SERVICE_ACCOUNT)["metadata"]["namespace"] == NAMESPACE
    assert one("Namespace", NAMESPACE, file="namespace.yaml")


def test_probes_and_service_reach_the_http_port() -> None:
    c = container()
    assert HTTP_PORT in [p["containerPort"] for p in c["ports"]]
    for probe in ("livenessProbe", "readinessProbe"):
        get = c[probe]["httpGet"]
        assert get["path"] == "/healthz" and port_number(get["port"]) == HTTP_PORT, probe
    svc = one("Service", "toposched-scheduler", file="scheduler.yaml")
    assert svc["metadata"]["namespace"] == NAMESPACE
    from toposched.kube.runner import LEADER, ROLE

    template_labels = deployment()["spec"]["template"]["metadata"]["labels"]
    selector = dict(svc["spec"]["selector"])
    assert selector.pop(ROLE) == LEADER  # the label the leading replica puts on its pod
    assert ROLE not in template_labels and selector.items() <= template_labels.items()
    assert [port_number(p.get("targetPort", p["port"])) for p in svc["spec"]["ports"]] == [
        HTTP_PORT
    ]


def test_the_cli_reads_through_the_services_port_by_its_name() -> None:
    """`toposched kube list` asks the service proxy for `toposched-scheduler:<port name>`; the
    real proxy matches the name (503 "no endpoints available" otherwise), and so must the
    read API's role in user-rbac.yaml."""
    from toposched.kube.reads import SchedulerApi

    svc = one("Service", "toposched-scheduler", file="scheduler.yaml")
    assert [p["name"] for p in svc["spec"]["ports"]] == [SchedulerApi.port]
    role = one("ClusterRole", "toposched-read-api", file="user-rbac.yaml")
    assert role["rules"][0]["resourceNames"] == [f"toposched-scheduler:{SchedulerApi.port}"]


def test_container_is_locked_down_and_bounded() -> None:
    pod = deployment()["spec"]["template"]["spec"]
    c = container()
    sc = c["securityContext"]
    assert sc.get("runAsNonRoot", pod["securityContext"].get("runAsNonRoot")) is True
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert not sc.get("privileged")
    for bound in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(c["resources"][bound]), bound


def test_image_matches_the_dockerfile() -> None:
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert container()["image"] == "toposched:0.1.0"
    assert re.search(r"^FROM python:3\.11-slim\s*$", dockerfile, re.M)
    assert re.search(r"""^ENTRYPOINT \["toposched"\]""", dockerfile, re.M)
    assert '"toposched[kube,nvml]"' in dockerfile  # the node agent reads NVML
    [user] = re.findall(r"^USER (\d+)(?::\d+)?\s*$", dockerfile, re.M)
    run_as = deployment()["spec"]["template"]["spec"]["securityContext"]["runAsUser"]
    assert int(user) == run_as != 0


def queues() -> dict[str, Any]:
    cm = one("ConfigMap", QUEUES_CONFIGMAP, file="queues.yaml")
    assert cm["metadata"]["namespace"] == NAMESPACE
    parsed = yaml.safe_load(cm["data"]["queues.yaml"])
    assert set(parsed) == {"queues"}
    return dict(parsed["queues"])


def test_queue_configmap_has_two_teams_with_guaranteed_gpus() -> None:
    q = queues()
    assert len(q) == 2
    for name, settings in q.items():
        assert set(settings) == {"guaranteed_gpus"}, name
        gpus = settings["guaranteed_gpus"]
        assert isinstance(gpus, int) and not isinstance(gpus, bool) and gpus >= 0, name


def test_example_job_is_a_gang_of_one_gpu_pods_for_toposched() -> None:
    group = example_podgroup()
    namespace = group["metadata"]["namespace"]
    assert namespace == "team-a" and namespace in queues()
    pods = find("Pod", file=EXAMPLE)
    assert len(pods) == group["spec"]["minMember"] == 4
    for pod in pods:
        meta, spec = pod["metadata"], pod["spec"]
        assert meta["namespace"] == namespace
        assert meta["labels"][POD_GROUP_LABEL] == group["metadata"]["name"]
        assert (
            spec["schedulerName"]
            == SCHEDULER_NAME
            == flag(container()["command"], "--scheduler-name")
        )
        [c] = spec["containers"]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert "pytorch" in c["image"] and c["command"]


# --- kustomization.yaml --------------------------------------------------------------------------


def test_kustomization_lists_the_install() -> None:
    k = yaml.safe_load((DEPLOY / KUSTOMIZATION).read_text())
    assert k["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert k["kind"] == "Kustomization"
    assert "namespace" not in k  # it would rewrite every namespace, the example's included
    resources = k["resources"]
    assert len(resources) == len(set(resources))
    assert all((DEPLOY / r).is_file() for r in resources), resources
    # Everything but the example job, which needs the CRD established first.
    assert set(resources) == set(manifest_files()) - {EXAMPLE}
    assert resources[0] == "namespace.yaml"
