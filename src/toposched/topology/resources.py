"""What a node has besides its GPU wiring (GPU type and memory, CPUs, memory) and what one worker
needs of it, with the Kubernetes quantities both are written in (docs/cluster.md)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from functools import cached_property

from toposched.topology.errors import TopologyError

MILLI = 1000  # CPUs are counted in millicores, as Kubernetes does

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"^([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE]([+-]?[0-9]+)|([a-zA-Z]*))$")
_MISTAKES = {"GB": "Gi or G", "MB": "Mi or M", "KB": "Ki or k", "TB": "Ti or T", "B": "no suffix"}
CPU_FORMS = "a count of CPUs such as 4 or 2.5, or millicores such as 500m"
MEMORY_FORMS = "bytes, or a Kubernetes quantity such as 16Gi, 512Mi or 16G"


class QuantityError(ValueError):
    """A CPU or memory quantity that cannot be read; the message says what is accepted."""


def _amount(text: str, what: str, forms: str) -> tuple[Decimal, str]:
    match = _QUANTITY.match(text.strip())
    if match is None:
        if text.strip().startswith("-"):
            raise QuantityError(f"{what} {text!r}: must not be negative; expected {forms}")
        raise QuantityError(f"{what} {text!r}: expected {forms}")
    number, exponent, suffix = match.groups()
    value = Decimal(number)
    if exponent is not None:
        value = value.scaleb(int(exponent))
    return value, suffix or ""


def _number(value: object, what: str, forms: str) -> Decimal | None:
    """A plain number given as such (YAML 4 or 2.5), or None for text."""
    if isinstance(value, bool):
        raise QuantityError(f"{what} {value!r}: expected {forms}")
    if isinstance(value, int | float):
        if value != value or value in (float("inf"), float("-inf")):
            raise QuantityError(f"{what} {value!r}: expected {forms}")
        if value < 0:
            raise QuantityError(f"{what} {value!r}: must not be negative; expected {forms}")
        return Decimal(str(value))
    if not isinstance(value, str):
        raise QuantityError(f"{what} {value!r}: expected {forms}")
    return None


def parse_cpus(value: object, what: str = "cpus") -> int:
    """Millicores from `4`, `2.5`, `"500m"` or `"4"`; fractions of a millicore round up."""
    number = _number(value, what, CPU_FORMS)
    if number is None:
        number, suffix = _amount(str(value), what, CPU_FORMS)
        if suffix == "m":
            number = number / MILLI
        elif suffix:
            raise QuantityError(f"{what} {value!r}: unknown unit {suffix!r}; expected {CPU_FORMS}")
    milli = (number * MILLI).to_integral_value(rounding="ROUND_CEILING")
    return int(milli)


def parse_memory(value: object, what: str = "memory") -> int:
    """Bytes from `17179869184`, `"16Gi"`, `"16G"` or `"512Mi"`; `16GB` is refused, naming
    the suffixes meant."""
    number = _number(value, what, MEMORY_FORMS)
    if number is None:
        number, suffix = _amount(str(value), what, MEMORY_FORMS)
        scale = _BINARY.get(suffix) or _DECIMAL.get(suffix)
        if scale is None:
            hint = _MISTAKES.get(suffix.upper() if suffix.upper() in _MISTAKES else suffix)
            meant = f"; for {suffix} write {hint}" if hint else ""
            raise QuantityError(
                f"{what} {value!r}: unknown unit {suffix!r}{meant}; expected {MEMORY_FORMS}"
            )
        number *= scale
    try:
        return int(number.to_integral_value(rounding="ROUND_CEILING"))
    except InvalidOperation:
        raise QuantityError(f"{what} {value!r}: expected {MEMORY_FORMS}") from None


QUANTITY_FORMS = "a Kubernetes quantity such as 4, 500m, 16Gi or 1e3"
# Every suffix Kubernetes takes.
_ANY_SCALE: dict[str, Decimal] = {
    "m": Decimal("0.001"),
    **{suffix: Decimal(scale) for suffix, scale in (_DECIMAL | _BINARY).items()},
}


def parse_quantity(value: object, milli: bool = False, what: str = "quantity") -> int:
    """Any Kubernetes quantity, as kube-scheduler counts it: a whole number rounded up, of
    thousandths where `milli` (CPUs), else of units (`1m` of memory is one byte)."""
    number = _number(value, what, QUANTITY_FORMS)
    if number is None:
        number, suffix = _amount(str(value), what, QUANTITY_FORMS)
        scale = _ANY_SCALE.get(suffix)
        if scale is None:
            raise QuantityError(
                f"{what} {value!r}: unknown unit {suffix!r}; expected {QUANTITY_FORMS}"
            )
        number *= scale
    if milli:
        number *= MILLI
    return int(number.to_integral_value(rounding="ROUND_CEILING"))


def cpus_text(milli: int) -> str:
    """`4`, `2.5` or `500m`: the shortest exact form."""
    if milli % MILLI == 0:
        return str(milli // MILLI)
    if milli % 100 == 0:
        return f"{milli / MILLI:g}"
    return f"{milli}m"


def memory_text(size: int) -> str:
    """The largest binary unit that says `size` exactly (`16Gi`, `1536Mi`), else bytes."""
    for suffix, scale in reversed(_BINARY.items()):
        if size and size % scale == 0:
            return f"{size // scale}{suffix}"
    return str(size)


def gib_text(size: int) -> str:
    """Memory for people: `16 GiB`, `1.5 GiB`, `512 MiB`, `0`."""
    if not size:
        return "0"
    if size >= 2**30:
        return f"{size / 2**30:.4g} GiB"
    return f"{size / 2**20:.4g} MiB"


def type_key(name: str) -> str:
    """GPU type names compare without case: `v100` is `V100`."""
    return name.strip().casefold()


def gpu_type_from_product(product: str, known: Iterable[str]) -> str:
    """The short type name of an NVML product name or a GPU Feature Discovery label: the first
    known type that is a word of it (`Tesla-V100-SXM2-16GB` -> `V100`), else the product."""
    words = {type_key(w) for w in re.split(r"[\s\-_]+", product) if w}
    for name in known:
        if type_key(name) in words:
            return name
    return product.strip()


@dataclass(frozen=True)
class Hardware:
    """A node's GPU type and memory per GPU, and its CPUs (millicores) and memory (bytes) for
    workers. Empty type and zero GPU memory mean unknown; None CPUs or memory mean not counted:
    a job's CPU or memory request is then not held against that node. `mig`: the GPUs in MIG
    mode (their type and memory name their MIG table, topology/mig.py)."""

    gpu_type: str = ""
    gpu_memory: int = 0
    cpus: int | None = None
    memory: int | None = None
    mig: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.gpu_type, str):
            raise TopologyError(f"gpu_type must be text, got {self.gpu_type!r}")
        for name in ("gpu_memory", "cpus", "memory"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 0
            ):
                raise TopologyError(f"{name} must be a whole number >= 0, got {value!r}")
        if self.mig:
            self._check_mig()

    def _check_mig(self) -> None:
        from toposched.topology.mig import table_for  # the tables only where MIG is used

        gpus = self.mig
        if (
            not isinstance(gpus, tuple)
            or any(isinstance(g, bool) or not isinstance(g, int) or g < 0 for g in gpus)
            or list(gpus) != sorted(set(gpus))
        ):
            raise TopologyError(f"mig must list GPU indices in order, each once, got {gpus!r}")
        table_for(self.gpu_type, self.gpu_memory)

    @property
    def mig_mask(self) -> int:
        """The GPUs in MIG mode, as a bitmask."""
        mask = 0
        for g in self.mig:
            mask |= 1 << g
        return mask

    def describe(self) -> str:
        parts = [self.gpu_type or "GPU type unknown"]
        if self.gpu_memory:
            parts[0] += f" {gib_text(self.gpu_memory)}"
        if self.mig:
            parts[0] += f" (GPU {','.join(map(str, self.mig))} in MIG mode)"
        if self.cpus is not None:
            parts.append(f"{cpus_text(self.cpus)} CPUs")
        if self.memory is not None:
            parts.append(f"{gib_text(self.memory)} memory")
        return ", ".join(parts)


UNKNOWN_HARDWARE = Hardware()


@dataclass(frozen=True)
class WorkerFit:
    """What each worker of a job needs of a node besides GPUs: one of `gpu_types` (empty: any
    type), at least `gpu_memory` bytes per GPU, `cpus` millicores and `memory` bytes.

    The first two decide which nodes a job may use at all (`eligible`); the last two how many
    of its workers a node has room for now (`room`)."""

    gpu_types: tuple[str, ...] = ()
    gpu_memory: int = 0
    cpus: int = 0
    memory: int = 0

    def __post_init__(self) -> None:
        named = {type_key(t): t.strip() for t in reversed(self.gpu_types)}
        object.__setattr__(self, "gpu_types", tuple(sorted(named.values(), key=type_key)))

    def __hash__(self) -> int:
        return self._hash

    @cached_property
    def _hash(self) -> int:
        return hash((self.gpu_types, self.gpu_memory, self.cpus, self.memory))

    @cached_property
    def _type_keys(self) -> frozenset[str]:
        return frozenset(type_key(t) for t in self.gpu_types)

    @property
    def filters(self) -> bool:
        """Whether some node could be ruled out by type or GPU memory."""
        return bool(self.gpu_types) or self.gpu_memory > 0

    @property
    def sized(self) -> bool:
        return self.cpus > 0 or self.memory > 0

    def accepts_type(self, gpu_type: str) -> bool:
        return not self.gpu_types or type_key(gpu_type) in self._type_keys

    def accepts_key(self, key: str) -> bool:
        """As `accepts_type`, for a name already made a key (`type_key`)."""
        return not self.gpu_types or key in self._type_keys

    def eligible(self, hw: Hardware) -> bool:
        """Type accepted, and GPU memory enough (a node of unknown GPU memory is not)."""
        if not self.accepts_type(hw.gpu_type):
            return False
        return self.gpu_memory <= hw.gpu_memory if self.gpu_memory else True

    def room(self, free_cpus: int | None, free_memory: int | None) -> int | None:
        """How many workers the free CPUs and memory hold; None where neither limits them."""
        most: int | None = None
        if self.cpus and free_cpus is not None:
            most = max(free_cpus, 0) // self.cpus
        if self.memory and free_memory is not None:
            by_memory = max(free_memory, 0) // self.memory
            most = by_memory if most is None else min(most, by_memory)
        return most

    def why_not(self, hw: Hardware) -> str:
        """Why a node this fit is not eligible for is ruled out, in words."""
        if not self.accepts_type(hw.gpu_type):
            return f"{hw.gpu_type or 'untyped'} node(s) excluded by gpu_type"
        least = gib_text(self.gpu_memory)
        return f"{hw.gpu_type or 'untyped'} node(s) with less than {least} per GPU"

    def asked(self) -> str:
        """` with <describe()>` where the workers ask CPUs or memory, else nothing: what a
        message about GPUs adds so that a wait for CPUs or memory is not taken for one for
        GPUs."""
        return f" with {self.describe()}" if self.sized else ""

    def describe(self) -> str:
        parts = []
        if self.cpus:
            parts.append(f"{cpus_text(self.cpus)} CPUs")
        if self.memory:
            parts.append(f"{gib_text(self.memory)} memory")
        return " and ".join(parts)


ANY_FIT = WorkerFit()
