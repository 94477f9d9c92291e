"""Trace readers and the synthetic generator: exact jobs on small fixtures, every error, Philly."""

from __future__ import annotations

import csv
import math
import statistics
from collections import Counter
from pathlib import Path

import pytest

from toposched.perf import PerfModel
from toposched.sim.traces import (
    ACME_SEREN,
    DEFAULT_MODEL_MIX,
    DEFAULT_QUEUE,
    FORMATS,
    MODEL_NAMES,
    SEREN_SPAN_S,
    Trace,
    TraceError,
    calibrate,
    detect_format,
    read_trace,
    synthetic_trace,
)

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "traces"
PHILLY_FULL = ROOT / "data" / "traces" / "philly" / "philly.csv"
ACME_SUMMARY = ROOT / "data" / "traces" / "acme" / "cluster_summary.csv"

# (name, submit_s, gpus, duration_s, queue, source_line), worked out by hand from the rows.
PHILLY_GOOD = [
    # The earliest row, 2017-09-29 07:58:32, is line 4; offsets count from it.
    ("philly-4", 0.0, 1, 860662.0, "6c71a0", 4),
    ("philly-18", 582663.0, 16, 195.0, "11cb48", 18),  # 10-06 01:49:35: 7 d - 26,137 s
    ("philly-20", 628734.0, 32, 55625.0, "2869ce", 20),  # 10-06 14:37:26
    ("philly-15", 660534.0, 4, 197281.0, "103959", 15),  # 10-06 23:27:26
    ("philly-16", 666787.0, 8, 193256.0, "ee9e8c", 16),  # 10-07 01:11:39
    ("philly-13", 852342.0, 1, 7944.0, "6214e9", 13),  # 10-09 04:44:14: 10 d - 11,658 s
    ("philly-14", 856375.0, 2, 13.0, "11cb48", 14),  # 10-09 05:51:27
    ("philly-10", 856940.0, 1, 2859.0, "6214e9", 10),  # 10-09 06:00:52
    ("philly-11", 857561.0, 1, 2987.0, "6214e9", 11),  # 10-09 06:11:13
    ("philly-3", 857671.0, 1, 2951.0, "6214e9", 3),  # 10-09 06:13:03
    ("philly-5", 857704.0, 1, 2759.0, "6214e9", 5),  # 10-09 06:13:36
    ("philly-7", 857781.0, 1, 2775.0, "6214e9", 7),  # 10-09 06:14:53
    ("philly-12", 857788.0, 1, 2679.0, "6214e9", 12),  # 10-09 06:15:00
    ("philly-8", 857801.0, 1, 2802.0, "6214e9", 8),  # 10-09 06:15:13
    ("philly-6", 857851.0, 1, 2766.0, "6214e9", 6),  # 10-09 06:16:03
    ("philly-9", 860529.0, 1, 64.0, "11cb48", 9),  # 10-09 07:00:41
    ("philly-2", 860603.0, 1, 66.0, "11cb48", 2),  # 10-09 07:01:55
    ("philly-19", 2436615.0, 24, 686.0, "e13805", 19),  # 10-27 12:48:47: 28 d + 17,415 s
    ("philly-17", 2436640.0, 12, 1257.0, "e13805", 17),  # 10-27 12:49:12
    ("philly-21", 6395624.0, 64, 3173.0, "ee9e8c", 21),  # 12-12 08:32:16: 74 d + 2,024 s
    ("philly-22", 6442800.0, 128, 7673.0, "ee9e8c", 22),  # 12-12 21:38:32
]

# duration = deletion_time - scheduled_time; submit = creation_time (the first pod is at 0).
OPENB_GOOD = [
    ("openb-pod-0000", 0.0, 1, 12537496.0, DEFAULT_QUEUE, 2),
    ("openb-pod-0001", 427061.0, 1, 12475899.0, DEFAULT_QUEUE, 3),  # gpu_milli 460 -> 1 GPU
    ("openb-pod-0002", 1558381.0, 1, 11344579.0, DEFAULT_QUEUE, 4),
    ("openb-pod-0003", 2690044.0, 1, 10212916.0, DEFAULT_QUEUE, 5),
    ("openb-pod-0004", 2758084.0, 1, 10144876.0, DEFAULT_QUEUE, 6),
    # line 7: pod 0005 asks for no GPU
    ("openb-pod-0006", 3019330.0, 1, 8795832.0, DEFAULT_QUEUE, 8),  # scheduled 1 s late
    ("openb-pod-0007", 3019932.0, 1, 9883028.0, DEFAULT_QUEUE, 9),
    ("openb-pod-0008", 4130198.0, 1, 8772762.0, DEFAULT_QUEUE, 10),
    ("openb-pod-0009", 4975773.0, 1, 7927187.0, DEFAULT_QUEUE, 11),
    ("openb-pod-0010", 5182092.0, 1, 4822049.0, DEFAULT_QUEUE, 12),
    ("openb-pod-0011", 6394537.0, 1, 6508423.0, DEFAULT_QUEUE, 13),
    ("openb-pod-0012", 6588193.0, 1, 4363714.0, DEFAULT_QUEUE, 14),  # scheduled 7,338 s late
    ("openb-pod-0013", 6976821.0, 1, 3673287.0, DEFAULT_QUEUE, 15),
    ("openb-pod-0014", 8387257.0, 1, 3023599.0, DEFAULT_QUEUE, 16),
    ("openb-pod-0015", 8396307.0, 1, 4506650.0, DEFAULT_QUEUE, 17),
    # line 18: pod 0016 asks for no GPU
    ("openb-pod-0017", 9437497.0, 8, 1332357.0, DEFAULT_QUEUE, 19),
    ("openb-pod-0018", 9476974.0, 1, 3425986.0, DEFAULT_QUEUE, 20),
    ("openb-pod-0033", 9965463.0, 1, 182.0, DEFAULT_QUEUE, 21),
    # line 22: pod 0061 was never scheduled
    ("openb-pod-0422", 10195438.0, 2, 1707.0, DEFAULT_QUEUE, 23),
    ("openb-pod-2182", 10793686.0, 4, 6710.0, DEFAULT_QUEUE, 24),
]

# Offsets from 2020-06-09 18:40:30 (job 1425515, line 6); durations = end_time - start_time.
HELIOS_GOOD = [
    ("1425515", 0.0, 16, 7200.0, "vcEwI", 6),
    ("1425511", 31.0, 1, 36848.0, "vcJkd", 2),
    ("1425512", 57.0, 4, 249.0, "vchbv", 3),
    ("1425513", 58.0, 1, 675233.0, "vcpDC", 4),
    ("1425516", 160.0, 8, 86400.0, "vcWoR", 7),
    ("1425517", 160.0, 2, 0.0, "vcWoR", 8),  # same submit: file order
    ("1425518", 19170.0, 1, 100.0, "vcJkd", 9),  # 2020-06-10 00:00:00 = 5 h 19 min 30 s later
]

# Offsets from 2023-03-01 00:18:22+08:00; 2023-02-28 16:30:00+00:00 is 00:30:00+08:00.
SEREN_GOOD = [
    ("5778432", 0.0, 8, 117.0, DEFAULT_QUEUE, 2),
    ("5778473", 0.0, 1, 600.0, DEFAULT_QUEUE, 7),
    ("5778469", 336.0, 8, 2693.0, DEFAULT_QUEUE, 3),
    ("5778472", 698.0, 32, 86400.0, DEFAULT_QUEUE, 6),
]

# The README rows' `duration` (18, 82) includes queueing; end - start is 8 and 70.
KALOS_GOOD = [
    ("dlctk696s0jbvitv", 0.0, 64, 8.0, DEFAULT_QUEUE, 2),
    ("dlcabc0123456789", 542.0, 8, 7200.0, DEFAULT_QUEUE, 4),
    ("dlc1t2ypl09b8qtp", 1664.0, 64, 70.0, DEFAULT_QUEUE, 3),
]

# (name, submit_s, gpus, duration_s, queue, model, source_line)
TIRESIAS_GOOD = [
    ("0", 0.0, 1, 160.0, DEFAULT_QUEUE, "vgg19", 2),
    ("1", 30.0, 8, 150.0, DEFAULT_QUEUE, "vgg11", 3),
    ("2", 50.0, 2, 130.0, DEFAULT_QUEUE, "inception4", 4),
    ("3", 75.0, 4, 120.0, DEFAULT_QUEUE, "resnet50", 5),  # written ResNet50
    ("4", 105.0, 1, 180.0, DEFAULT_QUEUE, "alexnet", 6),
    ("8", 120.0, 1, 600.0, DEFAULT_QUEUE, "lstm", 10),
    ("6", 150.0, 2, 900.0, DEFAULT_QUEUE, "bert-large", 8),
    ("7", 150.0, 8, 3600.0, DEFAULT_QUEUE, "gpt2", 9),
]


def shape(trace: Trace) -> list[tuple[str, float, int, float, str, int]]:
    return [(j.name, j.submit_s, j.gpus, j.duration_s, j.queue, j.source_line) for j in trace.jobs]


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def raised(path: Path, **options: object) -> TraceError:
    with pytest.raises(TraceError) as info:
        read_trace(path, **options)  # type: ignore[arg-type]
    return info.value


# --- each format, exact jobs ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "expected", "reasons"),
    [
        ("philly/good.csv", PHILLY_GOOD, {}),
        ("openb/good.csv", OPENB_GOOD, {"never-started": 1, "no-gpu": 2}),
        ("helios/helios.csv", HELIOS_GOOD, {"no-gpu": 1}),
        ("helios/seren.csv", SEREN_GOOD, {"never-started": 1, "no-gpu": 1}),
        ("helios/kalos.csv", KALOS_GOOD, {}),
    ],
)
def test_traces_without_models_read_exactly(
    fixture: str, expected: list[tuple[str, float, int, float, str, int]], reasons: dict[str, int]
) -> None:
    trace = read_trace(FIXTURES / fixture)
    assert shape(trace) == expected
    assert trace.skip_reasons == reasons
    assert trace.skipped == sum(reasons.values())
    assert trace.path == str(FIXTURES / fixture)
    assert all(job.model in MODEL_NAMES for job in trace.jobs)


def test_tiresias_reads_exactly_with_its_own_models() -> None:
    trace = read_trace(FIXTURES / "tiresias" / "good.csv")
    assert trace.format == "tiresias"
    got = [
        (j.name, j.submit_s, j.gpus, j.duration_s, j.queue, j.model, j.source_line)
        for j in trace.jobs
    ]
    assert got == TIRESIAS_GOOD
    assert trace.skip_reasons == {"no-gpu": 1}
    # The trace names its models, so neither the seed nor a mix changes them.
    other = read_trace(FIXTURES / "tiresias" / "good.csv", seed=7, model_mix={"vgg16": 1.0})
    assert other == trace


def test_tiresias_model_aliases_map_foreign_names(tmp_path: Path) -> None:
    path = FIXTURES / "tiresias" / "aliases.csv"
    # `transformer` and `resnet-50` are aliases of the performance catalog itself.
    trace = read_trace(path)
    assert [(j.name, j.model) for j in trace.jobs] == [("10", "gpt2"), ("11", "resnet50")]
    # The user's aliases come on top, and win.
    mine = read_trace(path, model_aliases={"Transformer": "bert-large"})
    assert [(j.name, j.model) for j in mine.jobs] == [("10", "bert-large"), ("11", "resnet50")]
    odd = tmp_path / "odd.csv"
    odd.write_text(path.read_text().replace("resnet-50", "mystery-net"))
    err = raised(odd)
    assert str(err) == (
        f"{odd}:3: unknown model 'mystery-net'; known: {', '.join(MODEL_NAMES)}; "
        "map other names with model_aliases (column model_name)"
    )
    assert (err.line, err.column) == (3, "model_name")
    assert read_trace(odd, model_aliases={"mystery-net": "alexnet"}).jobs[1].model == "alexnet"


def test_an_alias_to_a_name_outside_the_catalog_is_refused() -> None:
    err = raised(FIXTURES / "tiresias" / "aliases.csv", model_aliases={"transformer": "gpt-4"})
    assert str(err).startswith("model alias 'transformer' -> 'gpt-4': 'gpt-4' is not a catalog")


# --- format registry and auto-detection -------------------------------------------------------


def test_registry_lists_every_format_with_a_one_line_description() -> None:
    assert list(FORMATS) == ["philly", "helios", "tiresias", "openb"]
    for name, fmt in FORMATS.items():
        assert fmt.name == name
        assert fmt.description and "\n" not in fmt.description and len(fmt.description) < 100


@pytest.mark.parametrize(
    ("fixture", "format"),
    [
        ("philly/good.csv", "philly"),
        ("openb/good.csv", "openb"),
        ("helios/helios.csv", "helios"),
        ("helios/seren.csv", "helios"),
        ("helios/kalos.csv", "helios"),
        ("tiresias/good.csv", "tiresias"),
    ],
)
def test_format_is_detected_from_the_header(fixture: str, format: str) -> None:
    detected = read_trace(FIXTURES / fixture)
    assert detected.format == format
    assert read_trace(FIXTURES / fixture, format) == detected


def test_detect_format_matches_signatures() -> None:
    assert [f.name for f in detect_format(["timestamp", "num_gpus"])] == ["philly"]
    assert detect_format(["a", "b"]) == []
    both = ["job_id", "gpu_num", "num_gpu"]
    assert [f.name for f in detect_format(both)] == ["helios", "tiresias"]


def test_bom_and_crlf_line_ends_read_the_same(tmp_path: Path) -> None:
    text = (FIXTURES / "philly" / "good.csv").read_text(encoding="utf-8")
    path = tmp_path / "dos.csv"
    path.write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    assert shape(read_trace(path)) == PHILLY_GOOD


# --- errors: file and header ------------------------------------------------------------------


def test_empty_file(tmp_path: Path) -> None:
    for text in ("", "\n\n  \n"):
        path = write(tmp_path, text)
        err = raised(path)
        assert str(err) == f"{path}: empty file: expected a CSV header line"


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.csv"
    assert str(raised(path)) == f"{path}: cannot read the file: No such file or directory"


def test_unknown_header_lists_the_known_formats(tmp_path: Path) -> None:
    path = write(tmp_path, "when,how_long,gpus\n1,2,3\n")
    err = raised(path)
    assert str(err).startswith(
        f"{path}:1: cannot tell the trace format from the header 'when,how_long,gpus'; "
        "pass format=, known formats: philly (Microsoft Philly"
    )
    for name, fmt in FORMATS.items():
        assert f"{name} ({fmt.description})" in str(err)


def test_a_header_that_fits_two_formats_is_ambiguous(tmp_path: Path) -> None:
    path = write(tmp_path, "job_id,gpu_num,num_gpu\n")
    assert str(raised(path)) == (
        f"{path}:1: the header 'job_id,gpu_num,num_gpu' fits several formats "
        "(helios, tiresias); pass format="
    )


def test_data_without_a_header_is_not_guessed(tmp_path: Path) -> None:
    path = write(tmp_path, "2017-10-09 07:01:55,66.0,1,66.0,11cb48\n")
    assert "cannot tell the trace format from the header '2017-10-09 07:01:55,66.0" in str(
        raised(path)
    )


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ("timestamp,,num_gpus", "header field 2 is empty"),
        ("timestamp,duration,Duration,num_gpus", "header names column 'duration' twice"),
    ],
)
def test_malformed_headers(tmp_path: Path, header: str, message: str) -> None:
    path = write(tmp_path, "\n" + header + "\n")
    err = raised(path)
    assert str(err) == f"{path}:2: {message}"
    assert err.line == 2


def test_missing_columns_are_named(tmp_path: Path) -> None:
    path = write(tmp_path, "timestamp,num_gpus,gpu_time\n2017-10-09 07:01:55,1,66.0\n")
    assert str(raised(path)) == (
        f"{path}:1: missing columns duration, cluster for format philly "
        "(it needs timestamp, duration, num_gpus, cluster)"
    )


def test_an_explicit_format_is_checked_against_the_header() -> None:
    path = FIXTURES / "philly" / "good.csv"
    assert str(raised(path, format="tiresias")).startswith(
        f"{path}:1: missing columns job_id, num_gpu, submit_time, model_name for format tiresias"
    )


def test_openb_lists_without_times_are_refused_with_a_hint() -> None:
    path = FIXTURES / "openb" / "multigpu50_head.csv"
    assert str(raised(path)) == (
        f"{path}:1: missing columns creation_time, deletion_time for format openb (it needs "
        "name, num_gpu, gpu_milli, creation_time, deletion_time); the resampled openb pod "
        "lists (e.g. openb_pod_list_multigpu50.csv) have no times, so they cannot be replayed; "
        "use openb_pod_list_default.csv"
    )


def test_binary_and_nul_content(tmp_path: Path) -> None:
    gz = tmp_path / "trace.csv.gz"
    gz.write_bytes(b"\x1f\x8b\x08\x00\xff\xfe\x00\x80")
    assert str(raised(gz)) == f"{gz}:1: not UTF-8 text (is this a compressed or binary file?)"
    header = "job_id,num_gpu,submit_time,model_name,duration\n"
    nul = write(tmp_path, header + "0,1,0,vgg16,5\0\n", "nul.csv")
    assert str(raised(nul)) == f"{nul}:2: '5\\x00' is not a number (column duration)"
    huge = write(tmp_path, header + "0,1,0,vgg16,5\n1,1,0," + "x" * 200_000 + ",5\n", "huge.csv")
    assert str(raised(huge)).startswith(f"{huge}:3: not valid CSV: field larger than field limit")


def test_bad_options_are_refused_before_reading(tmp_path: Path) -> None:
    path = FIXTURES / "philly" / "good.csv"
    assert str(raised(path, format="slurm")).startswith(
        "unknown trace format 'slurm'; known formats: philly ("
    )
    assert str(raised(path, limit=-1)) == "limit must be >= 0, got -1"
    assert str(raised(path, model_mix={"vgg16": 1.0, "gpt-4": 1.0})).startswith(
        "model mix: unknown model 'gpt-4'; known: vgg11, vgg16"
    )
    assert str(raised(path, model_mix={"vgg16": -1.0})) == (
        "model mix: weight of 'vgg16' must be a number >= 0"
    )
    assert str(raised(path, model_mix={"vgg16": 0.0})) == (
        "model mix: needs at least one model with a weight > 0"
    )


# --- errors: rows -----------------------------------------------------------------------------

# (fixture, line, message): the bad rows of each bad fixture, each read on its own after the
# header, so it sits on line 2 of a file of two lines.
ROW_ERRORS = [
    ("philly", 3, "'2017-13-09 06:13:03' is not a date-time like 2017-10-09 07:01:55", "timestamp"),
    ("philly", 5, "'two' is not a whole number", "num_gpus"),
    ("philly", 6, "'-2766.0' is negative", "duration"),
    ("philly", 7, "found 4 fields, the header has 5 (no value for cluster)", None),
    ("philly", 8, "empty value", "cluster"),
    ("openb", 3, "1460 is over 1000 (one whole GPU)", "gpu_milli"),
    ("openb", 4, "1558380 is before scheduled_time 1558381", "deletion_time"),
    ("openb", 6, "'-1' is negative", "num_gpu"),
    ("openb", 8, "empty value", "creation_time"),
    ("openb", 9, "found 12 fields, the header has 11 (1 extra after the last column, "
     "scheduled_time)", None),
    ("helios", 3, "'yesterday' is neither seconds nor a date-time like 2020-06-09 18:41:01",
     "submit_time"),
    ("helios", 4, "'-2' is negative", "gpu_num"),
    ("helios", 5, "end is before start_time 2020-06-09 18:52:00", "end_time"),
    ("helios", 6, "empty value", "vc"),
    ("helios", 8, "found 8 fields, the header has 12 (no value for start_time, end_time, "
     "duration, queue)", None),
    ("tiresias", 3, f"unknown model 'mystery-net'; known: {', '.join(MODEL_NAMES)}; map other "
     "names with model_aliases", "model_name"),
    ("tiresias", 4, "'1.5' is not a whole number", "num_gpu"),
    ("tiresias", 6, "'soon' is not a number", "submit_time"),
    ("tiresias", 7, "empty value", "model_name"),
    ("tiresias", 8, "'inf' is not a finite number", "duration"),
]  # fmt: skip


@pytest.mark.parametrize(("fixture", "line", "message", "column"), ROW_ERRORS)
def test_each_bad_row_is_named_by_path_line_and_column(
    tmp_path: Path, fixture: str, line: int, message: str, column: str | None
) -> None:
    lines = (FIXTURES / fixture / "bad.csv").read_text(encoding="utf-8").splitlines()
    path = write(tmp_path, f"{lines[0]}\n{lines[line - 1]}\n")
    err = raised(path)
    where = f" (column {column})" if column else ""
    assert str(err) == f"{path}:2: {message}{where}"
    assert (err.path, err.line, err.column) == (str(path), 2, column)


@pytest.mark.parametrize(
    ("fixture", "line", "message"),
    [
        ("philly", 3, "'2017-13-09 06:13:03' is not a date-time like 2017-10-09 07:01:55 "
         "(column timestamp)"),
        ("openb", 3, "1460 is over 1000 (one whole GPU) (column gpu_milli)"),
        ("helios", 3, "'yesterday' is neither seconds nor a date-time like 2020-06-09 18:41:01 "
         "(column submit_time)"),
        ("tiresias", 3, f"unknown model 'mystery-net'; known: {', '.join(MODEL_NAMES)}; "
         "map other names with model_aliases (column model_name)"),
    ],
)  # fmt: skip
def test_a_bad_file_stops_at_its_first_bad_row(fixture: str, line: int, message: str) -> None:
    path = FIXTURES / fixture / "bad.csv"
    before = path.read_bytes()
    assert str(raised(path)) == f"{path}:{line}: {message}"
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("fixture", "column", "first_line"),
    [("openb", "name", 2), ("helios", "job_id", 2), ("tiresias", "job_id", 2)],
)
def test_duplicate_job_names(tmp_path: Path, fixture: str, column: str, first_line: int) -> None:
    lines = (FIXTURES / fixture / "bad.csv").read_text(encoding="utf-8").splitlines()
    duplicate = {"openb": 5, "helios": 7, "tiresias": 5}[fixture]
    path = write(tmp_path, "\n".join([lines[0], lines[1], lines[duplicate - 1]]) + "\n")
    name = lines[1].split(",")[0]
    assert str(raised(path)) == (
        f"{path}:3: job name {name!r} is already used on line {first_line} (column {column})"
    )


# --- skipping bad rows ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "names", "reasons"),
    [
        (
            "philly",
            ["philly-4", "philly-12", "philly-10", "philly-2"],
            {"bad-value": 3, "field-count": 1, "missing-value": 1, "no-gpu": 1},
        ),
        (
            "openb",
            ["openb-pod-0000", "openb-pod-0422"],
            {
                "bad-value": 3,
                "duplicate-name": 1,
                "field-count": 1,
                "missing-value": 1,
                "never-started": 1,
                "no-gpu": 1,
            },
        ),
        (
            "helios",
            ["1425511", "1425518"],
            {"bad-value": 3, "duplicate-name": 1, "field-count": 1, "missing-value": 1},
        ),
        (
            "tiresias",
            ["0", "8"],
            {"bad-value": 3, "duplicate-name": 1, "missing-value": 1, "unknown-model": 1},
        ),
    ],
)
def test_skip_bad_skips_and_counts_by_kind(
    fixture: str, names: list[str], reasons: dict[str, int]
) -> None:
    trace = read_trace(FIXTURES / fixture / "bad.csv", skip_bad=True)
    assert [job.name for job in trace.jobs] == names
    assert trace.skip_reasons == reasons
    assert trace.skipped == sum(reasons.values())
    assert trace.jobs[0].submit_s == 0.0


def test_skipped_philly_rows_keep_the_good_ones_exact() -> None:
    trace = read_trace(FIXTURES / "philly" / "bad.csv", skip_bad=True)
    # 2017-09-29 07:58:32 (line 4) is the origin; line 12 is 05:51:27 on 10-09.
    assert shape(trace) == [
        ("philly-4", 0.0, 1, 860662.0, "6c71a0", 4),
        ("philly-12", 856375.0, 2, 13.0, "11cb48", 12),
        ("philly-10", 856940.0, 1, 2859.0, "6214e9", 10),
        ("philly-2", 860603.0, 1, 66.0, "11cb48", 2),
    ]


# --- limit and model draws --------------------------------------------------------------------


def test_limit_keeps_the_first_jobs_in_submit_order() -> None:
    path = FIXTURES / "philly" / "good.csv"
    full = read_trace(path, seed=3)
    assert read_trace(path, seed=3, limit=5).jobs == full.jobs[:5]
    assert read_trace(path, limit=0).jobs == ()
    assert read_trace(path, seed=3, limit=100) == full


def test_limit_still_checks_the_whole_file() -> None:
    path = FIXTURES / "philly" / "bad.csv"
    assert raised(path, limit=1).line == 3


def test_model_draws_are_deterministic_for_a_seed() -> None:
    path = FIXTURES / "philly" / "good.csv"
    models = [job.model for job in read_trace(path, seed=11).jobs]
    assert models == [job.model for job in read_trace(path, seed=11).jobs]
    assert models != [job.model for job in read_trace(path, seed=12).jobs]
    assert set(models) <= set(MODEL_NAMES)


def test_a_model_mix_is_honoured() -> None:
    path = FIXTURES / "openb" / "good.csv"
    only = read_trace(path, model_mix={"vgg16": 2.0, "lstm": 0.0})
    assert {job.model for job in only.jobs} == {"vgg16"}
    two = read_trace(path, seed=5, model_mix={"vgg16": 1.0, "resnet50": 1.0})
    assert {job.model for job in two.jobs} == {"vgg16", "resnet50"}


def test_the_default_mix_is_uniform_over_the_catalog() -> None:
    assert dict(DEFAULT_MODEL_MIX) == dict.fromkeys(MODEL_NAMES, 1.0)
    # Every name a trace may carry is one the performance model can price.
    known = PerfModel().catalog
    for name in MODEL_NAMES:
        assert known.model(name).name == name


# --- the whole Philly trace -------------------------------------------------------------------


def test_the_full_philly_trace() -> None:
    trace = read_trace(PHILLY_FULL)
    assert trace.format == "philly"
    assert len(trace.jobs) == 82_247
    assert (trace.skipped, trace.skip_reasons) == (0, {})
    mix = Counter(job.gpus for job in trace.jobs)
    assert dict(sorted(mix.items())) == {
        1: 76_627,
        2: 1_818,
        4: 1_870,
        8: 1_643,
        12: 7,
        16: 199,
        24: 7,
        32: 67,
        64: 6,
        128: 3,
    }
    submits = [job.submit_s for job in trace.jobs]
    assert submits[0] == 0.0 and submits == sorted(submits)
    # 2017-09-04 10:30:41 .. 2017-12-22 08:02:11
    assert submits[-1] == 108 * 86_400 + 77_490.0
    assert len({job.queue for job in trace.jobs}) == 15
    assert len({job.name for job in trace.jobs}) == 82_247
    assert statistics.median(job.duration_s for job in trace.jobs) == 1144.0
    # Every catalog model is drawn about equally often (1/13 = 7.7% each).
    share = Counter(job.model for job in trace.jobs)
    assert set(share) == set(MODEL_NAMES)
    assert all(0.07 < n / 82_247 < 0.084 for n in share.values())


# --- the synthetic generator ------------------------------------------------------------------


def test_acme_seren_is_the_fit_of_the_summary() -> None:
    with ACME_SUMMARY.open(newline="") as handle:
        rows = {row["id"]: row for row in csv.DictReader(handle)}
    fitted = calibrate(rows["Seren"], SEREN_SPAN_S, "acme-seren")
    assert fitted.name == ACME_SEREN.name
    assert fitted.gpu_sizes == ACME_SEREN.gpu_sizes
    for ours, theirs in zip(fitted.gpu_probs, ACME_SEREN.gpu_probs, strict=True):
        assert ours == pytest.approx(theirs, rel=1e-5)
    for field in ("mu", "beta", "sigma", "min_duration_s", "max_duration_s", "rate_per_s"):
        assert getattr(fitted, field) == pytest.approx(getattr(ACME_SEREN, field), rel=1e-5)
    # The law's moments are the summary's: mean GPUs 5.68 with at least half 1-GPU jobs.
    probs, sizes = fitted.gpu_probs, fitted.gpu_sizes
    assert sum(p * g for p, g in zip(probs, sizes, strict=True)) == pytest.approx(5.68)
    assert probs[0] == 0.5
    assert fitted.rate_per_s == pytest.approx(663_813 / (184 * 86_400))


def test_calibrate_refuses_rows_it_cannot_fit() -> None:
    with ACME_SUMMARY.open(newline="") as handle:
        rows = {row["id"]: row for row in csv.DictReader(handle)}
    with pytest.raises(ValueError, match="median of 1 GPU"):
        calibrate(rows["PAI"], SEREN_SPAN_S, "pai")


def test_synthetic_trace_is_deterministic_for_a_seed() -> None:
    first = synthetic_trace(500, seed=42)
    assert first == synthetic_trace(500, seed=42)
    assert first != synthetic_trace(500, seed=43)
    assert first.format == "synthetic" and first.path == "synthetic:acme-seren"
    assert (first.skipped, first.skip_reasons) == (0, {})
    submits = [job.submit_s for job in first.jobs]
    assert submits[0] == 0.0 and submits == sorted(submits)
    assert [job.name for job in first.jobs[:2]] == ["syn-0", "syn-1"]
    assert [job.source_line for job in first.jobs[:2]] == [1, 2]
    assert {job.queue for job in first.jobs} == {DEFAULT_QUEUE}
    assert {job.model for job in first.jobs} <= set(MODEL_NAMES)


def test_synthetic_trace_matches_the_summary_it_was_fitted_to() -> None:
    jobs = synthetic_trace(100_000, seed=1).jobs
    durations = [job.duration_s for job in jobs]
    gpus = [job.gpus for job in jobs]
    # Tolerances are several standard errors of each statistic at this size (heavy tails).
    assert statistics.median(durations) == pytest.approx(122.0, rel=0.03)
    assert statistics.fmean(durations) == pytest.approx(1414.3, rel=0.08)
    assert statistics.fmean(gpus) == pytest.approx(5.68, rel=0.06)
    assert sum(g == 1 for g in gpus) / len(gpus) == pytest.approx(0.5, abs=0.01)
    assert max(durations) <= 1_209_604.0 and min(durations) >= 1.0
    assert set(gpus) <= {1 << k for k in range(11)}
    rate = (len(jobs) - 1) / jobs[-1].submit_s
    assert rate == pytest.approx(0.0417555, rel=0.02)


def test_synthetic_options() -> None:
    capped = synthetic_trace(2_000, seed=3, max_gpus=64, rate_per_s=1.0, queues=("a", "b"))
    assert max(job.gpus for job in capped.jobs) <= 64
    assert {job.queue for job in capped.jobs} == {"a", "b"}
    assert capped.jobs[-1].submit_s == pytest.approx(2_000, rel=0.1)
    vgg = synthetic_trace(50, seed=3, model_mix={"vgg19": 1.0})
    assert {job.model for job in vgg.jobs} == {"vgg19"}
    assert synthetic_trace(0, seed=3).jobs == ()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"jobs": -1}, "synthetic trace: jobs must be >= 0, got -1"),
        ({"rate_per_s": 0.0}, "synthetic trace: rate_per_s must be a number > 0, got 0.0"),
        ({"rate_per_s": math.nan}, "synthetic trace: rate_per_s must be a number > 0, got nan"),
        ({"queues": ()}, "synthetic trace: queues must be one or more non-empty names"),
        ({"max_gpus": 0}, "synthetic trace: max_gpus=0 is below the smallest size 1"),
    ],
)
def test_synthetic_bad_options(options: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"jobs": 10, "seed": 0, **options}
    with pytest.raises(TraceError) as info:
        synthetic_trace(**arguments)  # type: ignore[arg-type]
    assert str(info.value) == message
