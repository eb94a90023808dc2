"""Browser fixtures: one headless Chromium per module and a watched page per test, on the module's
own `served` service (each test module defines `served`: a `headroom serve` with its settings)."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Playwright, Request, sync_playwright

from tests.api.conftest import ServedHeadroom
from tests.browser.harness import VIEWPORT, Watched, _chromium


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    executable = _chromium()
    playwright: Playwright = sync_playwright().start()
    try:
        launched = playwright.chromium.launch(executable_path=executable, headless=True, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            launched.close()
    finally:
        playwright.stop()


@pytest.fixture
def page(browser: Browser, served: ServedHeadroom) -> Iterator[tuple[Page, Watched]]:
    context = browser.new_context(viewport=VIEWPORT, accept_downloads=True)
    watched = Watched()
    opened = context.new_page()
    opened.set_default_timeout(30_000)

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            watched.console_errors.append(f"{message.text} at {message.location}")

    def on_failed(request: Request) -> None:
        watched.failed.append(f"{request.method} {request.url}: {request.failure}")

    opened.on("console", on_console)
    opened.on("pageerror", lambda error: watched.page_errors.append(str(error)))
    opened.on("requestfailed", on_failed)
    opened.on("request", lambda request: watched.requested.append(request.url))
    try:
        yield opened, watched
        assert watched.console_errors == [], watched.console_errors
        assert watched.page_errors == [], watched.page_errors
        assert watched.failed == [], watched.failed
        off_host = [url for url in watched.requested if urlsplit(url.removeprefix("blob:")).hostname != "127.0.0.1"]
        assert off_host == [], f"the page fetched from other hosts: {off_host}"
        assert watched.requested, "the page made no request at all"
    finally:
        context.close()
