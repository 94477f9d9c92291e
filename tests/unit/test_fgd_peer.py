"""benchmarks/fgd_peer.py: FGD's own simulator's inputs as its scripts write them, its log read
by its protocol, and a build that says why it cannot be had."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import stat
import subprocess
import sys
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "fgd_peer" / "simon-smoke-fgd.log"


def load_peer() -> ModuleType:
    # benchmarks/ is a folder of scripts, not a package: the module is loaded from its file.
    spec = importlib.util.spec_from_file_location("fgd_peer", ROOT / "benchmarks" / "fgd_peer.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


peer = load_peer()


def alloc_line(used_milli: int, total_gpus: int, arrived_milli: int) -> str:
    """A line as the simulator's logrus writes it to a file (analysis.go, ClusterGpuFragReport)."""
    return (
        'time="2026-12-07T20:30:00Z" level=info msg="[Alloc]; Used nodes: 3; Used GPUs: 9; '
        f"Used GPU Milli: {used_milli}; Total GPUs: {total_gpus}; "
        f'Arrived GPU Milli: {arrived_milli}\\n"'
    )


def test_a_captured_log_gives_the_figures_at_the_point_of_measurement() -> None:
    log = peer.parse_log(FIXTURE.read_text())
    assert log.total_gpus == 116
    assert (log.original_pods, log.tuned_pods) == (300, 201)
    assert log.unscheduled_pods == 46
    assert log.failed_pods == 46
    # Arrived thousandths that round to 100% of 116 GPUs: 115,830 and 116,300, both with
    # 113,830 allocated (98.13%). To 99%: 114,610 (97.94%) and 114,830 (98.13%).
    assert log.curve()[100] == pytest.approx(98.13)
    assert log.curve()[99] == pytest.approx((97.94 + 98.13) / 2, abs=0.006)
    assert log.alloc_ratio() == pytest.approx(98.13)
    assert log.unallocated_gpus() == pytest.approx(2.2)
    # After every pod: all 116 GPUs touched, 114,100 thousandths allocated.
    assert (log.final_gpus_used, log.final_milli_used) == (116, 114100)
    # The shuffled order the pods arrived in, every tuned pod once.
    assert len(log.arrivals) == 201 == len(set(log.arrivals))
    assert log.arrivals[:3] == ["openb-pod-0282", "openb-pod-0030", "openb-pod-0150"]


def test_a_placement_the_scheduler_gave_up_on_is_counted() -> None:
    # Captured from a best-fit smoke run on a busy machine: the filter passed a node whose GPUs
    # the score plugin then found taken.
    said = (
        'E1207 20:16:56.365864    2354 scheduler.go:497] "Error selecting node for pod" '
        'err="running Score plugins: plugin \\"BestFitScore\\" failed with: the score between '
        "node(0000-openb-node-0150) and pod(paib-gpu/openb-pod-0007) is negative, should not "
        'happen\\n" pod="paib-gpu/openb-pod-0007"\n'
        'time="2026-12-07T20:16:56Z" level=info msg="[48] failed to schedule '
        'pod(paib-gpu/openb-pod-0007): <CPU:  12.00, GPU: 1 x {1000}m ()>\\n"\n'
    )
    log = peer.parse_log(said + FIXTURE.read_text())
    assert (log.scheduler_errors, log.failed_pods) == (1, 47)
    assert peer.parse_log(FIXTURE.read_text()).scheduler_errors == 0


def test_stopping_before_the_point_of_measurement_is_whole_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="until=101: the point of measurement needs 102"):
        peer.run(tmp_path / "simon", peer.DEFAULT_TRACE, peer.DEFAULT_NODES, "fgd", until=101)
    assert not any(tmp_path.iterdir())


def test_a_logs_policy_is_told_by_the_score_plugin_its_config_names() -> None:
    text = FIXTURE.read_text()
    assert peer.parse_log(text).policy() == "fgd"
    assert peer.parse_log(text.replace("FGDScore", "BestFitScore")).policy() == "best-fit"
    assert peer.parse_log(text.replace("FGDScore", "GpuPackingScore")).policy() is None


def test_copies_the_tuning_adds_are_replayed_as_their_original_pod() -> None:
    assert peer.original_name("openb-pod-0282-tuned-17") == "openb-pod-0282"
    assert peer.original_name("openb-pod-0282") == "openb-pod-0282"


def test_the_json_fields_are_issue_42s_names() -> None:
    fields = {
        "trace": "t.csv",
        "seed": 42,
        "total_gpus": 10,
        "pods": 5,
        "failed_pods": 0,
        "scheduler_errors": 0,
    }
    fgd = peer.PeerFigures(
        "fgd", **fields, unallocated_gpus=1.5, alloc_ratio=85.0, wall_s=1.0, curve={}, arrivals=()
    )
    best = peer.PeerFigures(
        "best-fit",
        **fields,
        unallocated_gpus=2.0,
        alloc_ratio=80.0,
        wall_s=1.0,
        curve={},
        arrivals=(),
    )
    assert peer.json_fields([fgd, best]) == {
        "fgd_sim_unallocated_gpus": 1.5,
        "fgd_sim_alloc_ratio": 85.0,
        "bestfit_sim_unallocated_gpus": 2.0,
        "bestfit_sim_alloc_ratio": 80.0,
    }


def test_the_curve_rounds_as_the_authors_merge_script() -> None:
    # 10 GPUs: 10,000 thousandths. Arrived 9,960 rounds to 100%, and so does 10,040; 9,940 is
    # 99% (99.4), and 10,060 101% (100.6). At 100% the ratios logged there are averaged.
    lines = [
        alloc_line(9_000, 10, 9_940),
        alloc_line(9_300, 10, 9_960),
        alloc_line(9_500, 10, 10_040),
        alloc_line(9_600, 10, 10_060),
    ]
    log = peer.parse_log("\n".join(lines))
    assert log.curve()[100] == pytest.approx((93.0 + 95.0) / 2)
    assert log.curve()[99] == pytest.approx(90.0)
    assert log.unallocated_gpus() == pytest.approx(10 * (100 - 94.0) / 100)


def test_where_nothing_rounds_to_the_point_the_neighbours_within_one_percent_count() -> None:
    log = peer.parse_log("\n".join([alloc_line(9_000, 10, 9_900), alloc_line(9_200, 10, 10_100)]))
    assert log.alloc_ratio(100) == pytest.approx(91.0)


def test_a_run_that_stopped_before_the_point_is_refused_saying_where_it_stopped() -> None:
    log = peer.parse_log(alloc_line(5_000, 10, 5_000))
    with pytest.raises(peer.PeerError, match=r"stopped at 50\.0% arrived, before 100%"):
        log.alloc_ratio()


def test_a_log_without_alloc_lines_is_refused() -> None:
    log = peer.parse_log('time="x" level=fatal msg="failed to unmarshal config file"')
    with pytest.raises(peer.PeerError, match="no \\[Alloc\\] line"):
        log.unallocated_gpus()


def test_nodes_are_written_as_the_simulators_node_yaml() -> None:
    nodes = peer.node_documents(
        ROOT / "data" / "clusters" / "openb" / "openb_node_list_gpu_node.csv"
    )
    assert len(nodes) == 1213
    # The first node of data/node_yaml/openb_node_list_gpu_node.yaml in the simulator's repo.
    resources = {
        "alibabacloud.com/gpu-count": "2",
        "alibabacloud.com/gpu-milli": "2000",
        "cpu": "64000m",
        "memory": "262144Mi",
        "pods": "1001",
    }
    assert nodes[0] == {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "labels": {
                "alibabacloud.com/gpu-card-model": "P100",
                "beta.kubernetes.io/os": "linux",
                "kubernetes.io/hostname": "openb-node-0000",
                "kubernetes.io/os": "linux",
            },
            "name": "openb-node-0000",
        },
        "status": {"allocatable": resources, "capacity": resources},
    }


def test_pods_keep_fractions_whole_gpus_and_types(tmp_path: Path) -> None:
    trace = tmp_path / "pods.csv"
    trace.write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        "p-cpu,4000,8192,0,0,\n"
        "p-half,6000,15258,1,500,\n"
        "p-two,8000,30000,2,1000,V100M16|V100M32\n"
    )
    cpu, half, two = peer.pod_documents(trace)
    assert "annotations" not in cpu["metadata"]
    assert cpu["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "4000m",
        "memory": "8192Mi",
    }
    assert half["metadata"]["annotations"] == {
        "alibabacloud.com/gpu-milli": "500",
        "alibabacloud.com/gpu-count": "1",
    }
    assert two["metadata"]["annotations"] == {
        "alibabacloud.com/gpu-milli": "1000",
        "alibabacloud.com/gpu-count": "2",
        "alibabacloud.com/gpu-card-model": "V100M16|V100M32",
    }


def test_a_pod_list_without_a_column_or_with_a_bad_value_is_refused_naming_it(
    tmp_path: Path,
) -> None:
    lacking = tmp_path / "lacking.csv"
    lacking.write_text("name,cpu_milli,memory_mib\np,1000,1024\n")
    with pytest.raises(ValueError, match=r"lacking\.csv: no column num_gpu"):
        peer.pod_documents(lacking)
    bad = tmp_path / "bad.csv"
    bad.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,1024,1,half\n")
    with pytest.raises(ValueError, match=r"bad\.csv:2: gpu_milli is 'half', not a number"):
        peer.pod_documents(bad)


def test_the_scheduler_config_is_the_experiment_scripts_for_each_policy() -> None:
    fgd = peer.scheduler_config("fgd")["profiles"][0]
    assert fgd["plugins"]["score"]["enabled"] == [{"name": "FGDScore", "weight": 1000}]
    assert {"name": "Open-Gpu-Share", "args": {"gpuSelMethod": "FGDScore", **SHARE_MAX}} in fgd[
        "pluginConfig"
    ]
    best = peer.scheduler_config("best-fit")["profiles"][0]
    assert best["plugins"]["score"]["enabled"] == [{"name": "BestFitScore", "weight": 1000}]
    assert {"name": "Open-Gpu-Share", "args": {"gpuSelMethod": "best", **SHARE_MAX}} in best[
        "pluginConfig"
    ]
    with pytest.raises(ValueError, match="policy 'random': the peer runs fgd, best-fit"):
        peer.scheduler_config("random")


SHARE_MAX = {"dimExtMethod": "share", "normMethod": "max"}


def test_the_cluster_config_tunes_to_130_percent_and_shuffles_with_the_seed(tmp_path: Path) -> None:
    spec = peer.cluster_config(tmp_path, 43)["spec"]
    assert spec["cluster"] == {"customConfig": str(tmp_path)}
    assert spec["customConfig"]["shufflePod"] is True
    assert spec["customConfig"]["workloadTuningConfig"] == {"ratio": 1.3, "seed": 43}


def test_a_named_binary_that_is_not_executable_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    named = tmp_path / "simon"
    named.write_text("not a program")
    named.chmod(stat.S_IRUSR)
    monkeypatch.setenv(peer.BINARY_ENV, str(named))
    with pytest.raises(peer.BuildError, match="not an executable file"):
        peer.build(lambda _: None)


@pytest.mark.skipif(shutil.which("go") is None, reason="needs the go command")
def test_a_module_the_proxy_does_not_give_is_a_build_error_saying_what_to_do(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(peer.BINARY_ENV, raising=False)
    monkeypatch.setenv(peer.CACHE_ENV, str(tmp_path / "cache"))
    # No proxy at all: `go mod download` answers at once, as a refusing proxy does.
    monkeypatch.setenv("GOPROXY", "off")
    said: list[str] = []
    with pytest.raises(peer.BuildError) as refused:
        peer.build(said.append)
    message = str(refused.value)
    assert f"the Go module proxy gave no {peer.MODULE}@{peer.VERSION}" in message
    assert "GOPROXY=off" in message
    assert peer.BINARY_ENV in message
    assert said == [f"fetching {peer.MODULE}@{peer.VERSION} from the Go module proxy ..."]
    assert not any(tmp_path.rglob("simon"))


STAND_IN = """package main

import "fmt"

func main() { fmt.Println("a stand-in for simon") }
"""


def file_proxy(root: Path, module: str, version: str) -> Path:
    """A Go module proxy in files (GOPROXY=file://...) serving one module version: its
    go.mod and a main package at ./cmd, as the simulator's module has."""
    folder = root / module / "@v"
    folder.mkdir(parents=True)
    go_mod = f"module {module}\n\ngo 1.15\n"
    (folder / "list").write_text(f"{version}\n")
    (folder / f"{version}.info").write_text(
        f'{{"Version":"{version}","Time":"2024-07-31T15:38:05Z"}}'
    )
    (folder / f"{version}.mod").write_text(go_mod)
    with zipfile.ZipFile(folder / f"{version}.zip", "w") as archive:
        archive.writestr(f"{module}@{version}/go.mod", go_mod)
        archive.writestr(f"{module}@{version}/cmd/main.go", STAND_IN)
    return root


@pytest.mark.skipif(shutil.which("go") is None, reason="needs the go command")
def test_the_module_is_built_in_a_copy_of_its_tree_into_the_cache_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proxy = file_proxy(tmp_path / "proxy", peer.MODULE, peer.VERSION)
    monkeypatch.delenv(peer.BINARY_ENV, raising=False)
    monkeypatch.setenv(peer.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv("GOPROXY", f"file://{proxy}")
    monkeypatch.setenv("GONOSUMDB", peer.MODULE)
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "modcache"))
    said: list[str] = []
    binary = peer.build(said.append)
    assert binary.parent.parent == tmp_path / "cache"
    ran = subprocess.run([str(binary)], capture_output=True, text=True, check=True)
    assert ran.stdout == "a stand-in for simon\n"
    assert said[0].startswith("fetching") and said[-1].startswith("built simon in")
    # Built once: the next call finds it and says nothing.
    again: list[str] = []
    assert peer.build(again.append) == binary
    assert again == []
    # The module cache keeps its files read-only; the build wrote only in its own copy.
    subprocess.run(["go", "clean", "-modcache"], check=True, env={**os.environ})


def test_read_prints_a_kept_logs_figures_and_its_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert peer.main(["--read", str(FIXTURE)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (
        f"{FIXTURE}: fgd, 102.7% arrived, 2.2 GPUs unallocated, 98.13%, 0 scheduler errors"
    )
    (row,) = json.loads(lines[-1])["logs"]
    assert (row["policy"], row["pods"], row["failed_pods"]) == ("fgd", 201, 46)


def test_read_says_a_run_short_of_the_point_is_not_there_yet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    going = tmp_path / "going.log"
    going.write_text(alloc_line(3_000, 10, 3_000) + "\n")
    assert peer.main(["--read", str(going)]) == 0
    out = capsys.readouterr().out
    assert "30.0% arrived, not at the point of measurement yet" in out
    assert json.loads(out.splitlines()[-1])["logs"][0]["alloc_ratio"] is None


def test_gpu_share_replays_the_arrivals_the_peer_logged_and_reports_its_figures(
    tmp_path: Path,
) -> None:
    """benchmarks/gpu_share.py --peer-logs: toposched's side takes the very arrivals FGD's own
    simulator logged (its shuffle, its tuning's copies) on the same node cut, and the JSON line
    carries the peer's figure beside toposched's."""
    nodes_csv = ROOT / "data" / "clusters" / "openb" / "openb_node_list_gpu_node.csv"
    rows = nodes_csv.read_text().splitlines()
    keep = set(peer.smoke_cut(nodes_csv))
    cut = tmp_path / "nodes.csv"
    cut.write_text("\n".join([rows[0], *(r for i, r in enumerate(rows[1:]) if i in keep)]) + "\n")
    ran = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "gpu_share.py"),
            "--trace",
            str(ROOT / "data" / "traces" / "openb" / "openb_pod_list_default.csv"),
            "--nodes",
            str(cut),
            "--policy",
            "toposched",
            "--peer-logs",
            str(FIXTURE),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert ran.returncode == 0, ran.stderr
    last = json.loads(ran.stdout.strip().splitlines()[-1])
    assert last["arrivals"] == "peer"
    assert last["fgd_sim_unallocated_gpus"] == pytest.approx(2.2)
    assert last["fgd_sim_alloc_ratio"] == pytest.approx(0.9813)
    assert last["bestfit_sim_unallocated_gpus"] is None  # no best-fit log given
    assert last["total_gpus"] == 116
    assert "the 201 arrivals FGD's own simulator logged" in ran.stdout
    assert 0 <= last["toposched_unallocated_gpus"] <= 116
