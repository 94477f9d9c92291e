"""nvidia-smi text: every topology reads back from its rendering; broken renderings never parse."""

from __future__ import annotations

import contextlib

from hypothesis import given
from hypothesis import strategies as st

from tests.strategies import LINK_CODES, topologies
from toposched.topology import NodeTopology, TopologyError
from toposched.topology.smi import parse_smi, render_smi


def _rejected(text: str) -> TopologyError:
    """Parse text that must be invalid; the only acceptable outcome is a located TopologyError."""
    try:
        parsed = parse_smi(text, source="mutated")
    except TopologyError as err:
        assert err.source == "mutated"
        return err
    raise AssertionError(f"a broken capture parsed as {parsed.codes()}:\n{text}")


def _finish(lines: list[str], aligned: bool) -> str:
    text = "\n".join(lines) + "\n"
    return text.expandtabs(8) if aligned else text


@given(topologies(max_gpus=8), st.booleans())
def test_render_then_parse_is_identity(topology: NodeTopology, aligned: bool) -> None:
    assert parse_smi(render_smi(topology, aligned=aligned)) == topology


@given(topologies(max_gpus=8), st.booleans(), st.data())
def test_dropping_a_gpu_row_is_an_error(
    topology: NodeTopology, aligned: bool, data: st.DataObject
) -> None:
    lines = render_smi(topology).splitlines()
    row = data.draw(st.integers(0, topology.size - 1))
    del lines[1 + row]
    err = _rejected(_finish(lines, aligned))
    assert err.line == 2 + row  # the next row is out of order, or the last row is missing


@given(topologies(max_gpus=8), st.booleans(), st.data())
def test_truncating_within_the_rows_is_an_error(
    topology: NodeTopology, aligned: bool, data: st.DataObject
) -> None:
    lines = render_smi(topology).splitlines()
    keep = data.draw(st.integers(0, topology.size))  # the header and fewer than all GPU rows
    text = _finish(lines[:keep], aligned) if keep else ""
    err = _rejected(text)
    if keep:
        assert err.line == keep + 1
        assert f"GPU{topology.size - 1}" in err.reason and "missing" in err.reason


@given(topologies(max_gpus=8), st.booleans(), st.data())
def test_changing_one_cell_is_an_error(
    topology: NodeTopology, aligned: bool, data: st.DataObject
) -> None:
    n = topology.size
    lines = render_smi(topology).splitlines()
    i = data.draw(st.integers(0, n - 1), label="row")
    j = data.draw(st.integers(0, n - 1), label="column")
    old = lines[1 + i].split("\t")
    # Off the diagonal the mirror cell keeps the old code, so any other code breaks symmetry;
    # on the diagonal anything but X is wrong, and X anywhere else is wrong.
    current = old[1 + j].strip()
    new = data.draw(st.sampled_from([c for c in (*LINK_CODES, "X") if c != current]))
    old[1 + j] = new
    lines[1 + i] = "\t".join(old)
    err = _rejected(_finish(lines, aligned))
    # A wrong diagonal or a misplaced X is seen in its own row, asymmetry in the later row.
    assert err.line == 2 + (i if i == j or new == "X" else max(i, j))


@given(topologies(max_gpus=8), st.booleans(), st.data())
def test_deleting_one_field_of_a_row_is_an_error(
    topology: NodeTopology, aligned: bool, data: st.DataObject
) -> None:
    lines = render_smi(topology).splitlines()
    i = data.draw(st.integers(0, topology.size - 1), label="row")
    fields = lines[1 + i].split("\t")
    del fields[data.draw(st.integers(0, len(fields) - 1), label="field")]
    lines[1 + i] = "\t".join(fields)
    err = _rejected(_finish(lines, aligned))
    # Deleting the label ends the table there, so the rows from GPU{i} on are missing.
    assert err.line == 2 + i


TOKENS = st.sampled_from(
    [
        *("GPU0", "GPU1", "GPU2", "NIC0", "X", " X ", "NV4", "NV0", "PIX", "SYS", "N/A", "0"),
        *("-1", "0-15", "CPU", "Affinity", "NUMA", "CPU Affinity", "NUMA Affinity", "Legend:", ""),
    ]
)
SEPARATORS = st.sampled_from(["\t", " ", "  ", "\n", "\t\t", "\r\n"])


@given(st.lists(st.tuples(TOKENS, SEPARATORS), max_size=60))
def test_any_text_parses_or_raises_a_topology_error(pieces: list[tuple[str, str]]) -> None:
    text = "".join(token + sep for token, sep in pieces)
    try:
        topology = parse_smi(text)
    except TopologyError:
        return
    try:
        text = render_smi(topology)
    except TopologyError:  # a CPU list read verbatim from a tab field may hold a space
        return
    assert parse_smi(text) == topology


@given(st.text(max_size=300))
def test_arbitrary_text_never_raises_anything_else(text: str) -> None:
    with contextlib.suppress(TopologyError):
        parse_smi(text)
