"""`toposched sim` with a framework of the catalog and `spread_by_model` on g4dn nodes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.e2e.conftest import Result

ROOT = Path(__file__).resolve().parents[2]
PHILLY = str(ROOT / "data" / "traces" / "philly" / "philly.csv")
RUN = ("sim", "--trace", PHILLY, "--cluster", "8*g4dn-12xlarge", "--limit", "150",
       "--network", "aws-50g", "--framework", "pytorch-ddp", "--policy", "toposched",
       "--no-plots", "--json")  # fmt: skip


def test_spread_by_model_runs_and_changes_the_outcome(
    cli: Callable[..., Result], tmp_path: Path
) -> None:
    packed = cli(*RUN, "--out", str(tmp_path / "packed"))
    spread = cli(*RUN, "--out", str(tmp_path / "spread"), "--param", "toposched.spread_by_model=0")
    assert packed.code == 0, packed.err
    assert spread.code == 0, spread.err
    a = packed.json()["policies"]["toposched"]
    b = spread.json()["policies"]["toposched"]
    assert a["finished"] == b["finished"] == 150
    # Spread gangs of the jobs that span nodes run faster, so placement quality rises.
    assert b["placement_quality_alone_mean"] > a["placement_quality_alone_mean"]


def test_an_unknown_framework_is_refused(cli: Callable[..., Result], tmp_path: Path) -> None:
    r = cli(*RUN[:-4], "--framework", "no-such", "--out", str(tmp_path))
    assert r.code != 0
    assert "no-such" in r.err
