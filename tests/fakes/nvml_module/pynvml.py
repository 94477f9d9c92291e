"""A `pynvml` module for a server started by a test: FakeNvml behind the real module's name.

A test puts this directory first on the server process's PYTHONPATH and names a JSON file in
TOPOSCHED_FAKE_NVML: `{"preset": "dgx1-v100", "gpus": {"3": {"busy": 80, "memory_used": N,
"pids": [P], "processes": {"P": BYTES}}}}` (`processes`: what each pid uses, if given).
The topology is read once; each GPU's busy percent, memory in use and pids are read again
at every sample (each nvmlDeviceGetCount), so the test changes them while the server runs.
Not real NVML: no NVIDIA GPU or driver is on the CI machines (docs/idle.md says so).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.fakes.fake_nvml import FakeNvml

from toposched.topology.presets import preset

_STATE = Path(os.environ["TOPOSCHED_FAKE_NVML"])
_FAKE = FakeNvml.from_topology(preset(json.loads(_STATE.read_text())["preset"]))
NVMLError = _FAKE.NVMLError


def _reload() -> None:
    gpus = json.loads(_STATE.read_text()).get("gpus", {})
    for index, gpu in enumerate(_FAKE.gpus):
        now = gpus.get(str(index), {})
        gpu.busy = float(now.get("busy", 0))
        gpu.memory_used = int(now.get("memory_used", 0))
        gpu.pids = [int(p) for p in now.get("pids", [])]
        gpu.process_memory = {int(p): int(b) for p, b in now.get("processes", {}).items()}


def nvmlDeviceGetCount() -> int:
    _reload()
    return _FAKE.nvmlDeviceGetCount()


def __getattr__(name: str) -> Any:
    return getattr(_FAKE, name)
