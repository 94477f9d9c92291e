"""The YAML job spec (`toposched submit -f job.yaml`): the fields of the API's JobSubmit.

    name: resnet50-4gpu          # optional: the server makes one up
    queue: default               # optional: the caller's team
    workers: 4
    gpus: 1                      # per worker; 0: CPUs and memory alone (give cpus)
    kind: tensorflow             # pytorch (the default) | tensorflow | mpi, or Arena's tfjob ...
    ps: 2                        # tensorflow's parameter servers (no GPU)
    locality: node               # node | rack | pod | any, or node,rack@600
    selector: {gpu: v100}        # only nodes with every one of these labels
    gpu_type: [V100, A100]       # the GPU types it accepts (default any); or one: V100
    mixed_types: false           # true: one gang may span GPU types
    gputopology: true            # false: the lowest free GPU indices, as plain GPU counting
    image: nvcr.io/nvidia/pytorch:24.05-py3   # run in this image (podman or docker)
    model: vgg16                 # what it trains (`toposched perf --list`): its predicted speed
    gpu_memory: 32Gi             # the least memory each GPU must have
    gpu_fraction: 0.25           # a share of one GPU (one worker of one GPU), 0 < F <= 1
    gpu_memory_share: 10Gi       # a share of its memory; gpu_memory_action: flag | stop
    cpus: 8                      # per worker: 8, 2.5 or 500m
    memory: 64Gi                 # per worker: 64Gi, 512Mi, 64G or bytes
    elastic: {min: 2, max: 4}    # or "2:4"
    checkpoint: {signal: SIGUSR1, grace_s: 60, interval_s: 1800}
    idle: {after: 30m, below: 5, action: stop}   # give the GPUs back when they sit idle
    restart: on-failure          # never | on-failure
    max_restarts: 3
    limit_s: 3600
    command: python train.py --model resnet50   # a string (split as a shell would, as one
                                                # word after `submit --` is) or a list
    env: {NCCL_DEBUG: WARN}
    workdir: /data/runs
    command_visible: false       # true: other teams may see the command (hidden from them)
    interactive: false           # true: a session with a port of its own (docs/idle.md)
    after: [prep, data:any]      # run after these jobs: NAME or NAME:ok once it has succeeded,
                                 # NAME:any once it has ended; or one: prep

Types are checked here, with the file and line of each mistake; ranges and names are the
server's to check (its 422 names the field, and `JobFile.lines` maps it back to a line).
"""

from __future__ import annotations

import difflib
import math
import re
import shlex
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from toposched.common import jobfields
from toposched.common.frameworks import KindError, kind_of
from toposched.common.jobfields import JobField
from toposched.topology.resources import QuantityError, parse_cpus, parse_memory
from toposched.yamlnodes import TooLarge, check_depth, check_expansion

INT = "tag:yaml.org,2002:int"
FLOAT = "tag:yaml.org,2002:float"
BOOL = "tag:yaml.org,2002:bool"
NULL = "tag:yaml.org,2002:null"
STR = "tag:yaml.org,2002:str"
# The tags plain YAML data resolves to; any other (`!!python/object/apply:...`, `!!binary`, a
# local `!tag`) is refused, not read as text: `topology parse` refuses them too.
PLAIN_TAGS = frozenset(
    f"tag:yaml.org,2002:{kind}"
    for kind in ("str", "int", "float", "bool", "null", "seq", "map", "timestamp")
)
# A number YAML 1.1 leaves as text (`1e3`), in the digits 0-9 only: float() would also read
# `\u0661\u0662` (Arabic-Indic digits) or `1_0`.
PLAIN_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?", re.ASCII)
KIND = {INT: "a whole number", FLOAT: "a number", BOOL: "a boolean", NULL: "nothing (null)"}


class JobFileError(ValueError):
    """A job file that cannot be used as written: names the file, the line and the field."""

    def __init__(self, path: str, line: int | None, field: str | None, problem: str) -> None:
        self.path = path
        self.line = line
        self.field = field
        self.problem = problem
        where = path if line is None else f"{path}:{line}"
        super().__init__(f"{where}: {field}: {problem}" if field else f"{where}: {problem}")


@dataclass
class JobFile:
    """A parsed job file: `spec` is a JobSubmit body (only the fields the file gives); `lines`
    maps each field, dotted for nested ones (`elastic.min`), to its 1-based line."""

    path: str
    spec: dict[str, Any]
    lines: dict[str, int] = field(default_factory=dict)

    def line_of(self, loc: str) -> int | None:
        """The line of an API error location (`body.elastic.min`), or of its nearest parent."""
        parts = loc.split(".")
        if parts and parts[0] == "body":
            parts = parts[1:]
        while parts:
            line = self.lines.get(".".join(parts))
            if line is not None:
                return line
            parts = parts[:-1]
        return None


# ---------------------------------------------------------------------- helpers shared with flags


def split_command(text: str) -> list[str]:
    """A command line split as a POSIX shell would (quotes kept together); ValueError if the
    quoting is unbalanced or nothing is left."""
    try:
        words = shlex.split(text)
    except ValueError as err:
        raise ValueError(f"cannot split {text!r} into words: {err}") from None
    if not words:
        raise ValueError("the command is empty")
    return words


def parse_elastic(text: str) -> dict[str, int]:
    """`MIN:MAX` (for example `2:8`) as the API's {"min", "max"}."""
    low, sep, high = text.partition(":")
    try:
        if not sep:
            raise ValueError
        return {"min": int(low), "max": int(high)}
    except ValueError:
        raise ValueError(f"expected MIN:MAX workers, such as 2:8, got {text!r}") from None


def parse_env_pairs(pairs: Iterable[str]) -> dict[str, str]:
    """`KEY=VALUE` strings as a dict; a later KEY wins."""
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"expected KEY=VALUE, got {pair!r}")
        env[key] = value
    return env


# The fields a command line's flags add to key by key.
BY_KEY = frozenset(
    field.name for field in jobfields.FIELDS if field.type in (jobfields.LABELS, jobfields.RECORD)
)


def merge_spec(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """The file's spec with the command line's fields on top: a mapping (`env`, `selector`)
    or record (`checkpoint`, `idle`) is merged key by key, every other field given replaces
    the file's."""
    merged = dict(base)
    for key, value in overrides.items():
        if key in BY_KEY and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


# ---------------------------------------------------------------------- the file


def load_job_file(path: str | Path) -> JobFile:
    """Read and check a job file; JobFileError names what is wrong and where."""
    name = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise JobFileError(name, None, None, f"not UTF-8 text ({err.reason})") from None
    except OSError as err:
        raise JobFileError(name, None, None, f"cannot read: {err.strerror or err}") from None
    return parse_job_text(text, name)


def parse_job_text(
    text: str, path: str = "<job file>", fields: dict[str, tuple[Reader, bool]] | None = None
) -> JobFile:
    """Check the YAML text of a job file; `path` names it in errors; `fields`: those it may
    give (default: a job's, FIELDS)."""
    try:
        check_depth(text)
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except TooLarge as err:
        raise JobFileError(path, err.line, None, str(err)) from None
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark is not None else None
        problem = " ".join(str(p) for p in (err.context, err.problem) if p)
        raise JobFileError(path, line, None, f"not valid YAML: {problem}") from None
    except yaml.YAMLError as err:
        raise JobFileError(path, None, None, f"not valid YAML: {err}") from None
    if root is None or (isinstance(root, ScalarNode) and root.tag == NULL):
        raise JobFileError(path, None, None, "is empty: a job file is a mapping of fields")
    try:
        check_expansion(root)
    except TooLarge as err:
        raise JobFileError(path, err.line, None, str(err)) from None
    if not isinstance(root, MappingNode):
        raise JobFileError(
            path,
            _line(root),
            None,
            f"a job file is a mapping of fields (command: ..., gpus: ...), not {_kind(root)}",
        )
    _check_tags(root, path)
    return _Reader(path).job(root, FIELDS if fields is None else fields)


def _check_tags(root: MappingNode, path: str) -> None:
    """Refuse any node under a field that carries a tag plain data does not resolve to."""
    if root.tag not in PLAIN_TAGS:
        raise JobFileError(path, _line(root), None, _tag_problem(root))
    for key_node, value in root.value:
        field = str(key_node.value) if isinstance(key_node, ScalarNode) else None
        for node in _nodes(key_node, value):
            if node.tag not in PLAIN_TAGS:
                raise JobFileError(path, _line(node), field, _tag_problem(node))


def _tag_problem(node: Node) -> str:
    tag = str(node.tag).replace("tag:yaml.org,2002:", "!!")
    return f"the YAML tag {tag} is not allowed: a job file holds plain data"


def _nodes(*nodes: Node) -> Iterable[Node]:
    """Every node under `nodes`, them included (a job file is a tree: no anchors loop)."""
    todo = list(nodes)
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, SequenceNode):
            todo.extend(node.value)
        elif isinstance(node, MappingNode):
            todo.extend(part for pair in node.value for part in pair)


def _line(node: Node) -> int:
    return int(node.start_mark.line) + 1


def _kind(node: Node) -> str:
    if isinstance(node, MappingNode):
        return "a mapping"
    if isinstance(node, SequenceNode):
        return "a list"
    assert isinstance(node, ScalarNode)
    if node.tag == NULL:
        return KIND[NULL]
    if node.tag in KIND:
        return f"{KIND[node.tag]} ({node.value})"
    return f"the text {node.value!r}"


class _Reader:
    def __init__(self, path: str) -> None:
        self.path = path
        self.lines: dict[str, int] = {}

    def fail(self, node: Node, name: str, problem: str) -> JobFileError:
        return JobFileError(self.path, _line(node), name, problem)

    def items(
        self, node: MappingNode, prefix: str, known: Iterable[str]
    ) -> Iterable[tuple[str, Node]]:
        """(name, value node) per key, rejecting duplicate and unknown keys."""
        seen: dict[str, int] = {}
        known = list(known)
        for key_node, value in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag == NULL:
                where = prefix.rstrip(".") or None
                raise JobFileError(
                    self.path,
                    _line(key_node),
                    where,
                    f"a field name must be text, not {_kind(key_node)}",
                )
            key = str(key_node.value)
            name = prefix + key
            if key in seen:
                raise self.fail(key_node, name, f"given twice (first on line {seen[key]})")
            if key not in known:
                hint = difflib.get_close_matches(key, known, n=1)
                also = f"did you mean {hint[0]!r}? " if hint else ""
                raise self.fail(
                    key_node, name, f"unknown field; {also}known fields: {', '.join(known)}"
                )
            seen[key] = _line(key_node)
            self.lines[name] = _line(value)
            yield key, value

    def job(self, root: MappingNode, fields: dict[str, tuple[Reader, bool]]) -> JobFile:
        spec: dict[str, Any] = {}
        for key, node in self.items(root, "", fields):
            read, nullable = fields[key]
            if isinstance(node, ScalarNode) and node.tag == NULL:
                if nullable:
                    continue  # the same as leaving the field out
                raise self.fail(node, key, "needs a value")
            spec[key] = read(self, node, key)
        return JobFile(self.path, spec, self.lines)

    # ------------------------------------------------------------------ one reader per type

    def scalar(self, node: Node, name: str, what: str) -> ScalarNode:
        if not isinstance(node, ScalarNode) or node.tag == NULL:
            raise self.fail(node, name, f"expected {what}, got {_kind(node)}")
        return node

    def text(self, node: Node, name: str) -> str:
        # A scalar's text as written: `name: 2024` is the name "2024", not a number.
        return str(self.scalar(node, name, "text").value)

    def integer(self, node: Node, name: str) -> int:
        scalar = self.scalar(node, name, "a whole number")
        if scalar.tag != INT:
            raise self.fail(node, name, f"expected a whole number, got {_kind(node)}")
        value: int = _construct(scalar)
        self._not_minus_zero(scalar, name, "a whole number")
        return value

    def _not_minus_zero(self, scalar: ScalarNode, name: str, what: str) -> None:
        """`-0` reads as 0 where 0 is allowed: a sign that says nothing is likely a mistake."""
        if scalar.value.startswith("-") and float(_construct(scalar)) == 0:
            raise self.fail(scalar, name, f"expected {what}, got {scalar.value}: write 0")

    def number(self, node: Node, name: str) -> float:
        scalar = self.scalar(node, name, "a number")
        if scalar.tag in (INT, FLOAT):
            value = float(_construct(scalar))
            self._not_minus_zero(scalar, name, "a number")
        else:
            # YAML 1.1 reads a plain 1e3 as text; a quoted "60" stays text.
            try:
                if scalar.tag != STR or scalar.style is not None:
                    raise ValueError
                if not PLAIN_NUMBER.fullmatch(scalar.value):
                    raise ValueError
                value = float(scalar.value)
            except ValueError:
                raise self.fail(node, name, f"expected a number, got {_kind(node)}") from None
        if not math.isfinite(value):
            raise self.fail(node, name, f"expected a finite number, got {scalar.value}")
        return value

    def boolean(self, node: Node, name: str) -> bool:
        scalar = self.scalar(node, name, "true or false")
        if scalar.tag != BOOL:
            raise self.fail(node, name, f"expected true or false, got {_kind(node)}")
        return bool(_construct(scalar))

    def kind(self, node: Node, name: str) -> str:
        value = self.text(node, name)
        try:
            kind_of(value)
        except KindError as err:
            raise self.fail(node, name, str(err)) from None
        return value  # as written: the server names it by its own name

    def choice(self, node: Node, name: str) -> str:
        value = self.text(node, name)
        choices = jobfields.BY_NAME[name].choices
        if value not in choices:
            raise self.fail(node, name, f"expected one of {', '.join(choices)}, got {value!r}")
        return value

    def names(self, node: Node, name: str) -> list[str]:
        """A list of text, or one as plain text."""
        if isinstance(node, ScalarNode) and node.tag != NULL:
            return [self.text(node, name)]
        if not isinstance(node, SequenceNode):
            raise self.fail(node, name, f"expected a list of text, got {_kind(node)}")
        return [self.text(item, f"{name}[{i}]") for i, item in enumerate(node.value)]

    def command(self, node: Node, name: str) -> list[str]:
        if isinstance(node, SequenceNode):
            if not node.value:
                raise self.fail(node, name, "the command is empty")
            words = []
            for i, item in enumerate(node.value):
                words.append(self.text(item, f"{name}[{i}]"))
            return words
        if isinstance(node, ScalarNode) and node.tag != NULL:
            try:
                return split_command(str(node.value))
            except ValueError as err:
                raise self.fail(node, name, str(err)) from None
        raise self.fail(node, name, f"expected a list of words or a string, got {_kind(node)}")

    def cpus(self, node: Node, name: str) -> str | int | float:
        return self._quantity(node, name, parse_cpus)

    def memory(self, node: Node, name: str) -> str | int | float:
        return self._quantity(node, name, parse_memory)

    def _quantity(
        self, node: Node, name: str, parse: Callable[[object, str], int]
    ) -> str | int | float:
        """A number or a Kubernetes quantity, checked here so that the file's line is named."""
        scalar = self.scalar(node, name, "a quantity")
        value: str | int | float = (
            _construct(scalar) if scalar.tag in (INT, FLOAT) else str(scalar.value)
        )
        try:
            parse(value, name)
        except QuantityError as err:
            raise self.fail(node, name, str(err).removeprefix(f"{name} ")) from None
        return value

    def gpu_types(self, node: Node, name: str) -> list[str]:
        if isinstance(node, ScalarNode) and node.tag != NULL:
            return [self.text(node, name)]
        if not isinstance(node, SequenceNode):
            raise self.fail(node, name, f"expected a list of GPU types, got {_kind(node)}")
        if not node.value:
            raise self.fail(
                node, name, "give at least one GPU type (e.g. [V100, A100]), or leave it out"
            )
        return [self.text(item, f"{name}[{i}]") for i, item in enumerate(node.value)]

    def after(self, node: Node, name: str) -> list[str]:
        """`prep`, or a list of `NAME`, `NAME:ok`, `NAME:any` (the server checks the names)."""
        if isinstance(node, ScalarNode) and node.tag != NULL:
            return [self.text(node, name)]
        if not isinstance(node, SequenceNode):
            raise self.fail(
                node, name, f"expected a list of jobs (NAME or NAME:ok|any), got {_kind(node)}"
            )
        return [self.text(item, f"{name}[{i}]") for i, item in enumerate(node.value)]

    def env(self, node: Node, name: str) -> dict[str, str]:
        if not isinstance(node, MappingNode):
            raise self.fail(node, name, f"expected a mapping of NAME: value, got {_kind(node)}")
        env: dict[str, str] = {}
        seen: dict[str, int] = {}
        for key_node, value in node.value:
            key = self.text(key_node, name)
            if key in seen:
                raise self.fail(
                    key_node, f"{name}.{key}", f"given twice (first on line {seen[key]})"
                )
            seen[key] = _line(key_node)
            if isinstance(value, ScalarNode) and value.tag == NULL:
                raise self.fail(value, f"{name}.{key}", "needs a value (write '' for an empty one)")
            env[key] = self.text(value, f"{name}.{key}")
            self.lines[f"{name}.{key}"] = _line(value)
        return env

    def elastic(self, node: Node, name: str) -> dict[str, int]:
        if isinstance(node, ScalarNode) and node.tag != NULL:
            # The text as written: YAML 1.1 reads a plain 2:4 as a base-60 number.
            try:
                return parse_elastic(str(node.value))
            except ValueError as err:
                raise self.fail(node, name, str(err)) from None
        if not isinstance(node, MappingNode):
            raise self.fail(
                node, name, f"expected {{min: N, max: M}} or 'MIN:MAX', got {_kind(node)}"
            )
        out = {
            key: self.integer(value, f"{name}.{key}")
            for key, value in self.items(node, f"{name}.", ("min", "max"))
        }
        for key in ("min", "max"):
            if key not in out:
                raise self.fail(node, name, f"needs both min and max (missing {key})")
        return out

    def checkpoint(self, node: Node, name: str) -> dict[str, Any]:
        if not isinstance(node, MappingNode):
            raise self.fail(
                node, name, f"expected {{signal: SIGUSR1, grace_s: 30}}, got {_kind(node)}"
            )
        out: dict[str, Any] = {}
        for key, value in self.items(node, f"{name}.", ("signal", "grace_s", "interval_s")):
            path = f"{name}.{key}"
            out[key] = self.text(value, path) if key == "signal" else self.number(value, path)
        return out

    def idle(self, node: Node, name: str) -> dict[str, Any]:
        if not isinstance(node, MappingNode):
            raise self.fail(
                node, name, f"expected {{after: 30m, below: 5, action: stop}}, got {_kind(node)}"
            )
        out: dict[str, Any] = {}
        for key, value in self.items(node, f"{name}.", ("after", "below", "action")):
            path = f"{name}.{key}"
            if key == "below":
                out[key] = self.number(value, path)
            elif key == "after" and isinstance(value, ScalarNode) and value.tag == INT:
                out[key] = self.number(value, path)  # seconds
            else:
                out[key] = self.text(value, path)
        return out


def _construct(node: ScalarNode) -> Any:
    return yaml.SafeLoader("").construct_object(node, deep=True)


Reader = Callable[[_Reader, Node, str], Any]

# How a file's value of each type of field is read (common/jobfields.py); a field of a type
# not here has a reader of its own (OWN_READERS).
READERS: dict[str, Reader] = {
    jobfields.TEXT: _Reader.text,
    jobfields.INTEGER: _Reader.integer,
    jobfields.NUMBER: _Reader.number,
    jobfields.BOOLEAN: _Reader.boolean,
    jobfields.TRUTH: _Reader.boolean,
    jobfields.CHOICE: _Reader.choice,
    jobfields.CPUS: _Reader.cpus,
    jobfields.MEMORY: _Reader.memory,
    jobfields.NAMES: _Reader.names,
    jobfields.LABELS: _Reader.env,  # env and node labels alike: a mapping of text
    jobfields.KIND: _Reader.kind,
    jobfields.COMMAND: _Reader.command,
    jobfields.ELASTIC: _Reader.elastic,
}
OWN_READERS: dict[str, Reader] = {
    "gpu_type": _Reader.gpu_types,
    "after": _Reader.after,
    "checkpoint": _Reader.checkpoint,
    "idle": _Reader.idle,
}


def file_fields(fields: Iterable[JobField]) -> dict[str, tuple[Reader, bool]]:
    """field -> (its reader, whether null means "left out"), of the fields a file may give."""
    return {
        field.name: (OWN_READERS.get(field.name) or READERS[field.type], field.nullable)
        for field in fields
        if field.in_file
    }


FIELDS = file_fields(jobfields.FIELDS)
