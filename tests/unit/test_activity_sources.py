"""Where activity comes from: NVML's utilization (FakeNvml), the CPU time of process groups
(real processes), and durations as the idle rule's `after` is written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from tests.fakes.fake_nvml import FakeNvml
from toposched.common.durations import DurationError, duration_text, parse_duration
from toposched.discovery.gpu_usage import GpuUsage, NvmlUsage, open_usage
from toposched.discovery.nvml import NvmlUnavailable
from toposched.executors.cputime import group_cpu_seconds
from toposched.topology.presets import preset


def fake() -> FakeNvml:
    nvml = FakeNvml.from_topology(preset("pcie-4gpu-2socket"), memory=16 * 2**30)
    nvml.gpus[1].busy, nvml.gpus[1].memory_used, nvml.gpus[1].pids = 87.0, 2**30, [7, 3]
    return nvml


def test_nvml_usage_reads_each_gpu_and_keeps_one_session() -> None:
    nvml = fake()
    usage = NvmlUsage(nvml)
    first = usage.sample()
    # The fake splits the GPU's memory in use evenly over its pids unless told each one's.
    assert first[1] == GpuUsage(1, 87.0, 2**30, 16 * 2**30, (3, 7), ((3, 2**29), (7, 2**29)))
    assert first[0] == GpuUsage(0, 0.0, 0, 16 * 2**30, ())
    usage.sample()
    assert nvml.initialised == 1  # opened once for both samples
    usage.close()
    assert nvml.initialised == 0


def test_nvml_usage_reads_each_processs_memory_and_leaves_out_what_nvml_cannot_say() -> None:
    nvml = fake()
    nvml.gpus[1].process_memory = {7: 3 * 2**28}
    assert NvmlUsage(nvml).sample()[1].process_memory == ((3, 2**28), (7, 3 * 2**28))

    class Unknown:
        pid = 9
        usedGpuMemory = None  # pynvml's value where NVML says NVML_VALUE_NOT_AVAILABLE

    nvml.nvmlDeviceGetComputeRunningProcesses = lambda handle: [Unknown()]  # type: ignore[method-assign]
    read = NvmlUsage(nvml).sample()[1]
    assert read.pids == (9,) and read.process_memory == ()


def test_nvml_usage_says_when_nvml_fails_and_opens_again_after() -> None:
    nvml = fake()
    usage = NvmlUsage(nvml)
    usage.sample()
    nvml.driver_loaded = False
    nvml.nvmlShutdown()  # the driver went away: the next call fails
    with pytest.raises(NvmlUnavailable, match="NVML failed while sampling GPU utilization"):
        usage.sample()
    nvml.driver_loaded = True
    assert usage.sample()[1].busy_pct == 87.0


def test_open_usage_is_none_without_a_driver() -> None:
    assert (
        open_usage(FakeNvml.from_topology(preset("pcie-4gpu-2socket"), driver_loaded=False)) is None
    )
    assert isinstance(open_usage(fake()), NvmlUsage)


def test_group_cpu_seconds_counts_a_spinning_group_and_not_a_sleeping_one() -> None:
    spin = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import time\nend = time.process_time() + 0.3\n"
            "while time.process_time() < end: pass\nprint('done', flush=True)\ntime.sleep(60)",
        ],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    nap = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        assert spin.stdout is not None and spin.stdout.readline() == b"done\n"
        seconds = group_cpu_seconds([spin.pid, nap.pid, 999_999_999])
        assert seconds[spin.pid] >= 0.3
        assert seconds[nap.pid] < 0.1
        assert seconds[999_999_999] == 0.0  # no such group: nothing used
    finally:
        for proc in (spin, nap):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30m", 1800.0),
        ("1h30m", 5400.0),
        ("45s", 45.0),
        ("2d", 172_800.0),
        ("90", 90.0),
        (" 1.5h ", 5400.0),
        ("1e3", 1000.0),
        (600, 600.0),
        (2.5, 2.5),
    ],
)
def test_durations_are_read_as_people_write_them(text: str | float, seconds: float) -> None:
    assert parse_duration(text) == seconds


# Other scripts' digits were read as numbers (`\u0661\u0662m` as 12 minutes), and `1_0` as 10.
OTHER_DIGITS = ["\u0661\u0662m", "\u0661\u0662", "1_0", "\uff15s"]


@pytest.mark.parametrize(
    "text", ["", "soon", "30x", "m30", "0", "-5s", "inf", "nan", True, *OTHER_DIGITS]
)
def test_a_bad_duration_is_refused_with_what_was_given(text: str | float) -> None:
    with pytest.raises(DurationError, match="idle after must be"):
        parse_duration(text, "idle after")


@pytest.mark.parametrize(
    ("seconds", "text"), [(1800, "30m"), (5400, "1h30m"), (10, "10s"), (2.5, "2.5s")]
)
def test_duration_text_reads_back_as_the_same_seconds(seconds: float, text: str) -> None:
    assert duration_text(seconds) == text
    assert parse_duration(text) == seconds
