"""`headroom worker`: a Dramatiq worker process running operations' tasks (api/tasks.py) from the
broker in HEADROOM_BROKER_URL; `headroom operations wait ID`: follow an operation on a running
service, its progress on stderr, its result as JSON on stdout; and `headroom operations resume`:
send again the units of operations a broker lost (Redis restarted without persistence).

Exit codes of `operations wait`: 0 succeeded; 1 failed or cancelled (the problem on stderr);
2 unknown operation or rejected key; 4 service unreachable, or still unfinished after --timeout.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any

from api.client_cli import API_KEY_ENV, CONNECT_TIMEOUT_S, EXIT_BAD_INPUT, EXIT_ERROR, EXIT_OK, EXIT_UNREACHABLE
from api.settings import Settings

#: How often `operations wait` reads the operation, and how wide its progress bar is.
POLL_INTERVAL_S = 0.5
BAR_WIDTH = 30
#: How long a stopping worker lets its threads finish the task each runs; what it fetched and did
#: not start goes back to the broker at once, and a task cut short is redelivered (late acks).
STOP_TIMEOUT_S = 30.0
DEFAULT_URL = "http://127.0.0.1:8000"


def add_commands(commands: Any) -> None:
    """Add `worker` and `operations` to the `headroom` argument parser's sub-commands."""
    worker = commands.add_parser(
        "worker", help="run operations' tasks from the broker in HEADROOM_BROKER_URL (stop with SIGTERM or Ctrl-C)"
    )
    worker.add_argument("--threads", type=int, default=None, help="task threads (default HEADROOM_WORKER_THREADS, 2)")
    worker.set_defaults(run=run_worker)
    operations = commands.add_parser("operations", help="long-running requests on a running service").add_subparsers(
        dest="operations_command", required=True, metavar="ACTION"
    )
    wait = operations.add_parser(
        "wait", help="follow operation ID until it ends: progress on stderr, the result as JSON on stdout"
    )
    wait.add_argument("operation_id", metavar="ID")
    wait.add_argument("--url", default=DEFAULT_URL, help=f"the service (default {DEFAULT_URL}); API key from {API_KEY_ENV}")
    wait.add_argument("--timeout", type=float, default=3600.0, help="give up after this many seconds (default 3600)")
    wait.set_defaults(run=run_wait)
    resume = operations.add_parser(
        "resume",
        help="send again the units of queued or running operations that have not moved for --idle seconds "
        "(after the broker lost its messages); prints how many",
    )
    resume.add_argument("--idle", type=float, default=600.0, help="only operations unchanged for this many seconds (default 600)")
    resume.set_defaults(run=run_resume)


def run_worker(args: argparse.Namespace, settings: Settings) -> int:
    """Work until SIGTERM or SIGINT, then stop cleanly (api/tasks.py TaskEngine.stop_worker)."""
    if settings.broker_url is None:
        print(
            "headroom: error: headroom worker needs HEADROOM_BROKER_URL (redis://...); without a broker the API "
            "process runs operations itself",
            file=sys.stderr,
        )
        return EXIT_BAD_INPUT
    if args.threads is not None and not 1 <= args.threads <= 64:
        print(f"headroom: error: --threads must be 1 … 64, got {args.threads}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from api.fleet_tables import stop_table_workers
    from api.tasks import TaskEngine
    from planner.queueing import warm_up

    warm_up()  # the compiled queueing kernels, before the first task rather than during it
    stop = threading.Event()

    def request_stop(signum: int, _frame: FrameType | None) -> None:
        print(f"headroom: worker stopping ({signal.Signals(signum).name})", file=sys.stderr)
        stop.set()

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    tasks = TaskEngine(settings)
    threads = args.threads or settings.worker_threads
    tasks.start_worker(threads)
    print(f"headroom: worker running {threads} thread(s) on namespace {settings.broker_namespace}", file=sys.stderr, flush=True)
    while not stop.wait(timeout=1.0):
        pass
    tasks.stop_worker(timeout_s=STOP_TIMEOUT_S)
    stop_table_workers()  # a fleet plan's candidate-table processes, if one ran here
    return EXIT_OK


def run_resume(args: argparse.Namespace, settings: Settings) -> int:
    """Re-send what idle unfinished operations still need, on the broker and database the settings
    name. Units still running somewhere run twice at worst (tasks are idempotent), so --idle should
    exceed the longest unit (a fleet plan's MILP: minutes)."""
    if settings.broker_url is None:
        return _error(EXIT_BAD_INPUT, "operations resume needs HEADROOM_BROKER_URL; the embedded broker resumes at start")
    if args.idle < 0:
        return _error(EXIT_BAD_INPUT, f"--idle must be >= 0, got {args.idle:g}")
    from datetime import UTC, datetime, timedelta

    from api.tasks import TaskEngine

    resumed = TaskEngine(settings).resume_unfinished(idle_since=datetime.now(UTC) - timedelta(seconds=args.idle))
    print(json.dumps({"resumed": resumed}))
    return EXIT_OK


def run_wait(args: argparse.Namespace, _settings: Settings) -> int:
    """Poll the operation until its state is final, drawing its progress on stderr."""
    import httpx

    headers = {"Accept": "application/json"}
    key = os.environ.get(API_KEY_ENV)
    if key:
        headers["Authorization"] = f"Bearer {key}"
    deadline = time.monotonic() + args.timeout
    url = f"/v1/operations/{args.operation_id}"
    timeout = httpx.Timeout(30.0, connect=CONNECT_TIMEOUT_S)
    with httpx.Client(base_url=args.url.rstrip("/"), timeout=timeout, headers=headers) as client:
        while True:
            try:
                response = client.get(url)
            except httpx.TransportError as exc:
                return _error(EXIT_UNREACHABLE, f"cannot reach {args.url}: {type(exc).__name__}: {exc}")
            if response.status_code in (401, 403, 404):
                return _error(EXIT_BAD_INPUT, f"{response.status_code} {_detail(response)}")
            if not response.is_success:
                return _error(EXIT_UNREACHABLE, f"{args.url} answered {response.status_code}: {_detail(response)}")
            operation = response.json()
            _draw(operation)
            if operation["state"] == "succeeded":
                print(file=sys.stderr)
                sys.stdout.write(json.dumps(operation["result"], indent=2, ensure_ascii=False) + "\n")
                return EXIT_OK
            if operation["state"] in ("failed", "cancelled"):
                print(file=sys.stderr)
                reason = (operation.get("problem") or {}).get("detail", "cancelled")
                return _error(EXIT_ERROR, f"operation {operation['state']}: {reason}")
            if time.monotonic() > deadline:
                print(file=sys.stderr)
                return _error(EXIT_UNREACHABLE, f"operation still {operation['state']} after {args.timeout:g} s")
            time.sleep(POLL_INTERVAL_S)


def _draw(operation: dict[str, Any]) -> None:
    progress = operation["progress"]
    total = max(progress["total"], 1)
    filled = BAR_WIDTH * progress["done"] // total
    eta = "" if progress.get("eta_s") is None else f"  eta {progress['eta_s']:.0f} s"
    bar = "#" * filled + "." * (BAR_WIDTH - filled)
    sys.stderr.write(f"\r[{bar}] {progress['done']}/{progress['total']} {operation['state']}{eta}   ")
    sys.stderr.flush()


def _detail(response: Any) -> str:
    try:
        body = response.json()
    except ValueError:
        return str(response.text[:300])
    return str(body.get("detail", body)) if isinstance(body, dict) else str(body)


def _error(code: int, message: str) -> int:
    print(f"headroom: error: {message}", file=sys.stderr)
    return code
