"""`toposched topology ...` as a user runs it: parse, show, presets, and errors."""

from __future__ import annotations

from pathlib import Path


def test_parse_json_contract_on_a_real_capture(cli, fixtures: Path) -> None:
    result = cli(
        "topology", "parse", str(fixtures / "topologies" / "pcie-2gpu-phb-tabs.txt"), "--json"
    )
    assert result.code == 0, result.err
    assert result.json() == {
        "gpus": 2,
        "links": [["X", "PHB"], ["PHB", "X"]],
        "numa": [0, 0],
        "cpu_affinity": ["0-63", "0-63"],
    }


def test_parse_truncated_capture_names_the_missing_rows(cli, fixtures: Path) -> None:
    capture = fixtures / "topologies" / "dgx-a100.partial.txt"
    result = cli("topology", "parse", str(capture), "--json")
    assert result.code == 2
    assert result.out == ""
    assert str(capture) in result.err
    assert "GPU4" in result.err and "missing" in result.err


def test_parse_refuses_a_preset_name(cli) -> None:
    result = cli("topology", "parse", "dgx1-v100")
    assert result.code == 2
    assert "is a preset name" in result.err


def test_show_json_adds_bandwidths(cli) -> None:
    result = cli("topology", "show", "dgx1-v100", "--json")
    assert result.code == 0, result.err
    shown = result.json()
    assert shown["name"] == "dgx1-v100"
    assert shown["gpus"] == 8
    assert shown["links"][0] == ["X", "NV1", "NV1", "NV2", "NV2", "SYS", "SYS", "SYS"]
    assert shown["bandwidth_gbps"][0] == [None, 25.0, 25.0, 50.0, 50.0, 6.0, 6.0, 6.0]
    assert shown["numa"] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert shown["switch"] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert shown["ring_bandwidth_gbps"] == 50.0


def test_show_table_and_export_formats_round_trip(cli, tmp_path: Path) -> None:
    table = cli("topology", "show", "pcie-8gpu-2socket")
    assert table.code == 0
    assert "PIX 16" in table.out and "SYS 6" in table.out
    for fmt, name in (("yaml", "box.yaml"), ("smi", "box.txt")):
        exported = cli("topology", "show", "pcie-8gpu-2socket", "--format", fmt)
        assert exported.code == 0, exported.err
        path = tmp_path / name
        path.write_text(exported.out)
        again = cli("topology", "show", str(path), "--json").json()
        original = cli("topology", "show", "pcie-8gpu-2socket", "--json").json()
        assert again["links"] == original["links"]
        assert again["numa"] == original["numa"]
        assert again["cpu_affinity"] == original["cpu_affinity"]


def test_yaml_file_errors_name_file_and_line(cli, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("links:\n  - X NV1\n  - NV2 X\n")
    result = cli("topology", "show", str(path))
    assert result.code == 2
    assert f"{path}:2: link matrix is not symmetric" in result.err


def test_presets_listing(cli) -> None:
    result = cli("topology", "presets", "--json")
    assert result.code == 0
    rows = {row["name"]: row for row in result.json()}
    assert rows["dgx2-v100"]["gpus"] == 16
    assert rows["hgx-h100"]["ring_bandwidth_gbps"] == 450.0


def test_discover_without_nvml_says_so(cli) -> None:
    result = cli("topology", "discover")
    # This machine (and CI) has no NVIDIA driver: a clear message, exit 2, nothing on stdout.
    assert result.code == 2
    assert "NVML" in result.err
    assert result.out == ""
