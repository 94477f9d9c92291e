"""What text the wire may carry: every string a client sends must survive the store and come back.

A JSON document may spell a lone UTF-16 surrogate (`"\\ud800"`); Python reads it into a `str`
that no UTF-8 encoder takes, so a job holding one could be stored (as an escape) but never read
back by the store's own JSON reader, nor answered. Such text is refused on the way in, with the
path of the value that holds it, and a document nested deeper than any spec needs is refused
before anything recurses into it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# A job spec is at most three levels deep (spec -> elastic -> min); lists and maps a client
# sends are a few more at most. Far below Python's recursion limit.
MAX_DEPTH = 16

Path = tuple[str | int, ...]


def first_surrogate(text: str) -> int | None:
    """The index of the first lone surrogate in `text`, or None when UTF-8 can hold it all."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as err:
        return err.start
    return None


def faults(data: Any) -> Iterator[tuple[Path, str]]:
    """Each value of a decoded JSON document that cannot be stored: (its path, why), in
    document order. Iterative, so that no depth makes it recurse; a map's key that is at
    fault is named as pydantic names keys (`[key]` after it)."""
    stack: list[tuple[Path, Any]] = [((), data)]
    while stack:
        path, value = stack.pop()
        if len(path) > MAX_DEPTH:
            yield path[:MAX_DEPTH], f"nested more than {MAX_DEPTH} levels deep"
            continue
        if isinstance(value, str):
            at = first_surrogate(value)
            if at is not None:
                yield path, _surrogate(value, at)
        elif isinstance(value, dict):
            children: list[tuple[Path, Any]] = []
            for key, item in value.items():
                if isinstance(key, str) and first_surrogate(key) is not None:
                    # Named escaped: the answer that names it must itself be text.
                    children.append(((*path, escaped(key), "[key]"), key))
                    continue
                children.append(((*path, key), item))
            stack.extend(reversed(children))
        elif isinstance(value, list | tuple):
            stack.extend(((*path, i), item) for i, item in reversed(list(enumerate(value))))


def escaped(text: str) -> str:
    """`text` with each lone surrogate written as its escape (`\\ud800`)."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _surrogate(text: str, at: int) -> str:
    code = f"U+{ord(text[at]):04X}"
    return (
        f"holds a lone UTF-16 surrogate ({code}) at character {at}: it is not text UTF-8 can "
        "hold, so it could be neither stored nor read back"
    )


def scrubbed(value: Any) -> Any:
    """`value` (decoded JSON) with each lone surrogate in its text made U+FFFD, the character
    that stands for text that could not be read."""
    if isinstance(value, str):
        if first_surrogate(value) is None:
            return value
        return "".join("\ufffd" if 0xD800 <= ord(c) <= 0xDFFF else c for c in value)
    if isinstance(value, dict):
        return {scrubbed(key): scrubbed(item) for key, item in value.items()}
    if isinstance(value, list):
        return [scrubbed(item) for item in value]
    return value
