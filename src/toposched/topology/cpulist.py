"""CPU lists as nvidia-smi's `CPU Affinity` column and /proc print them: "0-19,40-59"."""

from __future__ import annotations

from collections.abc import Iterable


class CpuListError(ValueError):
    """A CPU list such as "0-19,40-59" that cannot be read; the message quotes it."""


def parse_cpu_list(text: str) -> frozenset[int]:
    """The CPUs of a list as nvidia-smi and /proc print it: "0-19,40-59", "3", "0,2,4"."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        first, dash, last = part.strip().partition("-")
        if not first.isdigit() or (dash and not last.isdigit()):
            raise CpuListError(f"CPU list {text!r}: {part!r} is not a CPU or a range such as 0-7")
        low, high = int(first), int(last) if dash else int(first)
        if high < low:
            raise CpuListError(f"CPU list {text!r}: range {part!r} runs backwards")
        cpus.update(range(low, high + 1))
    return frozenset(cpus)


def cpu_list(cpus: Iterable[int]) -> str:
    """The shortest list for a set of CPUs: {0, 1, 2, 5} is "0-2,5"; none is ""."""
    ranges: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if ranges and cpu == ranges[-1][1] + 1:
            ranges[-1][1] = cpu
        else:
            ranges.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)
