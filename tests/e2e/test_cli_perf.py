"""`toposched perf` as a user runs it: the JSON contract, batches, catalogs and exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KEYS = {"throughput", "iteration_s", "comm_exposed_s", "compute_s"}


def test_perf_json_contract_reproduces_ack(cli) -> None:
    result = cli(
        "perf", "--model", "vgg16", "--topology", "dgx1-v100", "--placement", "0,1,2,3",
        "--network", "ack", "--framework", "tensorflow-horovod", "--batch", "64", "--json",
    )  # fmt: skip
    assert result.code == 0, result.err
    out = result.json()
    assert set(out) == KEYS
    assert out["throughput"] == pytest.approx(991.92, rel=0.10)
    assert out["iteration_s"] == pytest.approx(out["compute_s"] + out["comm_exposed_s"], abs=2e-6)
    assert out["throughput"] == pytest.approx(4 * 64 / out["iteration_s"], rel=1e-4)


def test_two_nodes_are_separated_by_a_semicolon(cli) -> None:
    two = cli(
        "perf", "-m", "vgg16", "-t", "dgx1-v100", "-p", "0,1;0,1", "--network", "ack",
        "--framework", "tensorflow-horovod", "--json",
    )  # fmt: skip
    assert two.code == 0, two.err
    assert two.json()["throughput"] == pytest.approx(200.47, rel=0.10)
    pod = cli("perf", "-m", "vgg16", "-t", "dgx1-v100", "-p", "0,1;0,1", "--tier", "pod", "--json")
    rack = cli("perf", "-m", "vgg16", "-t", "dgx1-v100", "-p", "0,1;0,1", "--json")
    assert pod.json()["throughput"] < rack.json()["throughput"]


def test_gpu_type_comes_from_the_topology_unless_given(cli) -> None:
    h100 = cli("perf", "-m", "resnet50", "-t", "hgx-h100", "-p", "0", "--json").json()
    v100 = cli(
        "perf", "-m", "resnet50", "-t", "hgx-h100", "-p", "0", "--gpu-type", "V100", "--json"
    ).json()
    assert h100["throughput"] > 3 * v100["throughput"]


def test_neighbours_slow_a_job_down(cli) -> None:
    args = ("perf", "-m", "lstm", "-t", "pcie-8gpu-2socket", "-p", "0", "--framework", "cntk")
    alone = cli(*args, "--json").json()
    shared = cli(*args, "--neighbours", "1", "--json").json()
    assert shared["throughput"] == pytest.approx(0.6 * alone["throughput"], rel=1e-3)


def test_perf_human_output(cli) -> None:
    result = cli("perf", "-m", "vgg16", "-t", "dgx1-v100", "-p", "0,1,2,5", "--network", "ack")
    assert result.code == 0, result.err
    for text in ("vgg16 on V100, pytorch-horovod", "0,1,2,5 of dgx1-v100", "samples/s"):
        assert text in result.out
    assert "best placement of as many GPUs" in result.out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ("-m", "vgg17", "-t", "dgx1-v100", "-p", "0"),
            "--model: unknown model 'vgg17'; known models: alexnet, bert-base, bert-large",
        ),
        (("-m", "vgg16", "-t", "dgx9", "-p", "0"), "--topology: 'dgx9' is neither a file"),
        (("-m", "vgg16", "-t", "dgx1-v100", "-p", "0,9"), "--placement: GPU 9 is out of range"),
        (("-m", "vgg16", "-t", "dgx1-v100", "-p", "0,a"), "--placement: takes GPU indices"),
        (("-m", "vgg16", "-t", "dgx1-v100", "-p", "0", "--network", "x"), "--network: unknown"),
        (("-m", "vgg16", "-t", "dgx1-v100", "-p", "0", "--framework", "jax"), "--framework:"),
        (("-m", "vgg16", "-t", "dgx1-v100", "-p", "0", "--gpu-type", "K80"), "--gpu-type:"),
        (("-m", "vgg16", "-t", "dgx1-v100", "-p", "0", "--batch", "0"), "--batch: must be"),
        (("-m", "vgg16", "-t", "dgx1-v100", "-p", "0;1", "--tier", "moon"), "--tier: must be"),
        (("-m", "vgg16", "-p", "0"), "give --model, --topology and --placement"),
        (("-m", "vgg16", "-t", "dgx1-v100", "-p", "0", "--alias", "x"), "--alias takes NAME=MODEL"),
        (("-m", "vgg16", "-t", "dgx1-v100", "-p", "0", "--pair-gap", "0.2"), "belong to `topo"),
    ],
)
def test_bad_input_exits_2_and_prints_nothing(cli, args: tuple[str, ...], message: str) -> None:
    result = cli("perf", *args)
    assert result.code == 2, (args, result.err)
    assert message in result.err, (args, result.err)
    assert result.out == ""


def test_extra_catalog_and_aliases(cli, tmp_path: Path) -> None:
    example = str(ROOT / "examples" / "perf-catalog.yaml")
    amp = cli(
        "perf", "--catalog", example, "-m", "resnet50-amp", "-t", "dgx1-v100", "-p", "0,1;0,1",
        "--network", "our-roce", "--json",
    )  # fmt: skip
    assert amp.code == 0, amp.err
    traced = cli(
        "perf", "--catalog", example, "-m", "imagenet_resnet", "-t", "dgx1-v100", "-p", "0"
    )
    assert traced.code == 0, traced.err
    assert "resnet50 on V100" in traced.out
    aliased = cli("perf", "--alias", "philly-cnn=vgg19", "-m", "Philly-CNN", "-t", "dgx1-v100",
                  "-p", "0", "--json")  # fmt: skip
    assert aliased.code == 0, aliased.err
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n  mine:\n    params_m: 3\n    forward_gflops: -1\n")
    result = cli("perf", "--catalog", str(bad), "-m", "mine", "-t", "dgx1-v100", "-p", "0")
    assert result.code == 2
    assert f"{bad}:4: models.mine.forward_gflops: must be > 0, got -1" in result.err
    missing = cli(
        "perf", "--catalog", str(tmp_path / "none.yaml"), "-m", "vgg16", "-t", "x", "-p", "0"
    )
    assert missing.code == 2 and "cannot read" in missing.err


def test_batch_requests_one_result_per_line_in_order(cli) -> None:
    path = ROOT / "examples" / "perf-requests.jsonl"
    result = cli("perf", "--requests", str(path))
    assert result.code == 0, result.err
    out = result.json_lines()
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    assert len(out) == len(lines)
    assert all(set(o) == KEYS for o in out)
    assert out[0]["throughput"] == pytest.approx(991.92, rel=0.10)
    assert out[1]["throughput"] == pytest.approx(200.47, rel=0.10)
    single = cli(
        "perf", "-m", "vgg16", "-t", "dgx1-v100", "-p", "0,1,2,3", "--network", "ack",
        "--framework", "tensorflow-horovod", "--json",
    )  # fmt: skip
    assert out[0] == single.json()


def test_batch_bad_lines_are_reported_and_the_rest_still_answered(cli) -> None:
    stdin = "\n".join(
        [
            '{"model": "resnet50", "topology": "dgx1-v100", "placement": "0,1"}',
            "{not json",
            '{"model": "vgg17", "topology": "dgx1-v100", "placement": "0"}',
            '{"model": "vgg16", "topology": "dgx1-v100"}',
            '{"model": "vgg16", "topology": "dgx1-v100", "placement": "0", "colour": "red"}',
            '{"model": "vgg16", "topology": "dgx1-v100", "placement": [0, 8]}',
            '{"model": "vgg16", "topology": "dgx1-v100", "placement": "0", "batch": "big"}',
            '{"model": "vgg16", "topology": "dgx1-v100", "placement": "0;1", "tier": "moon"}',
            '{"model": "vgg16", "topology": 7, "placement": "0"}',
            "",
            '{"model": "vgg16", "topology": "dgx1-v100", "placement": [[0], [1]], "batch": 32}',
        ]
    )
    result = cli("perf", "--requests", "-", stdin=stdin)
    assert result.code == 2
    out = result.json_lines()
    assert len(out) == 10
    assert set(out[0]) == KEYS and set(out[-1]) == KEYS
    errors = [o["error"] for o in out[1:-1]]
    assert [e["line"] for e in errors] == [2, 3, 4, 5, 6, 7, 8, 9]
    assert all(e["code"] == "bad_request" for e in errors)
    assert [e["field"] for e in errors] == [
        None, "model", "placement", "colour", "placement", "batch", "tier", "topology",
    ]  # fmt: skip
    assert "line 2: not JSON" in errors[0]["message"]
    assert "line 3, model: unknown model 'vgg17'; known models:" in errors[1]["message"]
    assert "missing key 'placement'" in errors[2]["message"]
    assert "unknown key 'colour'" in errors[3]["message"]
    assert "GPU 8 is out of range" in errors[4]["message"]


def test_requests_exclude_single_request_flags(cli) -> None:
    result = cli("perf", "--requests", "-", "--model", "vgg16", stdin="")
    assert result.code == 2
    assert "--requests takes every request from the file" in result.err


def test_requests_file_that_is_not_utf8_exits_2(cli, tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_bytes(b'\xff\xfe{"model": "vgg16"}\n')
    result = cli("perf", "--requests", str(path))
    assert result.code == 2, result.err
    assert f"error: {path}: cannot read: not UTF-8 text" in result.err
    assert "Traceback" not in result.err
    missing = cli("perf", "--requests", str(tmp_path / "none.jsonl"))
    assert missing.code == 2 and "cannot read" in missing.err


POLLUX = ROOT / "data" / "measurements" / "pollux-t4"


def test_fit_then_predict_a_job_from_its_one_gpu_rows(cli, tmp_path: Path) -> None:
    """The protocol of docs/perfmodel.md through the command line: fit the cluster on two jobs,
    give the third only its 1-GPU rows, and ask `perf` for its other placements."""
    from toposched.perf.measurements import parse_measurements
    from toposched.perf.protocol import ratio_metrics

    source = POLLUX / "imagenet" / "placements.csv"
    lines = source.read_text().splitlines()
    held = tmp_path / "imagenet"
    held.mkdir()
    (held / "placements.csv").write_text(
        "\n".join([lines[0], *(line for line in lines[1:] if line.startswith("1,"))]) + "\n"
    )
    out = tmp_path / "fitted.yaml"
    fitted = cli(
        "perf", "fit", "--measurements", str(POLLUX / "bert"), str(POLLUX / "cifar10"), str(held),
        "--topology", "g4dn-12xlarge", "--network", "aws-50g", "--out", str(out), "--json",
        "--pair-gap", "0.2",
    )  # fmt: skip
    assert fitted.code == 0, fitted.err
    summary = fitted.json()
    assert summary["pair_gap"] == 0.2
    # BERT's placements measured more than 20% apart make 205 pairs (244 over 10% apart).
    assert summary["held_out"]["bert"]["pairs"] == 205
    assert set(summary["jobs"]) == {"bert", "cifar10", "imagenet"}
    assert summary["jobs"]["imagenet"]["model"] == "resnet50-mixed"
    assert set(summary["held_out"]) == {"bert", "cifar10"}
    assert out.read_text().startswith("# Fitted by `toposched perf fit`")

    rows = parse_measurements(source.read_text(), source=str(source), job="imagenet")
    requests = tmp_path / "requests.jsonl"
    requests.write_text(
        "".join(
            json.dumps(
                {
                    "model": "imagenet",
                    "topology": "g4dn-12xlarge",
                    "network": "aws-50g",
                    "placement": ";".join(",".join(map(str, range(k))) for k in m.counts),
                    "batch": m.batch,
                }
            )
            + "\n"
            for m in rows
        )
    )
    answered = cli("perf", "--catalog", str(out), "--requests", str(requests), "--json")
    assert answered.code == 0, answered.err
    times = [line["iteration_s"] for line in answered.json_lines()]
    assert len(times) == len(rows)
    metrics = ratio_metrics(list(zip(rows, times, strict=True)))
    # The same fold as tests/unit/test_perf_fit.py's protocol test, through files and requests.
    assert metrics.median == pytest.approx(0.0552, abs=0.002)
    assert metrics.worst <= 0.401
    assert metrics.pair_accuracy >= 0.753


def test_fit_reports_bad_measurements_by_file_and_row(cli, tmp_path: Path) -> None:
    bad = tmp_path / "mine.csv"
    bad.write_text("model,gpu_type,placement,batch,step_time\nbert,T4,22,8,0.5\nbert,T4,22,8,x\n")
    args = ("--topology", "g4dn-12xlarge", "--network", "aws-50g")
    result = cli("perf", "fit", "--measurements", str(bad), *args, "--out", str(tmp_path / "o"))
    assert result.code == 2
    assert f"{bad}:3: step_time: must be seconds > 0, got 'x'" in result.err
    unknown = tmp_path / "mystery"
    unknown.mkdir()
    (unknown / "placements.csv").write_text("placement,local_bsz,step_time\n1,8,0.2\n")
    result = cli("perf", "fit", "--measurements", str(unknown), *args, "--out", str(tmp_path / "o"))
    assert result.code == 2 and "unknown model 'mystery'" in result.err
    assert "parameter count" in result.err
    empty = tmp_path / "empty"
    empty.mkdir()
    result = cli("perf", "fit", "--measurements", str(empty), *args, "--out", str(tmp_path / "o"))
    assert result.code == 2 and "must hold placements.csv" in result.err
    result = cli("perf", "fit", "--measurements", str(bad), "--network", "aws-50g")
    assert result.code == 2 and "needs --topology" in result.err
    for gap in ("-0.1", "nan", "inf"):
        result = cli("perf", "fit", "--measurements", str(bad), *args, "--pair-gap", gap)
        assert result.code == 2 and "--pair-gap: must be a fraction of 0 or more" in result.err
    result = cli("perf", "fitt")
    assert result.code == 2 and "unknown action 'fitt'" in result.err
    assert not (tmp_path / "o").exists()


def test_perf_list_names_the_models_a_job_may_name(cli, tmp_path: Path) -> None:
    """`toposched perf --list`, which the README, docs/server.md and `submit --help` name: the
    catalog's models with their aliases, an extra catalog's among them; --json for programs."""
    extra = tmp_path / "extra.yaml"
    extra.write_text(
        "models:\n  tinynet: {params_m: 1.5, forward_gflops: 0.2, throughput: {V100: 9000}}\n"
    )
    r = cli("perf", "--list", "--json", "--catalog", str(extra), "--alias", "tiny=tinynet")
    assert r.code == 0, r.err
    models = {m["name"]: m for m in r.json()["models"]}
    assert {"resnet50", "vgg16", "bert-large", "tinynet"} <= set(models)
    assert models["tinynet"] == {
        "name": "tinynet",
        "params_m": 1.5,
        "forward_gflops": 0.2,
        "measured_on": ["V100"],
        "aliases": ["tiny"],
    }
    table = cli("perf", "--list")
    assert table.code == 0 and "resnet50" in table.out and "models of the performance" in table.out
    refused = cli("perf", "--list", "--model", "vgg16")
    assert refused.code == 2
    assert "--list takes no action, --model, --placement or --requests" in refused.err
