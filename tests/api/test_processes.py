"""What is left of `headroom serve` after it is stopped: nothing, within a bounded time, whether
it is asked to stop (SIGTERM: its own shutdown stops the table workers) or killed outright
(SIGKILL: the workers see the service gone and exit, and with them the fork server and the
resource tracker; api/table_worker.py) (issue 22 §6)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.api.conftest import living_group_members, serve_headroom

#: The server, multiprocessing's resource tracker and fork server, and at least one table worker.
MIN_SERVED_PROCESSES = 4
#: How long the service's processes may take to go once it is stopped (observed: well under 1 s).
GONE_WITHIN_S = 10.0

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process table in /proc"),
]


def wait_until_gone(pgid: int) -> list[int]:
    deadline = time.monotonic() + GONE_WITHIN_S
    while (left := living_group_members(pgid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.mark.parametrize("stop_signal", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_a_stopped_server_leaves_no_process_behind(tmp_path: Path, stop_signal: signal.Signals) -> None:
    with serve_headroom(tmp_path) as served:
        group = served.process.pid
        started = living_group_members(group)
        assert len(started) >= MIN_SERVED_PROCESSES, started  # serve starts the table workers at once
        os.kill(served.process.pid, stop_signal)
        served.process.wait(timeout=GONE_WITHIN_S)
        assert wait_until_gone(group) == [], f"left behind by {stop_signal.name}: {living_group_members(group)}"
