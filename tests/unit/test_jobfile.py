"""The YAML job spec of `toposched submit -f`: parsing, flag overrides, and every error."""

from __future__ import annotations

from pathlib import Path

import pytest

from toposched.client.jobfile import (
    FIELDS,
    JobFileError,
    load_job_file,
    merge_spec,
    parse_elastic,
    parse_env_pairs,
    parse_job_text,
    split_command,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "jobs"

FULL = """\
# every field
name: resnet50-4gpu
queue: vision
priority: 10
workers: 4
gpus: 2
locality: node,rack@600
elastic: {min: 2, max: 4}
checkpoint:
  signal: SIGUSR1
  grace_s: 60
restart: on-failure
max_restarts: 5
limit_s: 3600
command: python train.py --model resnet50 --note 'two words'
env:
  NCCL_DEBUG: WARN
  PORT: 8080
workdir: /data/runs
command_visible: true
kind: tfjob
ps: 2
selector: {gpu: v100, zone: "7"}
gpu_type: [V100, A100]
mixed_types: false
mig: 3g.40gb
gpu_memory: 32Gi
cpus: 2.5
memory: 64Gi
gputopology: false
model: resnet50
image: nvcr.io/nvidia/pytorch:24.05-py3
idle: {after: 30m, below: 5, action: stop}
interactive: false
after: [prep, data:any]
gpu_fraction: 0.5
gpu_memory_share: 10Gi
gpu_memory_action: stop
topology_level: leaf
topology_prefer: clique
"""


def test_every_field_is_read_with_its_type() -> None:
    job = parse_job_text(FULL, "job.yaml")
    assert job.spec == {
        "name": "resnet50-4gpu",
        "queue": "vision",
        "priority": 10,
        "workers": 4,
        "gpus": 2,
        "locality": "node,rack@600",
        "elastic": {"min": 2, "max": 4},
        "checkpoint": {"signal": "SIGUSR1", "grace_s": 60.0},
        "restart": "on-failure",
        "max_restarts": 5,
        "limit_s": 3600.0,
        "command": ["python", "train.py", "--model", "resnet50", "--note", "two words"],
        "env": {"NCCL_DEBUG": "WARN", "PORT": "8080"},
        "workdir": "/data/runs",
        "command_visible": True,
        "kind": "tfjob",
        "ps": 2,
        "selector": {"gpu": "v100", "zone": "7"},
        "gpu_type": ["V100", "A100"],
        "mixed_types": False,
        "mig": "3g.40gb",
        "gpu_memory": "32Gi",
        "cpus": 2.5,
        "memory": "64Gi",
        "gputopology": False,
        "model": "resnet50",
        "image": "nvcr.io/nvidia/pytorch:24.05-py3",
        "idle": {"after": "30m", "below": 5.0, "action": "stop"},
        "interactive": False,
        "after": ["prep", "data:any"],
        "gpu_fraction": 0.5,
        "gpu_memory_share": "10Gi",
        "gpu_memory_action": "stop",
        "topology_level": "leaf",
        "topology_prefer": "clique",
    }
    assert set(job.spec) == set(FIELDS)
    assert job.path == "job.yaml"


def test_lines_of_fields_and_nested_fields() -> None:
    job = parse_job_text(FULL, "job.yaml")
    assert job.lines["name"] == 2
    assert job.lines["gpus"] == 6
    assert job.lines["checkpoint"] == 10  # a block mapping starts on the line after its key
    assert job.lines["checkpoint.grace_s"] == 11
    assert job.lines["env.PORT"] == 18
    # An API error location maps to the line, or to its nearest parent's.
    assert job.line_of("body.gpus") == 6
    assert job.line_of("body.checkpoint.signal") == 10
    assert job.line_of("body.elastic.min") == 8
    assert job.line_of("body.env.PORT") == 18
    assert job.line_of("body") is None
    assert job.line_of("query.worker") is None


def test_a_checkpoint_may_say_how_often_it_saves() -> None:
    text = "checkpoint: {signal: SIGUSR1, interval_s: 1800}\ncommand: train\n"
    assert parse_job_text(text).spec["checkpoint"] == {"signal": "SIGUSR1", "interval_s": 1800.0}


def test_command_as_a_list_keeps_each_word_as_written() -> None:
    text = "command: [python, train.py, --lr, 0.10, --epochs, 010, --flag, yes, '']\n"
    assert parse_job_text(text).spec["command"] == [
        "python",
        "train.py",
        "--lr",
        "0.10",
        "--epochs",
        "010",
        "--flag",
        "yes",
        "",
    ]


def test_command_as_a_string_is_split_like_a_shell() -> None:
    text = """command: python -c "print('a b')" --x='1 2'\n"""
    assert parse_job_text(text).spec["command"] == ["python", "-c", "print('a b')", "--x=1 2"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("elastic: 2:4", {"min": 2, "max": 4}),  # YAML 1.1 would read a base-60 number
        ("elastic: '1:8'", {"min": 1, "max": 8}),
        ("elastic: {min: 1, max: 3}", {"min": 1, "max": 3}),
        ("elastic:\n  min: 2\n  max: 2", {"min": 2, "max": 2}),
    ],
)
def test_elastic_forms(text: str, expected: dict[str, int]) -> None:
    assert parse_job_text(text).spec["elastic"] == expected


def test_scalars_as_text_and_numbers() -> None:
    job = parse_job_text(
        "name: 2024\nqueue: yes\nenv: {A: true, B: 1.50, C: ''}\nlimit_s: 1e3\n"
        "checkpoint: {grace_s: 5}\n"
    )
    assert job.spec["name"] == "2024"
    assert job.spec["queue"] == "yes"
    assert job.spec["env"] == {"A": "true", "B": "1.50", "C": ""}
    assert job.spec["limit_s"] == 1000.0
    assert job.spec["checkpoint"] == {"grace_s": 5.0}


def test_null_leaves_an_optional_field_out() -> None:
    job = parse_job_text(
        "name: ~\nqueue:\nelastic: null\ncheckpoint:\nlimit_s:\nworkdir:\ngpus: 2\n"
    )
    assert job.spec == {"gpus": 2}


def test_one_job_to_run_after_may_be_written_alone() -> None:
    assert parse_job_text("after: prep:any\n").spec == {"after": ["prep:any"]}
    assert parse_job_text("after: []\n").spec == {"after": []}


def test_a_file_without_command_is_fine_here() -> None:
    # The command may come from the command line; the CLI checks that one of them gives it.
    assert parse_job_text("gpus: 2\n").spec == {"gpus": 2}


# ---------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("text", "line", "field", "problem"),
    [
        ("gpus: two\n", 1, "gpus", "expected a whole number, got the text 'two'"),
        ("gpus: 2.0\n", 1, "gpus", "expected a whole number, got a number (2.0)"),
        ("workers: true\n", 1, "workers", "expected a whole number, got a boolean (true)"),
        ("priority: '5'\n", 1, "priority", "expected a whole number, got the text '5'"),
        ('priority: "5"\n', 1, "priority", "expected a whole number, got the text '5'"),
        ("command_visible: yes please\n", 1, "command_visible", "expected true or false"),
        ("command_visible: 1\n", 1, "command_visible", "expected true or false"),
        ("command_visible:\n", 1, "command_visible", "needs a value"),
        ("name: x\npriority: [1]\n", 2, "priority", "expected a whole number, got a list"),
        ("priority:\n", 1, "priority", "needs a value"),
        ("name: x\n\ngpu: 2\n", 3, "gpu", "unknown field; did you mean 'gpus'?"),
        ("imagefile: x\n", 1, "imagefile", "unknown field; did you mean 'image'?"),
        ("zzz: x\n", 1, "zzz", "unknown field; known fields: name, queue"),
        ("gpus: 1\nname: a\ngpus: 2\n", 3, "gpus", "given twice (first on line 1)"),
        ("name: {a: 1}\n", 1, "name", "expected text, got a mapping"),
        ("restart: always\n", 1, "restart", "expected one of never, on-failure, got 'always'"),
        ("limit_s: soon\n", 1, "limit_s", "expected a number, got the text 'soon'"),
        ("limit_s: '60'\n", 1, "limit_s", "expected a number, got the text '60'"),
        ("limit_s: .inf\n", 1, "limit_s", "expected a finite number, got .inf"),
        # float() reads other scripts' digits: `\u0661\u0662` was 12 (issue 47).
        ("limit_s: \u0661\u0662\n", 1, "limit_s", "expected a number, got the text '\u0661\u0662'"),
        ("idle: {after: 30m, below: -0.0}\n", 1, "idle.below", "got -0.0: write 0"),
        ("gpus: -0\n", 1, "gpus", "expected a whole number, got -0: write 0"),
        ("checkpoint:\n  grace_s: -0\n", 2, "checkpoint.grace_s", "got -0: write 0"),
        ("command: []\n", 1, "command", "the command is empty"),
        ("command: ''\n", 1, "command", "the command is empty"),
        ("command: {a: b}\n", 1, "command", "expected a list of words or a string, got a mapping"),
        ("command: python 'x\n", 1, "command", "No closing quotation"),
        ("command:\n  - python\n  - [a]\n", 3, "command[1]", "expected text, got a list"),
        ("command:\n  - python\n  - ~\n", 3, "command[1]", "expected text, got nothing (null)"),
        ("env: [A=1]\n", 1, "env", "expected a mapping of NAME: value, got a list"),
        ("env:\n  A: 1\n  B:\n", 3, "env.B", "needs a value (write '' for an empty one)"),
        ("env:\n  A: [1]\n", 2, "env.A", "expected text, got a list"),
        ("env:\n  A: 1\n  A: 2\n", 3, "env.A", "given twice (first on line 2)"),
        ("elastic: 3\n", 1, "elastic", "expected MIN:MAX workers, such as 2:8, got '3'"),
        ("elastic: [1, 2]\n", 1, "elastic", "expected {min: N, max: M} or 'MIN:MAX', got a list"),
        ("elastic: {min: 1}\n", 1, "elastic", "needs both min and max (missing max)"),
        ("elastic:\n  min: 1\n  max: x\n", 3, "elastic.max", "expected a whole number"),
        ("elastic: {min: 1, max: 2, step: 1}\n", 1, "elastic.step", "known fields: min, max"),
        ("checkpoint: SIGUSR1\n", 1, "checkpoint", "expected {signal: SIGUSR1, grace_s: 30}"),
        ("checkpoint:\n  signal: [x]\n", 2, "checkpoint.signal", "expected text, got a list"),
        ("checkpoint:\n  grace: 5\n", 2, "checkpoint.grace", "did you mean 'grace_s'?"),
        ("checkpoint:\n  grace_s: x\n", 2, "checkpoint.grace_s", "expected a number"),
        ("idle: 30m\n", 1, "idle", "expected {after: 30m, below: 5, action: stop}"),
        ("idle: {after: 30m, below: low}\n", 1, "idle.below", "expected a number"),
        ("idle: {after: 30m, when: 5}\n", 1, "idle.when", "known fields: after, below, action"),
        ("[a, b]: 1\n", 1, None, "a field name must be text, not a list"),
        ("cpus: 4 cores\n", 1, "cpus", "expected a count of CPUs such as 4 or 2.5"),
        ("cpus: -1\n", 1, "cpus", "must not be negative"),
        ("memory: 16GB\n", 1, "memory", "for GB write Gi or G"),
        ("gpu_memory: [1]\n", 1, "gpu_memory", "expected a quantity, got a list"),
        ("gpu_type: []\n", 1, "gpu_type", "give at least one GPU type"),
        ("gpu_type: {a: 1}\n", 1, "gpu_type", "expected a list of GPU types"),
        ("mixed_types: maybe\n", 1, "mixed_types", "expected true or false"),
        ("after: {prep: ok}\n", 1, "after", "expected a list of jobs (NAME or NAME:ok|any)"),
        ("after:\n  - prep\n  - [a]\n", 3, "after[1]", "expected text, got a list"),
    ],
)
def test_errors_name_file_line_and_field(
    text: str, line: int, field: str | None, problem: str
) -> None:
    with pytest.raises(JobFileError) as caught:
        parse_job_text(text, "job.yaml")
    err = caught.value
    assert (err.path, err.line, err.field) == ("job.yaml", line, field)
    assert problem in err.problem
    prefix = f"job.yaml:{line}: {field}: " if field else f"job.yaml:{line}: "
    assert str(err).startswith(prefix)


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        (
            "- gpus: 1\n",
            1,
            "a job file is a mapping of fields (command: ..., gpus: ...), not a list",
        ),
        ("just text\n", 1, "not the text 'just text'"),
        ("name: x\ngpus: [1\n", 3, "not valid YAML:"),
        ("name: x\n  gpus: 1\n", 2, "not valid YAML: mapping values are not allowed here"),
        ("a: 1\n---\nb: 2\n", 2, "not valid YAML: expected a single document"),
        ("name: *nowhere\n", 1, "not valid YAML: found undefined alias 'nowhere'"),
    ],
)
def test_errors_of_the_whole_file(text: str, line: int, problem: str) -> None:
    with pytest.raises(JobFileError) as caught:
        parse_job_text(text, "job.yaml")
    assert caught.value.line == line
    assert caught.value.field is None
    assert problem in str(caught.value)
    assert str(caught.value).startswith(f"job.yaml:{line}: ")


@pytest.mark.parametrize(
    ("text", "line", "field", "tag"),
    [
        ("command: !!python/object/apply:os.system ['id']\n", 1, "command", "!!python/object"),
        ("command: !!python/name:os.system\n", 1, "command", "!!python/name:os.system"),
        ("command: [python, !!python/bytes eA==]\n", 1, "command", "!!python/bytes"),
        ("name: x\nenv:\n  A: !!binary aGk=\n", 3, "env", "!!binary"),
        ("gpus: !local 2\n", 1, "gpus", "!local"),
        ("checkpoint: !!set {SIGUSR1}\n", 1, "checkpoint", "!!set"),
        ("--- !!python/object:os.Thing\ncommand: x\n", 1, None, "!!python/object:os.Thing"),
    ],
)
def test_unknown_yaml_tags_are_refused(text: str, line: int, field: str | None, tag: str) -> None:
    # Read as text they once ran: `!!python/object/apply:os.system [...]` became a command.
    with pytest.raises(JobFileError) as caught:
        parse_job_text(text, "job.yaml")
    err = caught.value
    assert (err.line, err.field) == (line, field)
    assert f"the YAML tag {tag}" in err.problem and "not allowed" in err.problem


def test_plain_tags_that_resolve_to_data_are_read() -> None:
    text = "command: !!str python\nworkers: !!int 2\nname: 2024-01-01\nlimit_s: !!float 60\n"
    spec = parse_job_text(text).spec
    assert spec == {"command": ["python"], "workers": 2, "name": "2024-01-01", "limit_s": 60.0}


@pytest.mark.parametrize("text", ["", "# only a comment\n", "---\n"])
def test_an_empty_file(text: str) -> None:
    with pytest.raises(JobFileError, match=r"^job\.yaml: is empty"):
        parse_job_text(text, "job.yaml")


def test_files_that_cannot_be_read(tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    with pytest.raises(JobFileError, match=r"nope\.yaml: cannot read: No such file"):
        load_job_file(missing)
    with pytest.raises(JobFileError, match=r"cannot read: Is a directory"):
        load_job_file(tmp_path)
    binary = tmp_path / "job.yaml"
    binary.write_bytes(b"name: \xff\xfe\n")
    with pytest.raises(JobFileError, match=r"job\.yaml: not UTF-8 text"):
        load_job_file(binary)


def test_load_names_the_file_as_given(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("gpus: 2\ncommand: [true]\nworkers: x\n")
    with pytest.raises(JobFileError) as caught:
        load_job_file(path)
    assert str(caught.value) == f"{path}:3: workers: expected a whole number, got the text 'x'"


# ---------------------------------------------------------------------- flags and overrides


def test_flags_override_the_file() -> None:
    base = parse_job_text(FULL).spec
    merged = merge_spec(
        base,
        {
            "gpus": 1,
            "name": "other",
            "command": ["sleep", "1"],
            "env": {"PORT": "9090", "EXTRA": "1"},
            "checkpoint": {"grace_s": 5.0},
            "elastic": {"min": 1, "max": 8},
        },
    )
    assert merged["gpus"] == 1
    assert merged["name"] == "other"
    assert merged["command"] == ["sleep", "1"]
    assert merged["env"] == {"NCCL_DEBUG": "WARN", "PORT": "9090", "EXTRA": "1"}
    assert merged["checkpoint"] == {"signal": "SIGUSR1", "grace_s": 5.0}
    assert merged["elastic"] == {"min": 1, "max": 8}
    assert merged["workers"] == 4  # untouched fields stay
    assert base["gpus"] == 2 and base["env"] == {"NCCL_DEBUG": "WARN", "PORT": "8080"}


def test_overrides_without_a_file() -> None:
    assert merge_spec({}, {"env": {"A": "1"}, "checkpoint": {"signal": "SIGUSR2"}}) == {
        "env": {"A": "1"},
        "checkpoint": {"signal": "SIGUSR2"},
    }


def test_parse_elastic() -> None:
    assert parse_elastic("2:8") == {"min": 2, "max": 8}
    # Ranges are the server's to check: 8:2 reaches it and comes back as a 422.
    assert parse_elastic("8:2") == {"min": 8, "max": 2}
    for bad in ("3", "a:b", "2:", ":4", "1:2:3", ""):
        with pytest.raises(ValueError, match="expected MIN:MAX workers, such as 2:8"):
            parse_elastic(bad)


def test_parse_env_pairs() -> None:
    assert parse_env_pairs(["A=1", "B=x=y", "C=", "A=2"]) == {"A": "2", "B": "x=y", "C": ""}
    for bad in ("A", "=1"):
        with pytest.raises(ValueError, match=f"expected KEY=VALUE, got {bad!r}"):
            parse_env_pairs([bad])


def test_split_command() -> None:
    assert split_command("a 'b c'") == ["a", "b c"]
    with pytest.raises(ValueError, match="the command is empty"):
        split_command("   ")
    with pytest.raises(ValueError, match="No closing quotation"):
        split_command("a 'b")


# ---------------------------------------------------------------------- the examples


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_example_job_files_parse(path: Path) -> None:
    job = load_job_file(path)
    assert job.spec["command"][0] == "python"
    script = EXAMPLES.parent.parent / job.spec["command"][1]
    assert script.is_file(), f"{path.name} runs {script}, which is missing"
    assert path.read_text().startswith("#"), f"{path.name} has no comment header"


def test_the_seed_four_worker_jobs() -> None:
    for model in ("vgg16", "resnet50"):
        spec = load_job_file(EXAMPLES / f"{model}-4gpu.yaml").spec
        assert (spec["workers"], spec["gpus"], spec["locality"]) == (4, 1, "node")
        assert spec["command"][1:4] == ["examples/jobs/ddp_train.py", "--model", model]


# Aliases: `command: &a [*a, *a]` grew the CLI to 822 MB in 20 s, nine aliases of nine never
# finished (issue 33, finding 4). Refused now from the composed nodes, before any expansion.
LAUGHS = "a0: &a0 [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]\n" for i in range(1, 9)
)


@pytest.mark.parametrize(
    ("text", "line", "problem"),
    [
        ("command: &a [*a, *a]\n", 1, "an alias refers to a value that holds it"),
        ("env: &e {A: *e}\n", 1, "an alias refers to a value that holds it"),
        # Line 6, a5: the first value past the bound (597,871 values).
        (LAUGHS + "command: *a8\n", 6, "its aliases expand to more than 200,000 values"),
    ],
    ids=["self", "self-map", "nine-of-nine"],
)
def test_aliases_that_expand_without_bound_are_refused(text: str, line: int, problem: str) -> None:
    with pytest.raises(JobFileError) as caught:
        parse_job_text(text, "job.yaml")
    assert caught.value.line == line
    assert problem in str(caught.value)


def test_aliases_of_long_text_are_bounded_by_its_expanded_size() -> None:
    # A few hundred aliases, well under the count of values, each of 200,000 characters: a
    # 1.1 MB file of this kind reached a 4 GiB MemoryError when counted by values alone.
    text = f"env:\n  A: &t {'x' * 200_000}\ncommand: [{', '.join(['*t'] * 200)}]\n"
    with pytest.raises(JobFileError) as caught:
        parse_job_text(text, "job.yaml")
    assert caught.value.line == 3
    assert "its aliases expand to more than 33,554,432 characters" in str(caught.value)


def test_nesting_past_the_bound_is_refused_without_a_traceback() -> None:
    deep = "command: " + "[" * 3000 + "x" + "]" * 3000 + "\n"
    with pytest.raises(JobFileError) as caught:
        parse_job_text(deep, "job.yaml")
    assert caught.value.line == 1
    assert "nests lists and mappings more than 100 deep" in str(caught.value)
    nested = "env: " + "{a: " * 99 + "x" + "}" * 99 + "\n"  # 100 with the file's own mapping
    with pytest.raises(JobFileError, match="expected text, got a mapping"):
        parse_job_text(nested, "job.yaml")


def test_aliases_within_bounds_are_read() -> None:
    job = parse_job_text("command: [python, &s train.py, *s]\n", "job.yaml")
    assert job.spec["command"] == ["python", "train.py", "train.py"]
