"""The web dashboard and the API docs, served from files shipped in this package (no CDN).

`mount_dashboard(app)` adds them to any app that serves the read API under /api/v1: the
standalone server's and the Kubernetes scheduler's. The pages are public, like the API's
docs: they hold no data; everything they show comes from /api/v1 with the signed-in token.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.routing import BaseRoute, Route

from toposched.topology import DEFAULT_BANDWIDTH
from toposched.topology.presets import PRESETS

STATIC = Path(__file__).resolve().parent / "static"
ASSETS = "/docs/assets"

# Only the dashboard's own files may be loaded: a page that reaches out to the internet would
# break offline, and a script injected through a job's name or log could not run. Inline
# styles are allowed: the GPU map colours each job with one.
POLICY = (
    "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "
    "script-src 'self'; connect-src 'self'; frame-ancestors 'none'"
)


def swagger_assets() -> Path | None:
    """Swagger UI's files from the `swagger-ui-py` package, found without importing it."""
    spec = importlib.util.find_spec("swagger_ui")
    if spec is None or spec.origin is None:
        return None
    static = Path(spec.origin).parent / "static"
    return static if (static / "swagger-ui-bundle.js").is_file() else None


def mount_dashboard(app: FastAPI) -> None:
    """Serve the dashboard at / and the API docs at /docs, both from local files."""
    # FastAPI's own /docs and /redoc load their scripts from a CDN: replaced, not added to.
    cdn = {"/docs", "/docs/oauth2-redirect", "/redoc"}
    app.router.routes[:] = [r for r in app.router.routes if not _path_in(r, cdn)]

    async def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", headers={"Content-Security-Policy": POLICY})

    async def topology() -> JSONResponse:
        return JSONResponse(topology_facts())

    app.add_api_route("/", index, include_in_schema=False)
    app.add_api_route("/dashboard/topology.json", topology, include_in_schema=False)
    app.mount("/dashboard", StaticFiles(directory=STATIC), name="dashboard")
    assets = swagger_assets()
    if assets is None:
        return
    openapi = app.openapi_url or "/openapi.json"
    title = f"{app.title}: API docs"

    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url=openapi,
            title=title,
            swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{ASSETS}/favicon-32x32.png",
        )

    app.add_api_route("/docs", docs, include_in_schema=False)
    app.mount(ASSETS, StaticFiles(directory=assets), name="docs-assets")


def topology_facts() -> dict[str, object]:
    """GB/s of each link kind (NVLink per link), for the heat maps; and each preset's sockets
    and PCIe switches, which a link matrix hides wherever NVLink joins two GPUs."""
    presets = {}
    for name, make in PRESETS.items():
        node = make()
        presets[node.name or name] = {"sockets": node.sockets, "switches": node.switches}
    return {"bandwidth": DEFAULT_BANDWIDTH.as_dict(), "presets": presets}


def _path_in(route: BaseRoute, paths: set[str]) -> bool:
    return isinstance(route, Route) and route.path in paths
