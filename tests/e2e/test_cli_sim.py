"""`toposched sim` as a user runs it: JSON keys, the files it writes, clear errors."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from pathlib import Path

from tests.e2e.conftest import Result

ROOT = Path(__file__).resolve().parents[2]
PHILLY = str(ROOT / "data" / "traces" / "philly" / "philly.csv")
KEYS = {
    "jobs",
    "finished",
    "avg_jct_s",
    "p50_jct_s",
    "p99_jct_s",
    "avg_queue_s",
    "makespan_s",
    "gpu_alloc_util",
    "effective_util",
    "placement_quality_mean",
    "preemptions",
    "migrations",
    "max_wait_s",
    "partial_hold_gpu_hours",
    "preemptions_per_job",
    "preemptions_per_job_p99",
    "stopped_share",
    "lost_gpu_hours",
    "wall_s",
}


def test_sim_json_and_files(cli: Callable[..., Result], tmp_path: Path) -> None:
    out = tmp_path / "run"
    r = cli(
        "sim", "--trace", PHILLY, "--cluster", "4*dgx1-v100/2", "--limit", "60",
        "--policy", "toposched,k8s-default", "--out", str(out), "--json",
    )  # fmt: skip
    assert r.code == 0, r.err
    policies = r.json()["policies"]
    assert set(policies) == {"toposched", "k8s-default"}
    for figures in policies.values():
        assert set(figures) >= KEYS
        assert figures["jobs"] == 60
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["policies"]["toposched"]["finished"] == policies["toposched"]["finished"]
    with (out / "jobs-toposched.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 60 and {"jct_s", "placement_quality", "state"} <= set(rows[0])
    for plot in ("jct_cdf.png", "utilisation.png", "queue_length.png"):
        assert (out / plot).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_what_stops_cost_is_a_workload_parameter(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    def lost(*flags: str) -> dict[str, float]:
        r = cli(
            "sim", "--trace", PHILLY, "--cluster", "2*dgx1-v100", "--limit", "80",
            "--policy", "toposched", "--out", str(tmp_path), "--no-plots", "--json", *flags,
        )  # fmt: skip
        assert r.code == 0, r.err
        figures: dict[str, float] = r.json()["policies"]["toposched"]
        return figures

    cheap = lost("--checkpoint-every", "1", "--restore", "0")
    dear = lost("--checkpoint-every", "3600", "--restore", "600")
    assert cheap["preemptions"] > 0, "the workload must stop some jobs for this to say anything"
    assert cheap["lost_gpu_hours"] < dear["lost_gpu_hours"]
    assert 0 < dear["stopped_share"] <= 1
    assert dear["preemptions_per_job"] == dear["preemptions"] / dear["jobs"]
    for flags, said in (
        (("--checkpoint-every", "0"), "--checkpoint-every must be a positive number"),
        (("--restore", "-1"), "--restore must be a number of seconds >= 0"),
    ):
        r = cli(
            "sim", "--trace", PHILLY, "--cluster", "2*dgx1-v100", "--out", str(tmp_path), *flags
        )
        assert r.code != 0 and said in r.err, r.err


def test_sim_table(cli: Callable[..., Result], tmp_path: Path) -> None:
    r = cli(
        "sim", "--trace", PHILLY, "--cluster", "2*dgx1-v100", "--limit", "20",
        "--policy", "toposched", "--out", str(tmp_path), "--no-plots",
    )  # fmt: skip
    assert r.code == 0, r.err
    assert "avg JCT h" in r.out and "placement quality" in r.out


def test_sim_bad_input(cli: Callable[..., Result], tmp_path: Path) -> None:
    r = cli("sim", "--trace", PHILLY, "--cluster", "2*dgx1-v100", "--policy", "nope")
    assert r.code == 2 and "unknown" in r.err and "toposched" in r.err
    bad = tmp_path / "bad.csv"
    bad.write_text("timestamp,duration,num_gpus,gpu_time,cluster\n2017-10-09 07:01:55,x,1,66,a\n")
    r = cli("sim", "--trace", str(bad), "--cluster", "2*dgx1-v100", "--out", str(tmp_path))
    assert r.code == 2 and "bad.csv:2" in r.err, r.err
    r = cli("sim", "--trace", PHILLY, "--cluster", "2*nope", "--out", str(tmp_path))
    assert r.code == 2 and "nope" in r.err


def test_sim_param_sets_one_policy_or_all(cli: Callable[..., Result], tmp_path: Path) -> None:
    def run(*params: str) -> dict[str, dict[str, float]]:
        r = cli(
            "sim", "--trace", PHILLY, "--cluster", "4*dgx1-v100", "--limit", "300",
            "--policy", "toposched,hived-like", "--out", str(tmp_path), "--no-plots", "--json",
            *params,
        )  # fmt: skip
        assert r.code == 0, r.err
        return dict(r.json()["policies"])

    plain = run()
    # Least attained service preempts on this overloaded slice; off, toposched preempts none.
    assert plain["toposched"]["preemptions"] > 0
    off = run("--param", "toposched.demote_after_gpu_h=null")
    assert off["toposched"]["preemptions"] == 0
    assert off["hived-like"] == {**plain["hived-like"], "wall_s": off["hived-like"]["wall_s"]}


def test_sim_param_errors(cli: Callable[..., Result], tmp_path: Path) -> None:
    base = ("sim", "--trace", PHILLY, "--cluster", "2*dgx1-v100", "--limit", "5",
            "--policy", "toposched,gandiva-like", "--out", str(tmp_path), "--no-plots")  # fmt: skip
    for param, message in (
        ("bogus=1", "policy 'toposched' has no parameter 'bogus'; valid: gang,"),
        ("hived-like.x=1", "'hived-like' is not one of the policies run (toposched, gandiva"),
        ("toposched.pack_above=high", "must be a number, got 'high'"),
        ("gandiva-like.demote_after_gpu_h=8", "demote_after_gpu_h needs order 'fair'"),
        ("demote_after_gpu_h", "--param takes [POLICY.]KEY=VALUE"),
        ("toposched.stop_grace_s=nan", "stop_grace_s must be a finite number, got nan"),
        # Without POLICY the parameter goes to every policy run, and the error names the one.
        ("demote_after_gpu_h=4", "policy 'gandiva-like': demote_after_gpu_h needs order"),
    ):
        r = cli(*base, "--param", param)
        assert r.code == 2 and message in r.err, (param, r.err)


def test_sim_reads_an_extra_catalog(cli: Callable[..., Result], tmp_path: Path) -> None:
    """`--catalog` adds to the performance catalog (as `perf fit --out` writes one): a network
    profile only it defines can be named, and its mistakes name the file."""
    catalog = tmp_path / "lab.yaml"
    catalog.write_text("networks:\n  lab-10g:\n    bandwidth_gbps: 1.1\n    latency_us: 20\n")
    base = ["sim", "--trace", PHILLY, "--cluster", "2*dgx1-v100", "--limit", "20"]
    base += ["--policy", "toposched", "--out", str(tmp_path / "run"), "--no-plots", "--json"]
    r = cli(*base, "--network", "lab-10g")
    assert r.code == 2 and "lab-10g" in r.err
    r = cli(*base, "--network", "lab-10g", "--catalog", str(catalog))
    assert r.code == 0, r.err
    assert r.json()["policies"]["toposched"]["jobs"] == 20
    broken = tmp_path / "broken.yaml"
    broken.write_text("networks: [oops\n")
    r = cli(*base, "--catalog", str(broken))
    assert r.code == 2 and "broken.yaml" in r.err, r.err


def test_a_deadlocked_policy_has_no_comparable_jct(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    """Issue 16: k8s-default deadlocks on this slice with 44 of 60 jobs finished; its JCT,
    queueing, makespan and utilisation would count only those, so the table, the JSON,
    metrics.json and the HTML report say so instead of printing a figure beside full ones."""
    base = ["sim", "--trace", PHILLY, "--cluster", "4*dgx1-v100/2", "--limit", "60"]
    base += ["--policy", "toposched,k8s-default", "--out", str(tmp_path), "--no-plots"]
    r = cli(*base, "--json")
    assert r.code == 0, r.err
    policies = r.json()["policies"]
    stuck, fine = policies["k8s-default"], policies["toposched"]
    assert stuck["deadlocked"] is True and stuck["finished"] < 60
    blind = ("avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_queue_s", "makespan_s", "gpu_alloc_util")
    assert all(stuck[key] is None for key in blind)
    assert stuck["partial_hold_gpu_hours"] > 0 and stuck["placement_quality_mean"] > 0
    assert fine["deadlocked"] is False and all(fine[key] > 0 for key in blind)
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["policies"]["k8s-default"]["avg_jct_s"] is None
    html = tmp_path / "report.html"
    table = cli(*base, "--html", str(html))
    assert table.code == 0, table.err
    rows = {line.split("│")[1].strip(): line for line in table.out.splitlines() if "│" in line}
    for heading in ("avg JCT h", "p99 JCT h", "makespan h"):
        cells = [c.strip() for c in rows[heading].split("│")[2:4]]
        assert cells[0] != "n/a (deadlocked)" and cells[1] == "n/a (deadlocked)", cells
    assert "n/a (deadlocked)" in html.read_text()


OPENB = ROOT / "tests" / "fixtures" / "traces" / "openb"


def test_sim_on_a_machine_list_says_what_it_replayed(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    r = cli(
        "sim", "--trace", str(OPENB / "gpuspec.csv"), "--cluster", str(OPENB / "nodes.csv"),
        "--policy", "fifo-gang-firstfit", "--out", str(tmp_path), "--no-plots",
    )  # fmt: skip
    assert r.code == 0, r.err
    # The 4 pods that ask part of a GPU are replayed as shares of one (issue 42), no longer
    # rounded up to a whole GPU: nothing to note about them.
    assert "13 jobs replayed; rows left out: 1 no-gpu\n" in r.out
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["skip_reasons"] == {"no-gpu": 1}
    assert saved["notes"] == {}
    assert saved["policies"]["fifo-gang-firstfit"]["finished"] == 13


def test_sim_typed_share(cli: Callable[..., Result], tmp_path: Path) -> None:
    mixed = str(ROOT / "examples" / "clusters" / "mixed-v100-p100-t4.yaml")
    r = cli(
        "sim", "--trace", PHILLY, "--cluster", mixed, "--limit", "40", "--typed-share", "0.5",
        "--policy", "toposched", "--out", str(tmp_path), "--no-plots", "--json",
    )  # fmt: skip
    assert r.code == 0, r.err
    assert r.json()["policies"]["toposched"]["jobs"] == 40
    saved = json.loads((tmp_path / "metrics.json").read_text())
    (typed,) = saved["notes"].values()
    assert 10 <= typed <= 30 and saved["typed_share"] == 0.5


def test_sim_hetero_errors(cli: Callable[..., Result], tmp_path: Path) -> None:
    r = cli("sim", "--trace", PHILLY, "--cluster", "2*dgx1-v100", "--typed-share", "2")
    assert r.code != 0 and "--typed-share must be between 0 and 1, got 2.0" in r.err
    r = cli("sim", "--trace", PHILLY, "--cluster", "2*pcie-8gpu-2socket", "--typed-share", "0.5")
    assert r.code != 0 and "no node has a GPU type" in r.err
    bad = str(OPENB / "nodes_bad.csv")
    r = cli("sim", "--trace", PHILLY, "--cluster", bad, "--out", str(tmp_path))
    assert r.code != 0 and f"{bad}:3: 'two' is not a whole number >= 0 (column gpu)" in r.err


def test_without_matplotlib_the_replay_runs_and_says_how_to_get_plots(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    """matplotlib is the `sim` extra, not a dependency of the scheduler: where it is missing
    the replay writes everything but the PNGs and says how to get them."""
    hidden = tmp_path / "hidden" / "matplotlib"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ImportError('not installed here')\n")
    out = tmp_path / "run"
    r = cli(
        "sim", "--trace", PHILLY, "--cluster", "4*dgx1-v100/2", "--limit", "20",
        "--policy", "toposched", "--out", str(out), "--json",
        PYTHONPATH=str(hidden.parent),
    )  # fmt: skip
    assert r.code == 0, r.err
    assert r.json()["policies"]["toposched"]["jobs"] == 20
    assert "pip install 'toposched[sim]'" in r.err
    assert (out / "metrics.json").exists() and not list(out.glob("*.png"))
