"""What the browser tests share: the system's Chromium and the watch kept on every page (console
errors, uncaught exceptions, failed requests, requests to other hosts), asserted at teardown by the
`page` fixture in tests/browser/conftest.py."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

CHROMIUM_ENV = "HEADROOM_CHROMIUM"
#: A laptop screen (1440 × 900 CSS pixels, a 13–14" laptop's default scaled resolution).
VIEWPORT = {"width": 1440, "height": 900}


def _chromium() -> str:
    path = os.environ.get(CHROMIUM_ENV) or shutil.which("chromium") or shutil.which("chromium-browser")
    if path and Path(path).exists():
        return path
    reason = f"browser tests need Chromium (apt-get install chromium, or {CHROMIUM_ENV}=/path/to/chrome)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI is set, so they must run, not skip")
    pytest.skip(reason)


@dataclass
class Watched:
    """What a page did that an offline, error-free page must not: kept per test, asserted at teardown."""

    console_errors: list[str] = field(default_factory=list)
    page_errors: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    requested: list[str] = field(default_factory=list)
