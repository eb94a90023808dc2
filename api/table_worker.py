"""What the fleet candidate-table workers' fork server loads before it forks any worker: the
planner, with the queueing model's compiled kernels already loaded (`planner.queueing.warm_up`),
so each worker a fleet plan starts computes from its first instruction instead of loading them.

It also ties every worker's life to the service's. multiprocessing hands each worker the write
end of the fork server's "alive" pipe and of the resource tracker's pipe, and the workers wait on
a queue whose write end they hold too: when the service is killed (SIGKILL, no shutdown hook)
nothing of that ever reads end-of-file, so workers, fork server and tracker would live on, holding
the service's stdout. So each worker forked here watches the service itself (the fork server's
parent): a thread waits on a pidfd for its exit (Linux), or polls its pid every
`WATCH_INTERVAL_S` elsewhere, and ends the worker at once. With the workers gone the fork server
and the resource tracker see end-of-file and exit too. A worker also gets PR_SET_PDEATHSIG
(Linux): if the fork server dies first, the kernel kills it.

Import this module only where the fork server's preload does (api/fleet_tables.py): the hooks
act on every process later forked from the importing one.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import select
import signal
import sys
import threading
import time

from planner import fleet_candidates as _fleet_candidates  # noqa: F401  (imported for the fork server)
from planner.queueing import warm_up

#: How often a worker polls for the service where no pidfd can wait for it.
WATCH_INTERVAL_S = 0.2
#: prctl(2)'s option number for the signal sent to a process when its parent thread exits.
_PR_SET_PDEATHSIG = 1
#: The status a worker exits with when the service it worked for is gone.
ORPHANED_EXIT_STATUS = 3

#: The service: the process that started this fork server.
_SERVICE_PID = os.getppid()


def _open_pidfd(pid: int) -> int | None:
    """A pidfd on `pid` (readable once it exits), or None where the platform has none."""
    try:
        return os.pidfd_open(pid)  # Linux 5.3+
    except (AttributeError, OSError):
        return None


_SERVICE_PIDFD = _open_pidfd(_SERVICE_PID)
_forked_by_main_thread = False


def _service_alive() -> bool:
    try:
        os.kill(_SERVICE_PID, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _watch_service() -> None:
    """Block until the service exits, then end this worker without cleanup (nobody is left to read it)."""
    if _SERVICE_PIDFD is not None:
        poller = select.poll()
        poller.register(_SERVICE_PIDFD, select.POLLIN)
        while not poller.poll():
            pass
    else:
        while _service_alive():
            time.sleep(WATCH_INTERVAL_S)
    os._exit(ORPHANED_EXIT_STATUS)


def _die_with_parent() -> None:
    """PR_SET_PDEATHSIG(SIGKILL): the kernel kills this process when the thread that forked it
    exits. Only armed when that thread was the forking process's main thread (the fork server's
    only thread), since a worker thread's exit would kill a healthy process."""
    if not (sys.platform.startswith("linux") and _forked_by_main_thread):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _before_fork() -> None:
    global _forked_by_main_thread
    _forked_by_main_thread = threading.current_thread() is threading.main_thread()


def _guard_child() -> None:
    _die_with_parent()
    if not _service_alive():  # the service died while this process was being forked
        os._exit(ORPHANED_EXIT_STATUS)
    threading.Thread(target=_watch_service, name="headroom-service-watch", daemon=True).start()


os.register_at_fork(before=_before_fork, after_in_child=_guard_child)
warm_up()
