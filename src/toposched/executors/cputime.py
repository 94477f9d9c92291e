"""CPU time of process groups, from /proc: the activity stand-in where NVML cannot be read."""

from __future__ import annotations

import os
from collections.abc import Collection

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def group_cpu_seconds(pgids: Collection[int]) -> dict[int, float]:
    """Seconds of CPU (user and system) used by the live processes of each group in `pgids`,
    with what their ended children used once waited for: one pass over /proc."""
    wanted = set(pgids)
    found = dict.fromkeys(wanted, 0.0)
    if not wanted:
        return found
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                raw = f.read()
        except OSError:
            continue  # ended while the scan ran
        # The command name (field 2) may hold spaces and parentheses: split after its last ')'
        fields = raw[raw.rfind(b")") + 2 :].split()
        try:
            group = int(fields[2])
            if group in wanted:
                # utime, stime, cutime, cstime: fields 14-17 of proc(5)
                found[group] += sum(int(fields[k]) for k in (11, 12, 13, 14)) / _TICK
        except (IndexError, ValueError):
            continue
    return found
