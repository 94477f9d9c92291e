"""How many nodes a composed YAML document stands for once its aliases are expanded, found in
time linear in the document, so that an alias bomb is refused before anything expands it."""

from __future__ import annotations

from collections.abc import Iterator

import yaml

# A job spec, a topology or a cluster file of 10,000 machines is well under this; `a: &a [*a,
# *a]` or nine aliases of nine (a "billion laughs") are far over it.
MAX_NODES = 200_000


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


def check_expansion(root: yaml.Node, limit: int = MAX_NODES) -> int:
    """The expanded size of `root` (one per node, an alias counted as all it stands for);
    TooLarge if an alias refers to a node that holds it, or the size passes `limit`.

    Each distinct node is visited once (a depth-first walk with the sizes of finished nodes
    remembered), so the time is linear in the document however its aliases multiply."""
    sizes: dict[int, int] = {}
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
            sizes[key] = size
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
