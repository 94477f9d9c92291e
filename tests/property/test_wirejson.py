"""The one reader of request bodies (issue 33): a fault put at any value or key of any JSON
document is refused, and named by the path it was put at."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toposched.common.wiretext import MAX_DEPTH
from toposched.server.wirejson import BodyError, read_json

MARK = "@@fault@@"
# Keys and text of any code point but lone surrogates (the faults put in are the only ones).
TEXT = st.text(st.characters(blacklist_categories=["Cs"]), max_size=6)
LEAVES = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.floats(-1e9, 1e9) | TEXT
DOCUMENTS = st.recursive(
    LEAVES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=20,
)
# What a client may send that the reader refuses, written as it appears in the text: as a
# value, and (the strings) as a key.
VALUE_FAULTS = ["NaN", "Infinity", "-Infinity", '"a\\ud800b"', '"\\udfff"', "tru", "01"]
KEY_FAULTS = ['"k\\ud800"', '"\\udc00x"']


def places(document: Any, path: tuple[str | int, ...] = ()) -> list[tuple[str | int, ...]]:
    """Every path of a value in `document` (itself included)."""
    found = [path]
    if isinstance(document, dict):
        for key, value in document.items():
            found += places(value, (*path, key))
    elif isinstance(document, list):
        for i, value in enumerate(document):
            found += places(value, (*path, i))
    return found


def put(document: Any, path: tuple[str | int, ...], value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(document, dict):
        return {k: put(v, rest, value) if k == head else v for k, v in document.items()}
    return [put(v, rest, value) if i == head else v for i, v in enumerate(document)]


@settings(max_examples=400, deadline=None)
@given(document=DOCUMENTS, data=st.data(), fault=st.sampled_from(VALUE_FAULTS))
def test_a_fault_in_any_value_is_named_by_its_path(document: Any, data: Any, fault: str) -> None:
    where = data.draw(st.sampled_from(places(document)))
    raw = json.dumps(put(document, where, MARK)).replace(json.dumps(MARK), fault, 1).encode()
    with pytest.raises(BodyError) as refused:
        read_json(raw)
    assert refused.value.path == where[:MAX_DEPTH]
    assert refused.value.entry()["loc"] == ("body", *where[:MAX_DEPTH])


@settings(max_examples=300, deadline=None)
@given(document=DOCUMENTS, data=st.data(), fault=st.sampled_from(KEY_FAULTS))
def test_a_fault_in_any_key_is_named_as_pydantic_names_keys(
    document: Any, data: Any, fault: str
) -> None:
    maps = [p for p in places(document) if isinstance(put_get(document, p), dict)]
    where = data.draw(st.sampled_from(maps)) if maps else ()
    if not maps:
        document, where = {}, ()
    held = dict(put_get(document, where))
    held[MARK] = 1
    raw = json.dumps(put(document, where, held)).replace(json.dumps(MARK), fault, 1).encode()
    with pytest.raises(BodyError) as refused:
        read_json(raw)
    assert refused.value.path == (*where, fault.strip('"'), "[key]")[:MAX_DEPTH]


def put_get(document: Any, path: tuple[str | int, ...]) -> Any:
    for part in path:
        document = document[part]
    return document


@pytest.mark.parametrize(
    ("raw", "path", "said"),
    [
        (b'{"command": ["echo", "a\\ud800"]}', ("command", 1), "lone UTF-16 surrogate"),
        (b'{"limit_s": NaN}', ("limit_s",), "finite"),
        (b'{"checkpoint": {"grace_s": -Infinity}}', ("checkpoint", "grace_s"), "finite"),
        # A key that cannot be decoded is named as written.
        (b'{"env": {"A": "x", "B\\"\\udfff": 1}}', ("env", 'B\\"\\udfff', "[key]"), "surrogate"),
        # Bytes that are not UTF-8 (a surrogate's among them): orjson checks the whole text
        # first, so no path.
        (b'{"name": "\xed\xa0\x80"}', (), "not UTF-8"),
        (b'{"name": "\xff"}', (), "not UTF-8"),
        (b"[" * 2000 + b"]" * 2000, (0,) * MAX_DEPTH, "nested more than"),
        (b'{"command": ["true"]} x', (), "JSON decode error"),
    ],
)
def test_what_the_reader_says(raw: bytes, path: tuple[Any, ...], said: str) -> None:
    with pytest.raises(BodyError) as refused:
        read_json(raw)
    assert refused.value.path == path
    assert said in refused.value.why


def test_what_the_reader_takes_is_what_orjson_reads() -> None:
    assert read_json(b'{"command": ["a\\ud83d\\ude00"], "n": 1}') == {
        "command": ["a\U0001f600"],
        "n": 1,
    }
