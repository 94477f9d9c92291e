"""The job's fields, defined once (common/jobfields.py): a field added to the table alone is
a flag of `submit`, a field of the job file and of the API's schema, with its bounds, its
default and its help; and what is made from the table agrees with it."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from toposched.cli import quick
from toposched.cli.flags import OptSpec, made_options, with_options
from toposched.cli.jobs_cmd import SUBMIT_FLAGS, submit
from toposched.cli.submitflags import field_flags, given, options
from toposched.client.jobfile import JobFileError, file_fields, parse_job_text
from toposched.common import jobfields
from toposched.common.jobfields import FIELDS, MEMORY, NUMBER, TEXT, JobField, compact
from toposched.server.jobschema import CheckpointIn, IdleIn, JobSubmit, job_submit_model

# Fields as a later issue would write them: a memory size with Arena's spelling, a bounded
# fraction (HAMi's share of a GPU's cores), a profile's name; none of them in the table.
SHARING = (
    JobField(
        "gpu_share_memory",
        MEMORY,
        None,
        "GPU memory the worker may use of a shared GPU, e.g. 10Gi.",
        aliases=("--gpushare",),
        metavar="QUANTITY",
    ),
    JobField("gpu_cores", NUMBER, None, "The share of one GPU's cores, e.g. 0.5.", gt=0, le=1),
    JobField("mig", TEXT, None, "A MIG profile, e.g. 1g.10gb.", metavar="PROFILE"),
)
WIDER = FIELDS + SHARING


def test_a_field_added_to_the_table_is_a_flag_of_submit() -> None:
    flags = field_flags(WIDER)

    @with_options(options(flags))
    def command(**fields: Any) -> dict[str, Any]:
        return fields

    words = ["--gpushare", "10Gi", "--gpu-cores", "0.5", "--mig", "1g.10gb", "--gpus", "2"]
    said = quick.parse(command, words)
    assert said["gpu_share_memory"] == "10Gi" and said["gpu_cores"] == 0.5
    assert given(flags, said) == {
        "gpu_share_memory": "10Gi",
        "gpu_cores": 0.5,
        "mig": "1g.10gb",
        "gpus": 2,
    }
    declared = {name: spec for name, _, spec in made_options(command)}
    assert isinstance(declared["gpu_share_memory"], OptSpec)
    assert declared["gpu_share_memory"].flags == ("--gpu-share-memory", "--gpushare")
    assert declared["mig"].settings["help"] == "A MIG profile, e.g. 1g.10gb."


def test_a_flag_of_a_unit_bearing_field_is_checked_by_its_type(
    capsys: pytest.CaptureFixture[str],
) -> None:
    flags = field_flags(WIDER)
    with pytest.raises(SystemExit) as exit_:
        given(flags, {"gpu_share_memory": "ten gigs"})
    assert exit_.value.code == 2
    assert "--gpu-share-memory" in capsys.readouterr().err


def test_a_field_added_to_the_table_is_read_from_a_job_file() -> None:
    text = "command: [x]\ngpu_share_memory: 10Gi\ngpu_cores: 0.25\nmig: 1g.10gb\n"
    read = parse_job_text(text, "job.yaml", file_fields(WIDER))
    assert read.spec["gpu_share_memory"] == "10Gi" and read.spec["gpu_cores"] == 0.25
    assert read.lines["mig"] == 4
    with pytest.raises(JobFileError, match=r"job.yaml:2: gpu_share_memory: .*10 gigs"):
        parse_job_text("command: [x]\ngpu_share_memory: 10 gigs\n", "job.yaml", file_fields(WIDER))
    with pytest.raises(JobFileError, match="unknown field"):
        parse_job_text(text, "job.yaml")  # the table without them


def test_a_field_added_to_the_table_is_in_the_apis_schema_with_its_bounds() -> None:
    model = job_submit_model(WIDER)
    job = model.model_validate({"command": ["x"], "gpu_share_memory": "10240Mi"})
    assert job.gpu_share_memory == "10Gi"  # stored as its shortest exact text
    assert job.gpu_cores is None and job.mig is None
    with pytest.raises(ValidationError) as refused:
        model.model_validate({"command": ["x"], "gpu_cores": 1.5})
    assert refused.value.errors()[0]["loc"] == ("gpu_cores",)
    schema = model.model_json_schema()["properties"]
    assert schema["mig"]["description"] == "A MIG profile, e.g. 1g.10gb."
    # Left at their defaults, they are not stored.
    assert "mig" not in compact(job.model_dump(), WIDER)


def test_the_apis_schema_has_the_tables_fields_defaults_and_help() -> None:
    made = JobSubmit.model_fields
    assert list(made) == [field.name for field in FIELDS]
    for field in FIELDS:
        if field.default is jobfields.REQUIRED:
            assert made[field.name].is_required(), field.name
        else:
            assert made[field.name].get_default(call_default_factory=True) == field.default
        assert made[field.name].description == (field.help or None), field.name


def test_the_job_file_takes_every_field_but_those_the_cli_sets_itself() -> None:
    assert set(file_fields(FIELDS)) == {field.name for field in FIELDS} - {"exported"}


def test_every_field_the_api_takes_is_said_as_the_cli_gives_it() -> None:
    assert {field.name for field in FIELDS} <= set(SUBMIT_FLAGS)
    assert SUBMIT_FLAGS["limit_s"] == "--time"
    assert SUBMIT_FLAGS["checkpoint.interval_s"] == "--checkpoint-every"
    flags = {spec.flags[0] for _, _, spec in made_options(submit)}
    assert {"--gpus", "--time", "--idle-after", "--command-visible/--command-hidden"} <= flags


@pytest.mark.parametrize(
    ("record", "parts"),
    [(CheckpointIn, jobfields.CHECKPOINT_PARTS), (IdleIn, jobfields.IDLE_PARTS)],
)
def test_a_records_schema_has_its_parts_defaults_and_bounds(record: Any, parts: Any) -> None:
    """CheckpointIn and IdleIn keep checks of their own; their fields are the table's parts."""
    assert list(record.model_fields) == [part.name for part in parts]
    for part in parts:
        info = record.model_fields[part.name]
        if part.default is jobfields.REQUIRED:
            assert info.is_required(), part.name
        else:
            assert info.default == part.default, part.name
    for part in parts:
        for bound in ("ge", "gt", "le"):
            limit = getattr(part, bound)
            if limit is None:
                continue
            over = limit + 1 if bound == "le" else limit - 1 if bound == "ge" else limit
            good = {p.name: p.default for p in parts if p.default is not jobfields.REQUIRED}
            if any(p.default is jobfields.REQUIRED for p in parts):
                good["after"] = 60
            with pytest.raises(ValidationError):
                record.model_validate({**good, part.name: over})


def test_a_stored_spec_leaves_out_only_what_says_nothing() -> None:
    body = JobSubmit.model_validate({"command": ["x"]}).model_dump(exclude={"name", "queue"})
    stored = compact(body)
    assert set(stored) == {
        field.name
        for field in FIELDS
        if field.stored == "always" and field.name not in ("name", "queue")
    }
    off = compact({**body, "gputopology": False, "mixed_types": True, "cpus": "2"})
    assert off["gputopology"] is False and off["mixed_types"] is True and off["cpus"] == "2"
