"""`toposched place` and `toposched demo` as a user runs them: output contract and exit codes."""

from __future__ import annotations

import json
from pathlib import Path


def test_place_json_contract(cli) -> None:
    result = cli("place", "--topology", "dgx1-v100", "--gpus", "4", "--json")
    assert result.code == 0, result.err
    assert result.json() == {"gpus": [0, 1, 2, 3], "ring_bandwidth_gbps": 25.0}


def test_place_avoids_busy_gpus_and_single_gpu_has_no_ring(cli) -> None:
    result = cli(
        "place", "-t", "dgx1-v100", "-k", "1", "--busy", "0,4", "--mode", "spread", "--json"
    )
    assert result.code == 0, result.err
    chosen = result.json()
    assert chosen["ring_bandwidth_gbps"] is None
    # GPU0 and GPU4 are busy; spread keeps off their PCIe switches (0-1 and 4-5).
    assert chosen["gpus"][0] in {2, 3, 6, 7}


def test_place_baseline_policies(cli) -> None:
    index = cli(
        "place", "-t", "dgx1-v100", "-k", "4", "--busy", "1", "--policy", "index-order", "--json"
    )
    assert index.json() == {"gpus": [0, 2, 3, 4], "ring_bandwidth_gbps": 6.0}
    first = cli(
        "place", "-t", "dgx1-v100", "-k", "3", "--policy", "random", "--seed", "5", "--json"
    )
    second = cli(
        "place", "-t", "dgx1-v100", "-k", "3", "--policy", "random", "--seed", "5", "--json"
    )
    assert first.json() == second.json()
    pair = cli("place", "-t", "pcie-8gpu-2socket", "-k", "2", "--policy", "pair-score", "--json")
    assert pair.json() == {"gpus": [0, 1], "ring_bandwidth_gbps": 16.0}


def test_place_human_output(cli) -> None:
    result = cli("place", "-t", "hgx-h100", "-k", "2")
    assert result.code == 0
    assert "GPUs 0,1 of hgx-h100" in result.out
    assert "ring 450 GB/s" in result.out


def test_not_enough_gpus_exits_3(cli) -> None:
    result = cli("place", "-t", "pcie-4gpu-2socket", "-k", "3", "--busy", "0,1", "--json")
    assert result.code == 3
    assert result.out == ""
    assert "3 GPUs requested but only 2 of 4 are free" in result.err


def test_bad_input_exits_2(cli) -> None:
    cases = [
        (
            ("place", "-t", "nope", "-k", "1"),
            "neither a file nor a preset; known presets: dgx1-v100",
        ),
        (("place", "-t", "dgx1-v100", "-k", "9"), "the node has 8 GPUs; 9 were requested"),
        (("place", "-t", "dgx1-v100", "-k", "1", "--busy", "8"), "out of range 0..7"),
        (("place", "-t", "dgx1-v100", "-k", "1", "--busy", "a"), "--busy takes GPU indices"),
        (("place", "-t", "dgx1-v100", "-k", "2", "--policy", "best"), "known policies: topology"),
        (("place", "-t", "dgx1-v100", "-k", "2", "--mode", "tight"), "expected spread or pack"),
        (("place", "-k", "2"), "give --topology and --gpus"),
    ]
    for args, message in cases:
        result = cli(*args)
        assert result.code == 2, (args, result.err)
        assert message in result.err, (args, result.err)
        assert result.out == ""


def test_batch_requests_one_result_per_line_in_order(cli, tmp_path: Path, fixtures: Path) -> None:
    capture = fixtures / "topologies" / "hgx-h100-8gpu-nv18.txt"
    lines = [
        {"topology": "dgx1-v100", "gpus": 4},
        {"topology": "dgx1-v100", "gpus": 2, "busy": [0, 3], "policy": "index-order"},
        {"topology": str(capture), "gpus": 8},
        {"topology": "dgx1-v100", "gpus": 1, "busy": [0], "mode": "spread"},
        {"topology": "pcie-4gpu-2socket", "gpus": 4, "busy": [2]},
        {"topology": "dgx1-v100", "gpus": 4, "policy": "random", "params": {"seed": 3}},
    ]
    path = tmp_path / "requests.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    result = cli("place", "--requests", str(path))
    assert result.code == 3  # line 5 cannot be placed; nothing was bad input
    out = result.json_lines()
    assert len(out) == len(lines)
    assert out[0] == {"gpus": [0, 1, 2, 3], "ring_bandwidth_gbps": 25.0}
    assert out[1] == {"gpus": [1, 2], "ring_bandwidth_gbps": 50.0}
    assert out[2] == {"gpus": list(range(8)), "ring_bandwidth_gbps": 450.0}
    assert out[3]["gpus"][0] in {2, 3, 4, 5, 6, 7}
    assert out[4]["error"]["code"] == "not_enough_gpus"
    assert out[4]["error"]["line"] == 5
    assert len(out[5]["gpus"]) == 4


def test_batch_bad_lines_are_reported_and_the_rest_still_answered(cli) -> None:
    stdin = "\n".join(
        [
            '{"topology": "dgx1-v100", "gpus": 2}',
            "{not json",
            '{"topology": "dgx1-v100"}',
            '{"topology": "dgx1-v100", "gpus": 2, "colour": "red"}',
            '{"topology": "dgx1-v100", "gpus": 2, "busy": [9]}',
        ]
    )
    result = cli("place", "--requests", "-", stdin=stdin)
    assert result.code == 2
    out = result.json_lines()
    assert out[0] == {"gpus": [0, 3], "ring_bandwidth_gbps": 50.0}
    assert [o["error"]["line"] for o in out[1:]] == [2, 3, 4, 5]
    assert all(o["error"]["code"] == "bad_request" for o in out[1:])
    assert "not JSON" in out[1]["error"]["message"]
    assert "missing key 'gpus'" in out[2]["error"]["message"]
    assert "unknown key 'colour'" in out[3]["error"]["message"]
    assert "out of range" in out[4]["error"]["message"]


def test_demo_shows_topology_beating_topology_unaware_picks(cli) -> None:
    result = cli("demo", "--json")
    assert result.code == 0, result.err
    report = result.json()
    sizes = {size["gpus"]: size for size in report["sizes"]}
    assert (sizes[2]["sets"], sizes[2]["best_ring_bandwidth_gbps"]) == (28, 50.0)
    assert (sizes[4]["sets"], sizes[4]["sets_at_best_ring"]) == (70, 8)
    # Issue 16: every case is one where the topology-aware choice differs from index order
    # and its ring is faster, for 2- and 4-GPU jobs, with GPUs busy already.
    cases = report["cases"]
    assert {case["gpus"] for case in cases} == {2, 4}
    assert any(case["busy"] for case in cases if case["gpus"] == 4)
    for case in cases:
        by_policy = {c["policy"]: c for c in case["choices"]}
        aware, plain = by_policy["topology"], by_policy["index-order"]
        assert aware["gpus"] != plain["gpus"] and aware["ring"] > plain["ring"], case
        assert not set(aware["gpus"]) & set(case["busy"])
    (busy_one,) = [c for c in cases if c["gpus"] == 4 and c["busy"] == [0]]
    picks = {c["policy"]: (c["gpus"], c["ring"]) for c in busy_one["choices"]}
    assert picks["topology"] == ([4, 5, 6, 7], 25.0)
    assert picks["index-order"] == ([1, 2, 3, 4], 6.0)
    after = {(row["policy"], row["mode"]): row for row in report["after_single_gpu_jobs"]}
    assert after[("topology", "pack")]["ring_bandwidth_gbps"] == 25.0
    human = cli("demo")
    assert human.code == 0
    assert "70 ways to pick 4 GPUs" in human.out and "Where topology matters" in human.out
    assert "4,5,6,7 (25)" in human.out and "1,2,3,4 (6)" in human.out
    flat = cli("demo", "--topology", "hgx-h100", "--gpus", "2")
    assert flat.code == 0 and "cannot do better" in flat.out
    assert cli("demo", "--gpus", "9").code == 2


def test_requests_file_that_is_not_utf8_exits_2(cli, tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    path.write_bytes(b'\xff\xfe{"topology": "dgx1-v100", "gpus": 2}\n')
    result = cli("place", "--requests", str(path))
    assert result.code == 2, result.err
    assert f"error: {path}: cannot read: not UTF-8 text" in result.err
    assert "Traceback" not in result.err
    missing = cli("place", "--requests", str(tmp_path / "none.jsonl"))
    assert missing.code == 2 and "cannot read" in missing.err
