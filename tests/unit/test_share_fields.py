"""A share of one GPU asked of the server (issue 42 item 3): `gpu_fraction`,
`gpu_memory_share` (Arena's --gpumemory) and `gpu_memory_action` from the table of fields to
the core's JobSpec, and bad values refused naming the field and the flag, saying what is
allowed."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from toposched.cli import quick
from toposched.cli.flags import with_options
from toposched.cli.jobs_cmd import SUBMIT_FLAGS, flag_words
from toposched.cli.submitflags import field_flags, given, options
from toposched.client.jobfile import parse_job_text
from toposched.common.jobspec import core_spec
from toposched.server.jobschema import JobSubmit


def submitted(**fields: Any) -> dict[str, Any]:
    return JobSubmit.model_validate({"command": ["x"], **fields}).model_dump(exclude_none=True)


def refusal(**fields: Any) -> tuple[str, str]:
    with pytest.raises(ValidationError) as refused:
        JobSubmit.model_validate({"command": ["x"], **fields})
    error = refused.value.errors()[0]
    return ".".join(map(str, error["loc"])), error["msg"]


def test_a_fraction_and_a_memory_share_reach_the_core_as_thousandths_and_mib() -> None:
    spec = core_spec("a", "ann", "q", submitted(gpu_fraction=0.25, gpu_memory_share="10Gi"))
    assert (spec.gpu_milli, spec.gpu_share_mib, spec.gpus) == (250, 10240, 1)
    assert spec.shared
    alone = core_spec("b", "ann", "q", submitted(gpu_memory_share="1500M"))
    assert (alone.gpu_milli, alone.gpu_share_mib) == (0, 1431)  # 1.5e9 bytes, rounded up


def test_a_fraction_of_1_is_the_ordinary_whole_gpu() -> None:
    spec = core_spec("a", "ann", "q", submitted(gpu_fraction=1, gpus=1))
    assert not spec.shared and spec.gpus == 1


def test_a_job_without_a_share_asks_whole_gpus_and_stores_none_of_the_fields() -> None:
    spec = core_spec("a", "ann", "q", submitted(gpus=2))
    assert (spec.gpu_milli, spec.gpu_share_mib, spec.gpus) == (0, 0, 2)


@pytest.mark.parametrize(
    ("fields", "loc", "says"),
    [
        ({"gpu_fraction": 0}, "gpu_fraction", "greater than 0"),
        ({"gpu_fraction": 1.5}, "gpu_fraction", "less than or equal to 1"),
        ({"gpu_fraction": 0.0004}, "gpu_fraction", "at least 0.001"),
        ({"gpu_fraction": 0.5, "gpus": 2}, "gpu_fraction", "gpus must be 1 (got 2)"),
        ({"gpu_fraction": 0.5, "gpus": 0, "cpus": "1"}, "gpu_fraction", "gpus must be 1"),
        ({"gpu_fraction": 0.5, "workers": 2}, "gpu_fraction", "workers must be 1 (got 2)"),
        (
            {"gpu_fraction": 0.5, "elastic": {"min": 1, "max": 2}},
            "gpu_fraction",
            "cannot be elastic",
        ),
        ({"gpu_memory_share": "10Gi", "gpus": 4}, "gpu_memory_share", "gpus must be 1 (got 4)"),
        ({"gpu_memory_share": "ten"}, "gpu_memory_share", "ten"),
        ({"gpu_fraction": 1, "gpu_memory_share": "1Gi"}, "gpu_memory_share", "fraction below 1"),
        ({"gpu_memory_action": "stop"}, "gpu_memory_action", "give gpu_fraction or"),
        ({"gpu_fraction": 0.5, "gpu_memory_action": "kill"}, "gpu_memory_action", "'flag'"),
    ],
)
def test_bad_shares_are_refused_by_the_field_at_fault(
    fields: dict[str, Any], loc: str, says: str
) -> None:
    where, message = refusal(**fields)
    assert where == loc
    assert says in message


def test_a_refusal_is_said_by_the_flag_that_gave_it() -> None:
    _, message = refusal(gpu_fraction=0.5, gpus=2)
    said = flag_words(SUBMIT_FLAGS["gpu_fraction"], message)
    assert said.startswith("--gpu-fraction")
    assert "a share is of one GPU for one worker: gpus must be 1 (got 2)" in said
    assert SUBMIT_FLAGS["gpu_memory_share"] == "--gpu-memory"
    assert SUBMIT_FLAGS["gpu_memory"] == "--min-gpu-memory"
    assert SUBMIT_FLAGS["gpu_memory_action"] == "--gpu-memory-action"


def test_the_flags_take_arenas_gpumemory_and_the_job_file_the_fields() -> None:
    flags = field_flags()

    @with_options(options(flags))
    def command(**fields: Any) -> dict[str, Any]:
        return fields

    said = quick.parse(command, ["--gpu-fraction", "0.5", "--gpumemory", "10Gi"])
    assert given(flags, said) == {"gpu_fraction": 0.5, "gpu_memory_share": "10Gi"}
    # The spelling is the share; the floor on each GPU's memory has a flag of its own.
    said = quick.parse(command, ["--gpu-memory", "10Gi", "--min-gpu-memory", "32Gi"])
    assert given(flags, said) == {"gpu_memory_share": "10Gi", "gpu_memory": "32Gi"}
    text = "command: [x]\ngpu_fraction: 0.25\ngpu_memory_share: 4Gi\ngpu_memory_action: stop\n"
    read = parse_job_text(text, "job.yaml")
    assert read.spec["gpu_fraction"] == 0.25 and read.spec["gpu_memory_action"] == "stop"
