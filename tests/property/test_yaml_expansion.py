"""The expanded size of a YAML document (values and characters), found from its nodes in linear
time, against a count of the data the document builds (every alias expanded), on documents with
shared values; and the bounds on size and nesting in topology and cluster files."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.topology.cluster import ClusterError
from toposched.topology.clusterfile import parse_cluster_yaml
from toposched.topology.errors import TopologyError
from toposched.topology.yamlfile import parse_yaml
from toposched.yamlnodes import TooLarge, check_expansion


def brute_count(value: Any) -> int:
    """Nodes of `value` as a tree: what expanding every alias would make."""
    if isinstance(value, dict):
        return 1 + sum(brute_count(k) + brute_count(v) for k, v in value.items())
    if isinstance(value, list):
        return 1 + sum(brute_count(item) for item in value)
    return 1


def brute_chars(value: Any) -> int:
    """Characters of the scalars of `value` as a tree, as written (`7` is one)."""
    if isinstance(value, dict):
        return sum(brute_chars(k) + brute_chars(v) for k, v in value.items())
    if isinstance(value, list):
        return sum(brute_chars(item) for item in value)
    return len(str(value))


@st.composite
def shared_documents(draw: st.DrawFn) -> Any:
    """Nested lists and maps that reuse earlier values by reference: the dumper writes those
    as anchors and aliases."""
    made: list[Any] = [draw(st.integers(0, 9) | st.text("ab", max_size=3))]
    for _ in range(draw(st.integers(1, 12))):
        parts = draw(st.lists(st.sampled_from(made), min_size=1, max_size=4))
        if draw(st.booleans()):
            made.append(list(parts))
        else:
            made.append({f"k{i}": part for i, part in enumerate(parts)})
    return made[-1]


@settings(max_examples=200, deadline=None)
@given(shared_documents())
def test_the_expanded_size_is_the_count_of_the_data_built(document: Any) -> None:
    text = yaml.safe_dump(document)
    root = yaml.compose(text, Loader=yaml.SafeLoader)
    expected = brute_count(yaml.safe_load(text))
    assert check_expansion(root, limit=10**9) == expected
    if expected > 1:
        with pytest.raises(TooLarge):
            check_expansion(root, limit=expected - 1)
    chars = brute_chars(yaml.safe_load(text))
    check_expansion(root, limit=10**9, chars=chars)
    if chars:
        with pytest.raises(TooLarge, match="characters"):
            check_expansion(root, limit=10**9, chars=chars - 1)


BOMB = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)
)


@pytest.mark.parametrize("text", [BOMB, "links: &a [*a]\n"], ids=["nine-of-nine", "cycle"])
def test_topology_and_cluster_files_refuse_alias_bombs(text: str) -> None:
    with pytest.raises(TopologyError, match="alias"):
        parse_yaml(text, source="t.yaml")
    with pytest.raises(ClusterError, match="alias"):
        parse_cluster_yaml(text, source="c.yaml")


LONG_TEXT = f"a: &t {'x' * 100_000}\nb: [{', '.join(['*t'] * 400)}]\n"
DEEP = "a: " + "[" * 3000 + "]" * 3000 + "\n"


@pytest.mark.parametrize(
    ("text", "said"),
    [(LONG_TEXT, "more than 33,554,432 characters"), (DEEP, "more than 100 deep")],
    ids=["long-text", "deep"],
)
def test_topology_and_cluster_files_bound_expanded_text_and_nesting(text: str, said: str) -> None:
    # The deep one ended in a RecursionError's traceback; the long one built 40 MB of text.
    with pytest.raises(TopologyError, match=said):
        parse_yaml(text, source="t.yaml")
    with pytest.raises(ClusterError, match=said):
        parse_cluster_yaml(text, source="c.yaml")
