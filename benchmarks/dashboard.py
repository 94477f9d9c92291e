"""Time to the first full render of the dashboard's cluster page, and the bytes it downloads.

Run: .venv/bin/python benchmarks/dashboard.py [--nodes 1000] [--jobs 5000] [--seed 0] [--smoke]

The read API is served by a small app over synthetic state, written with the API's own wire
schemas (`toposched.server.schemas`) and with the dashboard mounted as the servers mount it:
`--nodes` DGX-1s (8 GPUs each) and `--jobs` jobs of 1 to 8 GPUs, placed first-fit until the
GPUs run out (the rest wait). Headless Chromium (the system's `chromium`, driven by Playwright)
opens the cluster page signed in; the clock runs from the navigation's start until every
node's GPU map is drawn. The issue's targets, printed but not judged here: under 1.5 s and
1 MB. The last line is JSON: render_s, bytes, nodes, jobs.

`--smoke` (CI, seconds): 4 nodes and 20 jobs, the same page drawn in the same browser.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import socket
import sys
import threading
import time
from typing import Annotated

import uvicorn
from fastapi import FastAPI, Query, Response

from toposched.dashboard import mount_dashboard
from toposched.server.schemas import (
    DEFAULT_PAGE,
    MAX_PAGE,
    GpuOut,
    Health,
    JobPage,
    JobSummary,
    ListMeta,
    NodeList,
    NodeOut,
    QueueList,
    QueueOut,
    WhoAmI,
    WorkerOut,
)
from toposched.topology.presets import dgx1_v100

TEAMS = ("vision", "speech", "nlp", "recsys", "robotics")


def synthetic(nodes: int, jobs: int, seed: int) -> tuple[NodeList, list[JobSummary], QueueList]:
    rng = random.Random(seed)
    links = dgx1_v100().codes()
    owners: dict[tuple[int, int], str] = {}
    free = [list(range(8)) for _ in range(nodes)]
    cursor = 0
    made: list[JobSummary] = []
    for j in range(jobs):
        size = rng.choice((1, 1, 2, 4, 8))
        team = rng.choice(TEAMS)
        name = f"{team}-{j:05d}"
        while cursor < nodes and len(free[cursor]) < size:
            cursor += 1
        placed = cursor < nodes
        gpus = [free[cursor].pop(0) for _ in range(size)] if placed else []
        for g in gpus:
            owners[(cursor, g)] = name
        made.append(
            JobSummary(
                name=name,
                owner=f"user{j % 40}",
                queue=team,
                priority=0,
                state="running" if placed else "pending",
                reason=f"started on node-{cursor:04d} GPUs {','.join(map(str, gpus))} "
                "(ring 25 GB/s): best placement now"
                if placed
                else f"needs {size} GPUs; no node has {size} free",
                workers=1,
                gpus_per_worker=size,
                placement=[WorkerOut(worker=0, node=f"node-{cursor:04d}", gpus=gpus)]
                if placed
                else [],
                attempt=0 if placed else -1,
                restarts=0,
                submitted_at=1.7e9 + j,
                started_at=1.7e9 + j if placed else None,
                ended_at=None,
                spec={"workers": 1, "gpus": size, "locality": "node"},
            )
        )
    node_list = NodeList(
        nodes=[
            NodeOut(
                name=f"node-{n:04d}",
                topology="dgx1-v100",
                source="synthetic",
                gpus=[GpuOut(index=g, job=owners.get((n, g)), healthy=True) for g in range(8)],
                labels={},
                links=links,
            )
            for n in range(nodes)
        ]
    )
    used = {
        t: sum(len(j.placement and j.placement[0].gpus) for j in made if j.queue == t)
        for t in TEAMS
    }
    queues = QueueList(
        queues=[
            QueueOut(name=t, guaranteed_gpus=nodes, used_gpus=used[t], pending=0, running=0)
            for t in TEAMS
        ]
    )
    return node_list, made, queues


def app(nodes: NodeList, jobs: list[JobSummary], queues: QueueList) -> FastAPI:
    """The read routes the cluster page calls, each answering prepared JSON."""
    api = FastAPI()
    health = Health(
        status="ok",
        version="bench",
        node="synthetic",
        gpus=8 * len(nodes.nodes),
        database="none",
        auth=False,
    )
    answers = {
        "/api/v1/health": health.model_dump_json(),
        "/api/v1/whoami": WhoAmI(user="bench", team="", role="reader").model_dump_json(),
        "/api/v1/nodes": nodes.model_dump_json(),
        "/api/v1/queues": queues.model_dump_json(),
    }
    for path, body in answers.items():
        api.add_api_route(path, lambda body=body: Response(body, media_type="application/json"))

    @api.get("/api/v1/jobs")
    def listed(
        state: Annotated[list[str] | None, Query()] = None,
        limit: int = DEFAULT_PAGE,
        continue_: Annotated[str | None, Query(alias="continue")] = None,
    ) -> Response:
        """Live jobs, or those in `state`, in submission order, a page at a time: the real
        route's answer (slim rows, at most MAX_PAGE, `metadata.continue` while more remain)."""
        chosen = [j for j in jobs if j.state in (state or ("pending", "running"))]
        start = int(continue_ or 0)
        end = start + min(limit, MAX_PAGE)
        more = str(end) if end < len(chosen) else None
        page = JobPage(jobs=chosen[start:end], metadata=ListMeta(**{"continue": more}))
        return Response(page.model_dump_json(by_alias=True), media_type="application/json")

    mount_dashboard(api)
    return api


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="4 nodes, 20 jobs (CI)")
    args = parser.parse_args()
    if args.smoke:
        args.nodes, args.jobs = 4, 20
    # Playwright cannot download its own browser here: the system's Chromium is used.
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("needs headless Chromium: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            app(*synthetic(args.nodes, args.jobs, args.seed)), port=port, log_level="warning"
        )
    )
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"http://127.0.0.1:{port}/#/cluster")
        page.wait_for_function(
            "n => document.getElementById('main').dataset.ready === '#/cluster'"
            " && document.querySelectorAll('#nodes .node .gpu').length === 8 * n",
            arg=args.nodes,
            timeout=60_000,
        )
        # The page marks its first full drawing; marks count from the navigation's start.
        render_s = page.evaluate("performance.getEntriesByName('drawn #/cluster')[0].startTime")
        render_s /= 1000
        downloaded = page.evaluate(
            "performance.getEntriesByType('navigation').concat(performance.getEntriesByType"
            "('resource')).reduce((sum, e) => sum + e.transferSize, 0)"
        )
        browser.close()
    server.should_exit = True
    print(
        f"cluster page: {args.nodes} nodes, {args.jobs} jobs: first full render "
        f"{render_s:.2f} s (target < 1.5 s), {downloaded / 1e6:.2f} MB (target < 1 MB)"
    )
    print(
        json.dumps(
            {
                "render_s": round(render_s, 3),
                "bytes": downloaded,
                "nodes": args.nodes,
                "jobs": args.jobs,
            }
        )
    )


if __name__ == "__main__":
    main()
