"""The wire's text rule against the store's own encoder: what `faults` lets through, orjson
can write and read back unchanged; what it refuses, orjson cannot write (issue 33)."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.common.wiretext import MAX_DEPTH, faults, scrubbed

# Text of any code point, lone surrogates included (hypothesis draws them from category Cs).
TEXT = st.text(max_size=8)
DOCUMENTS = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(DOCUMENTS)
def test_what_passes_is_stored_and_read_back_exactly(document: Any) -> None:
    # Documents deeper than MAX_DEPTH are the other test's: here, text alone.
    found = [(path, why) for path, why in faults(document) if "surrogate" in why]
    try:
        written = orjson.dumps(document)
    except orjson.JSONEncodeError:
        assert found, "refused by the store's encoder, let through by the wire's rule"
        assert scrubbed(document) != document
        assert not list(faults(scrubbed(document)))
        return
    assert not found, found
    assert orjson.loads(written) == document


@given(st.integers(MAX_DEPTH + 1, 5000))
def test_any_depth_is_refused_without_recursing(depth: int) -> None:
    document: Any = "leaf"
    for _ in range(depth):
        document = [document]
    assert [path for path, _ in faults(document)] == [(0,) * MAX_DEPTH]
