"""The dashboard and the offline API docs, mounted on an app: no browser needed."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import httpx
from fastapi import FastAPI

from toposched.dashboard import STATIC, mount_dashboard, swagger_assets


class Client:
    """GETs against an app in this process, through httpx's ASGI transport."""

    def __init__(self, app: FastAPI) -> None:
        self.app = app

    def get(self, path: str) -> httpx.Response:
        async def fetch() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as http:
                return await http.get(path)

        return asyncio.run(fetch())


def client() -> Client:
    app = FastAPI(title="t")
    mount_dashboard(app)
    return Client(app)


def test_the_dashboard_is_served_at_the_root_with_its_files() -> None:
    http = client()
    page = http.get("/")
    assert page.status_code == 200
    assert "/dashboard/app.js" in page.text
    assert "default-src 'self'" in page.headers["content-security-policy"]
    for name in ("app.js", "style.css", "favicon.svg"):
        assert http.get(f"/dashboard/{name}").content == (STATIC / name).read_bytes()
    facts = http.get("/dashboard/topology.json").json()
    assert facts["bandwidth"]["NV"] > facts["bandwidth"]["SYS"]
    assert facts["presets"]["dgx1-v100"]["sockets"] == [0, 0, 0, 0, 1, 1, 1, 1]


def test_no_shipped_file_names_another_host() -> None:
    for path in STATIC.iterdir():
        text = path.read_text(encoding="utf-8")
        assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")
        assert "https://" not in text, path.name


def test_the_docs_load_their_assets_from_this_server() -> None:
    assert swagger_assets() is not None, "swagger-ui-py is a dependency"
    http = client()
    docs = http.get("/docs")
    assert docs.status_code == 200
    assert "/docs/assets/swagger-ui-bundle.js" in docs.text
    assert "cdn" not in docs.text.lower() and "https://" not in docs.text
    assert http.get("/docs/assets/swagger-ui-bundle.js").status_code == 200
    assert http.get("/docs/assets/swagger-ui.css").status_code == 200
    assert http.get("/redoc").status_code == 404  # FastAPI's ReDoc page loads from a CDN


def test_the_kubernetes_schedulers_read_api_serves_it_too() -> None:
    from toposched.kube.readapi import make_app

    # The routes read the runner only when called; the dashboard's files and docs need none.
    runner = SimpleNamespace(lock=threading.RLock(), scheduler=None, leading=True, steps=0)
    http = Client(make_app(runner))  # type: ignore[arg-type]
    assert "/dashboard/app.js" in http.get("/").text
    assert "/docs/assets/swagger-ui-bundle.js" in http.get("/docs").text
