"""A `pynvml` module for a server started by a test: FakeNvml behind the real module's name.

A test puts this directory first on the server process's PYTHONPATH and names a JSON file in
TOPOSCHED_FAKE_NVML: `{"preset": "dgx1-v100", "gpus": {"3": {"busy": 80, "memory_used": N,
"pids": [P], "processes": {"P": BYTES}}}}` (`processes`: what each pid uses, if given).
`"mig": {"0": [["3g.40gb", 4]], "1": []}` puts GPUs 0 and 1 in MIG mode, GPU 0 with a
3g.40gb instance at memory slice 4 (the GPUs are H100 80GB); `"mig_root": false` refuses to
create or destroy instances, as NVML does to a user who is not root. After each instance is
created or destroyed, every MIG GPU's instances are written to `<file>.mig.json`.
The topology is read once; each GPU's busy percent, memory in use and pids are read again
at every sample (each nvmlDeviceGetCount), so the test changes them while the server runs.
Not real NVML: no NVIDIA GPU or driver is on the CI machines (docs/idle.md says so).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.fakes.fake_nvml import H100_MEMORY, FakeMig, FakeNvml

from toposched.topology.mig import table_for
from toposched.topology.presets import preset

_STATE = Path(os.environ["TOPOSCHED_FAKE_NVML"])
_FOUND = json.loads(_STATE.read_text())
_FAKE = FakeNvml.from_topology(preset(_FOUND["preset"]), root=_FOUND.get("mig_root", True))
NVMLError = _FAKE.NVMLError
_TABLE = table_for("H100", H100_MEMORY)
for _gpu, _instances in _FOUND.get("mig", {}).items():
    _carved = [(name, int(start)) for name, start in _instances]
    _FAKE.gpus[int(_gpu)].mig = FakeMig.carved(_TABLE, _carved, int(_gpu))
_CHANGES_MIG = {
    "nvmlDeviceCreateGpuInstanceWithPlacement",
    "nvmlGpuInstanceCreateComputeInstance",
    "nvmlComputeInstanceDestroy",
    "nvmlGpuInstanceDestroy",
}


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


def _write_mig() -> None:
    carved = {
        str(i): [[d.uuid, d.profile_id, d.start, d.size, d.compute] for d in gpu.mig.instances]
        for i, gpu in enumerate(_FAKE.gpus)
        if gpu.mig is not None
    }
    written = _STATE.with_suffix(".mig.json")
    (written.parent / ("." + written.name)).write_text(json.dumps(carved))
    (written.parent / ("." + written.name)).rename(written)  # never read half written


def __getattr__(name: str) -> Any:
    found = getattr(_FAKE, name)
    if name not in _CHANGES_MIG:
        return found

    def changing(*args: Any) -> Any:
        try:
            return found(*args)
        finally:
            _write_mig()

    return changing
