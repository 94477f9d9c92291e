"""Headless Chromium for the dashboard's tests: the system's browser driven by Playwright."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

# Playwright cannot download its own browser here: the system's Chromium is used.
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
HAVE_PLAYWRIGHT = importlib.util.find_spec("playwright") is not None
MISSING = (
    None
    if CHROMIUM and HAVE_PLAYWRIGHT
    else "the dashboard's browser tests need headless Chromium and Playwright: "
    "`apt-get install -y chromium` and `.venv/bin/pip install -e '.[dev]'` (.ci/run does both)"
)
TOKEN_KEY = "toposched.token"
WIDTHS = (1280, 390)


@dataclass
class Tab:
    """One page with what it said: console errors, uncaught errors, requests that left
    the machine."""

    page: Any
    base: str
    errors: list[str] = field(default_factory=list)
    outside: list[str] = field(default_factory=list)

    def open(self, hash_: str = "#/cluster") -> None:
        self.page.goto(f"{self.base}/{hash_}")
        self.ready(hash_)

    def ready(self, hash_: str) -> None:
        """Wait until the page has drawn `hash_` from the API's answers at least once."""
        from playwright.sync_api import Error

        try:
            drawn = "h => document.getElementById('main').dataset.ready === h"
            self.page.wait_for_function(drawn, arg=hash_, timeout=15_000)
        except Error as err:
            said = self.page.evaluate(
                "[location.hash, document.getElementById('main').dataset.ready,"
                " document.getElementById('notice').textContent,"
                " document.getElementById('main').innerText.slice(0, 500)]"
            )
            raise AssertionError(f"{hash_} not drawn: {said}; errors {self.errors}") from err

    def unexpected_errors(self, *allowed: str) -> list[str]:
        return [e for e in self.errors if not any(a in e for a in allowed)]

    def shot(self, directory: Path, name: str) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)
        return path


@contextmanager
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def tab(browser: Any, base: str, token: str | None = None, width: int = 1280) -> Iterator[Tab]:
    """A fresh browser context (its own storage), signed in with `token` if given; every
    request to another host is refused and recorded."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    if token is not None:
        context.add_init_script(f"sessionStorage.setItem({TOKEN_KEY!r}, {json.dumps(token)})")
    page = context.new_page()
    found = Tab(page, base)
    page.on("console", lambda m: found.errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: found.errors.append(f"uncaught: {e}"))
    local = urlparse(base).netloc

    def guard(route: Any) -> None:
        url = urlparse(route.request.url)
        if url.netloc == local or url.scheme in ("file", "data"):
            route.continue_()
        else:
            found.outside.append(route.request.url)
            route.abort()

    page.route("**/*", guard)
    try:
        yield found
    finally:
        context.close()


def publish(tab_: Tab, name: str) -> None:
    """Save a small viewport screenshot for the docs when TOPOSCHED_SCREENSHOTS is set."""
    target = os.environ.get("TOPOSCHED_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        tab_.page.screenshot(path=str(Path(target) / f"dashboard-{name}.png"))
