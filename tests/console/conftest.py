"""A live broker with the console (``kcoord serve --http-listen``) and a headless Chromium.

The browser is Debian's ``chromium`` driven by Playwright for Python (Playwright's own
browser download cannot be fetched here). ``make console-deps`` installs both; without a
Chromium the browser tests skip and say so.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.broker_process import REPO, BrokerProcess

#: Where the browser tests leave a screenshot of each page (git-ignored; docs/console.md links here).
SCREENSHOTS = REPO / "build" / "console-screenshots"
VIEWPORT = {"width": 1280, "height": 800}
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium_path() -> str | None:
    """The system Chromium: $KCOORD_CHROMIUM, else Debian's chromium on PATH."""
    for candidate in (os.environ.get("KCOORD_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium",
                      shutil.which("chromium-browser")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


class Console:
    """The broker process and the base URL of its HTTP surface."""

    def __init__(self, proc: BrokerProcess, base: str) -> None:
        self.proc = proc
        self.base = base

    @property
    def bootstrap(self) -> str:
        return self.proc.bootstrap


def start_console(data_dir: Path, extra: list[str] | None = None) -> Console:
    proc = BrokerProcess(data_dir, sets={"group.initial.rebalance.delay.ms": 0}, command="kcoord",
                         extra_args=["--http-listen", "127.0.0.1:0", *(extra or [])]).start()
    url = proc.http_url()
    return Console(proc, url)


@pytest.fixture(scope="module")
def console(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Console]:
    started = start_console(tmp_path_factory.mktemp("console"))
    try:
        yield started
    finally:
        assert started.proc.stop() == 0, started.proc.log()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    executable = chromium_path()
    if executable is None:
        pytest.skip("no Chromium to drive: install Debian's `chromium` (make console-deps does) "
                    "or point KCOORD_CHROMIUM at one")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright for Python is not installed (make console-deps)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(20_000)
    opened = context.new_page()
    try:
        yield opened
    finally:
        context.close()


def screenshot(page: Any, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path))
    return path
