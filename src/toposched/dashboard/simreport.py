"""`toposched sim --html`: one self-contained HTML report of a simulation, readable offline."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path

from toposched.sim.engine import SimResult
from toposched.sim.metrics import quality

# One colour per policy, in the order given; told apart in grey print too.
COLOURS = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563")
POINTS = 400  # a plot's points per policy: enough for the eye, small for the file
JOBS_SHOWN = 2000  # per-job rows per policy; the CSV files have them all
W, H, LEFT, BOTTOM, TOP = 640, 260, 52, 34, 12

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 20px auto; max-width: 1100px; padding: 0 12px;
  color: #1f2937; }
table { border-collapse: collapse; margin: 8px 0 16px; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e5e7eb; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.scroll { overflow-x: auto; }
figure { margin: 8px 0 20px; }
svg text { font: 11px system-ui, sans-serif; fill: #374151; }
.axis { stroke: #9ca3af; } .grid { stroke: #eef0f3; }
.key { display: inline-block; margin-right: 14px; } .key i { display: inline-block; width: 12px;
  height: 3px; vertical-align: middle; margin-right: 4px; }
"""


def write_html(
    path: Path,
    results: Sequence[SimResult],
    table: Sequence[tuple[str, Sequence[str]]],
    facts: Mapping[str, object],
) -> Path:
    """The comparison `table` (a heading and one cell per policy, per row), the plots as
    inline SVG, and each policy's per-job outcomes, in one HTML file with nothing to fetch."""
    names = [r.policy for r in results]
    colours = {name: COLOURS[i % len(COLOURS)] for i, name in enumerate(names)}
    head = "".join(f"<th>{escape(n)}</th>" for n in names)
    rows = "".join(
        f"<tr><td>{escape(h)}</td>{''.join(f'<td>{escape(c)}</td>' for c in cells)}</tr>"
        for h, cells in table
    )
    about = "".join(
        f"<tr><td>{escape(k)}</td><td>{escape(_fact(v))}</td></tr>" for k, v in facts.items()
    )
    gpus = results[0].cluster.gpus if results else 1
    charts = [
        _chart(
            "Job completion time, CDF",
            {r.policy: _cdf(r) for r in results},
            colours,
            "JCT (s, log scale)",
            "fraction finished",
            log_x=True,
        ),
        _chart(
            "GPUs allocated",
            {r.policy: [(s.time / 3600, s.allocated / gpus) for s in r.samples] for r in results},
            colours,
            "simulated time (h)",
            "fraction of GPUs",
        ),
        _chart(
            "Jobs waiting",
            {r.policy: [(s.time / 3600, float(s.queued)) for s in r.samples] for r in results},
            colours,
            "simulated time (h)",
            "jobs",
        ),
    ]
    legend = "".join(
        f'<span class="key"><i style="background:{c}"></i>{escape(n)}</span>'
        for n, c in colours.items()
    )
    jobs = "".join(_jobs(r) for r in results)
    document = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>toposched sim: {escape(', '.join(names))}</title><style>{STYLE}</style></head>"
        f"<body><h1>Simulation: {escape(', '.join(names))}</h1>"
        f'<table class="about">{about}</table>'
        f'<h2>Side by side</h2><div class="scroll"><table id="compare"><thead><tr><th>metric</th>'
        f"{head}</tr></thead><tbody>{rows}</tbody></table></div>"
        f"<h2>Plots</h2><p>{legend}</p>{''.join(charts)}"
        f"<h2>Jobs</h2>{jobs}</body></html>\n"
    )
    path.write_text(document, encoding="utf-8")
    return path


def _fact(value: object) -> str:
    return f"{value:,.2f}" if isinstance(value, float) else str(value)


def _cdf(result: SimResult) -> list[tuple[float, float]]:
    jct = sorted(j.finish - j.trace.submit_s for j in result.jobs if j.finish is not None)
    return [(max(t, 1.0), (i + 1) / len(jct)) for i, t in enumerate(jct)]


def _thin(points: Sequence[tuple[float, float]]) -> Sequence[tuple[float, float]]:
    step = max(1, math.ceil(len(points) / POINTS))
    return [*points[::step], *points[-1:]] if step > 1 else points


def _chart(
    title: str,
    series: Mapping[str, Sequence[tuple[float, float]]],
    colours: Mapping[str, str],
    x_label: str,
    y_label: str,
    *,
    log_x: bool = False,
) -> str:
    """A line chart as inline SVG: one polyline per policy, with axes and five ticks each."""
    fx = math.log10 if log_x else float
    points = [(fx(x), y) for line in series.values() for x, y in line]
    if not points:
        return f"<figure><figcaption>{escape(title)}: no data</figcaption></figure>"
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y1 = max(max(p[1] for p in points), 1e-9)
    x1 = x1 if x1 > x0 else x0 + 1
    plot_w, plot_h = W - LEFT - 10, H - BOTTOM - TOP

    def sx(x: float) -> float:
        return LEFT + (fx(x) - x0) / (x1 - x0) * plot_w

    def sy(y: float) -> float:
        return TOP + plot_h - y / y1 * plot_h

    parts = [
        f'<line class="axis" x1="{LEFT}" y1="{TOP + plot_h}" x2="{W - 10}" y2="{TOP + plot_h}"/>'
    ]
    for i in range(5):
        gx = x0 + (x1 - x0) * i / 4
        label = f"{10**gx:,.0f}" if log_x else f"{gx:,.3g}"
        px = LEFT + plot_w * i / 4
        anchor = ("start", "middle", "middle", "middle", "end")[i]  # the ends stay inside
        parts.append(
            f'<text x="{px:.1f}" y="{H - BOTTOM + 16}" text-anchor="{anchor}">{label}</text>'
        )
        gy = y1 * i / 4
        py = TOP + plot_h - plot_h * i / 4
        parts.append(f'<line class="grid" x1="{LEFT}" y1="{py:.1f}" x2="{W - 10}" y2="{py:.1f}"/>')
        parts.append(f'<text x="{LEFT - 6}" y="{py + 4:.1f}" text-anchor="end">{gy:,.3g}</text>')
    for name, line in series.items():
        if not line:
            continue
        xy = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in _thin(line))
        parts.append(
            f'<polyline fill="none" stroke="{colours[name]}" stroke-width="1.5" points="{xy}">'
            f"<title>{escape(name)}</title></polyline>"
        )
    parts.append(
        f'<text x="{LEFT + plot_w / 2}" y="{H - 4}" text-anchor="middle">{escape(x_label)}</text>'
    )
    parts.append(
        f'<text transform="rotate(-90)" x="{-(TOP + plot_h / 2)}" y="12" text-anchor="middle">'
        f"{escape(y_label)}</text>"
    )
    return (
        f"<figure><figcaption><b>{escape(title)}</b></figcaption>"
        f'<svg viewBox="0 0 {W} {H}" width="100%" style="max-width:{W}px" role="img" '
        f'aria-label="{escape(title)}">{"".join(parts)}</svg></figure>'
    )


def _jobs(result: SimResult) -> str:
    heading = ("job", "queue", "GPUs", "submit s", "start s", "finish s", "JCT s", "queue s",
               "placement quality", "preempt", "migrate", "state")  # fmt: skip
    rows = []
    for job in result.jobs[:JOBS_SHOWN]:
        t = job.trace
        q = quality(job)
        cells = (
            t.name,
            t.queue,
            str(t.gpus),
            f"{t.submit_s:,.0f}",
            "" if job.first_start is None else f"{job.first_start:,.0f}",
            "" if job.finish is None else f"{job.finish:,.0f}",
            "" if job.finish is None else f"{job.finish - t.submit_s:,.0f}",
            "" if job.first_start is None else f"{job.first_start - t.submit_s:,.0f}",
            "" if q is None else f"{q:.3f}",
            str(job.preemptions),
            str(job.migrations),
            job.state.value if job.state else "",
        )
        rows.append("<tr>" + "".join(f"<td>{escape(c)}</td>" for c in cells) + "</tr>")
    more = len(result.jobs) - JOBS_SHOWN
    note = (
        f"<p>The first {JOBS_SHOWN:,} of {len(result.jobs):,} jobs; "
        f"jobs-{escape(result.policy)}.csv has all.</p>"
        if more > 0
        else ""
    )
    return (
        f'<details data-policy="{escape(result.policy)}"><summary>{escape(result.policy)}: '
        f"{len(result.jobs):,} jobs</summary>{note}"
        f'<div class="scroll"><table><thead><tr>{"".join(f"<th>{h}</th>" for h in heading)}'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div></details>"
    )
