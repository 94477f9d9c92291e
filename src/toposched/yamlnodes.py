"""How many nodes and characters a YAML document stands for once its aliases are expanded, and
how deep it nests, found without expanding or recursing: a bomb is refused before it goes off."""

from __future__ import annotations

from collections.abc import Iterator

import yaml

# A job spec, a topology or a cluster file of 10,000 machines is well under this; `a: &a [*a,
# *a]` or nine aliases of nine (a "billion laughs") are far over it.
MAX_NODES = 200_000
# Counting nodes alone let a 1.1 MB file of long texts, each aliased many times, expand to 4 GiB.
MAX_CHARS = 32 * 2**20
# PyYAML composes (and Python builds) nested values by recursion: 3,000 levels ended in a
# RecursionError's traceback. No job, topology or cluster file nests a tenth of this.
MAX_DEPTH = 100


class TooLarge(ValueError):
    """The document's aliases expand without bound (a cycle) or past the limit."""

    def __init__(self, message: str, line: int | None) -> None:
        super().__init__(message)
        self.line = line


def _children(node: yaml.Node) -> Iterator[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            yield key
            yield value
    elif isinstance(node, yaml.SequenceNode):
        yield from node.value


def check_depth(text: str, limit: int = MAX_DEPTH) -> None:
    """TooLarge if `text` nests lists and mappings more than `limit` deep; read as a stream
    of parse events (PyYAML's parser keeps its own stack), so before anything recurses. A
    text that is not valid YAML raises yaml.YAMLError, as composing it would."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > limit:
                mark = event.start_mark
                raise TooLarge(
                    f"it nests lists and mappings more than {limit} deep: refused unread",
                    None if mark is None else mark.line + 1,
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def check_expansion(root: yaml.Node, limit: int = MAX_NODES, chars: int = MAX_CHARS) -> int:
    """The expanded size of `root` (one per node, an alias counted as all it stands for);
    TooLarge if an alias refers to a node that holds it, or the size passes `limit`, or the
    text of its scalars, expanded, passes `chars` characters.

    Each distinct node is visited once (a depth-first walk with the sizes of finished nodes
    remembered), so the time is linear in the document however its aliases multiply."""
    sizes: dict[int, int] = {}
    texts: dict[int, int] = {}  # the characters of each finished node's scalars, expanded
    open_: set[int] = set()  # the nodes on the walk's current path
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, finished = stack.pop()
        key = id(node)
        if finished:
            open_.discard(key)
            size = 1 + sum(sizes[id(child)] for child in _children(node))
            if size > limit:
                raise TooLarge(
                    f"its aliases expand to more than {limit:,} values: refused unread",
                    node.start_mark.line + 1,
                )
            text = sum(texts[id(child)] for child in _children(node))
            if isinstance(node, yaml.ScalarNode):
                text = len(node.value)
            if text > chars:
                raise TooLarge(
                    f"its aliases expand to more than {chars:,} characters: refused unread",
                    node.start_mark.line + 1,
                )
            sizes[key] = size
            texts[key] = text
            continue
        if key in sizes:
            continue
        open_.add(key)
        stack.append((node, True))
        for child in _children(node):
            if id(child) in open_:
                raise TooLarge(
                    "an alias refers to a value that holds it: it would expand for ever",
                    child.start_mark.line + 1,
                )
            if id(child) not in sizes:
                stack.append((child, False))
    return sizes[id(root)]
