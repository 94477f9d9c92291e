"""Random cluster shorthands: node counts, unique names, rack sizes and the YAML round trip."""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.topology import PRESETS, preset
from toposched.topology.clusterfile import dump_cluster_yaml, parse_cluster_yaml, parse_shorthand

# (count, preset, nodes per rack or None, readable form?)
Group = tuple[int, str, int | None, bool]

groups = st.tuples(
    st.integers(1, 20),
    st.sampled_from(sorted(PRESETS)),
    st.none() | st.integers(1, 8),
    st.booleans(),
)


def render(group: Group) -> str:
    count, name, per_rack, readable = group
    if readable:
        return f"{count} x {name}" + ("" if per_rack is None else f" in racks of {per_rack}")
    return f"{count}*{name}" + ("" if per_rack is None else f"/{per_rack}")


@settings(max_examples=200, deadline=None)
@given(st.lists(groups, min_size=1, max_size=3), st.sampled_from(["+", " + "]))
def test_random_shorthands(spec_groups: list[Group], joiner: str) -> None:
    cluster = parse_shorthand(joiner.join(render(g) for g in spec_groups))
    assert len(cluster.nodes) == sum(g[0] for g in spec_groups)
    assert len({n.name for n in cluster.nodes}) == len(cluster.nodes)
    assert {n.pod for n in cluster.nodes} == {"pod-0"}
    rack_sizes = Counter(n.rack for n in cluster.nodes)
    start = 0
    for count, name, per_rack, _ in spec_groups:
        members = cluster.nodes[start : start + count]
        start += count
        assert all(n.topology is preset(name) for n in members)
        racks = {n.rack for n in members}
        # each group has racks of its own, of at most `per_rack` nodes (one rack without it)
        assert all(rack_sizes[r] <= (per_rack or count) for r in racks)
        assert len(racks) == -(-count // (per_rack or count))
    assert parse_cluster_yaml(dump_cluster_yaml(cluster)) == cluster
