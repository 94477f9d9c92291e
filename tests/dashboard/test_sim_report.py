"""`toposched sim --html`: one self-contained report, opened in headless Chromium offline."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.dashboard.browser import tab
from tests.e2e.conftest import run_cli

ROOT = Path(__file__).resolve().parents[2]
PHILLY = str(ROOT / "data" / "traces" / "philly" / "philly.csv")


def test_the_html_report_shows_the_table_plots_and_jobs_offline(
    browser: Any, tmp_path: Path
) -> None:
    report = tmp_path / "report.html"
    done = run_cli(
        "sim", "--trace", PHILLY, "--cluster", "4*dgx1-v100/2", "--limit", "40",
        "--policy", "toposched,fifo-gang-firstfit", "--out", str(tmp_path / "out"),
        "--no-plots", "--html", str(report),
    )  # fmt: skip
    assert done.code == 0, done.err
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())["policies"]
    with tab(browser, "http://127.0.0.1:1") as t:  # no server: any http(s) request is outside
        t.page.goto(report.as_uri())
        heads = t.page.locator("#compare thead th").all_inner_texts()
        assert heads == ["metric", "toposched", "fifo-gang-firstfit"]
        finished = t.page.locator("#compare tbody tr").first.locator("td").all_inner_texts()
        assert finished == [
            "finished",
            f"{metrics['toposched']['finished']:,}",
            f"{metrics['fifo-gang-firstfit']['finished']:,}",
        ]
        assert t.page.locator("figure svg polyline").count() == 3 * 2  # 3 plots x 2 policies
        t.page.click("details[data-policy=toposched] summary")
        assert t.page.locator("details[data-policy=toposched] tbody tr").count() == 40
        t.page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        assert t.outside == []
        assert t.unexpected_errors() == []
