"""Each fleet workload's candidate table (`planner.fleet_candidates.candidate_table`), computed once
per distinct (model, request mix, SLO, levers) and kept per process, two or more at a time in worker
processes that a fork server starts once (api/table_worker.py). A job carries its request's
deadline into the worker, which stops at the next (GPU, tp) search once it has passed; jobs not yet
started are cancelled and the request thread raises RequestTimeoutError.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass

from api.deploy import published_draft_methods
from api.errors import RequestTimeoutError
from api.fleet_inputs import FleetInputs
from api.observability import Deadline
from api.schemas.fleet_plans import FleetPlanRequest, FleetWorkloadSpec
from planner.fleet_candidates import CandidateGrid, CandidateTable, candidate_table
from planner.fleet_levers import DraftPin, SpeculativeMode
from planner.fleet_spec import Checkpoint, no_checkpoint
from planner.specs import GpuSpec, ModelSpec, Precision
from planner.workload import Slo, Workload

#: Candidate tables kept per process, keyed by everything they depend on (a re-plan after a
#: demand, price or inventory change reuses them); the oldest is dropped past this many.
_TABLE_CACHE_SIZE = 256
_TABLE_CACHE: dict[tuple[object, ...], CandidateTable] = {}

#: Worker processes come from a fork server that has imported the planner and loaded its compiled
#: kernels once (api/table_worker.py), so a worker forks no request thread.
_POOL_CONTEXT = multiprocessing.get_context("forkserver")
_POOL_CONTEXT.set_forkserver_preload(["api.table_worker"])


def _ready() -> bool:
    return True


class _TableWorkers:
    """The worker processes that compute candidate tables: one per CPU, started once and kept for
    every fleet plan. A worker re-imports the main module when it starts (Python 3.11's fork server
    never preloads it), ~1.4 s for the service or a benchmark script, which a pool made per request
    paid on every plan (1.37–1.52 s before a new worker's first job). The jobs submitted and not
    yet done are counted (`pending`), so a test can see a cancelled request leave none behind."""

    def __init__(self) -> None:
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()
        self._pending: set[Future[CandidateTable]] = set()

    def pool(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(max_workers=os.cpu_count() or 1, mp_context=_POOL_CONTEXT)
            return self._pool

    def submit(self, job: TableJob, expires_at_unix_s: float | None) -> Future[CandidateTable]:
        future = self.pool().submit(_compute_table, job, expires_at_unix_s)
        with self._lock:
            self._pending.add(future)
        future.add_done_callback(self._done)
        return future

    def _done(self, future: Future[CandidateTable]) -> None:
        with self._lock:
            self._pending.discard(future)

    def pending(self) -> int:
        """Table jobs submitted and not yet finished, failed or cancelled."""
        with self._lock:
            return len(self._pending)

    def start(self) -> None:
        """Start every worker now and wait until each answers (imports, the compiled kernels)."""
        pool = self.pool()
        for future in [pool.submit(_ready) for _ in range(os.cpu_count() or 1)]:
            future.result()

    def stop(self) -> None:
        """Let the workers go; the next table starts new ones (with empty caches)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


_WORKERS = _TableWorkers()


def start_table_workers() -> None:
    """Start the table workers (and their fork server) now, so the first fleet plan does not wait
    for them: `headroom serve` calls this at start."""
    _WORKERS.start()


def stop_table_workers() -> None:
    """Let the table workers go (the app's shutdown does: uvicorn re-raises SIGTERM once it has
    shut down, so the process would end without the executor's exit hook and leave them blocked
    on their queue, holding the service's stdout). A later fleet plan starts new ones."""
    _WORKERS.stop()


def restart_table_workers() -> None:
    """New table workers with empty queueing caches, started before this returns (benchmarks
    measuring a cold table call this with `clear_table_cache`)."""
    _WORKERS.stop()
    _WORKERS.start()


def pending_table_jobs() -> int:
    """Candidate-table jobs handed to the workers and not yet done (0 once every request's work
    has finished or been cancelled)."""
    return _WORKERS.pending()


#: A table's inputs; the last member is its levers: the speculative mode, the draft heads published for the model and
#: what the workload pins about its drafts (a catalog draft model, a measured α; None: nothing).
TableJob = tuple[ModelSpec, tuple[GpuSpec, ...], tuple[Precision, ...], Workload, Slo, CandidateGrid, "TableLevers"]
TableLevers = tuple[SpeculativeMode, frozenset[str] | None, DraftPin | None]


class TableDeadlinePassed(Exception):
    """A table job stopped because its request's deadline passed (raised in a worker process,
    so a plain picklable exception; the request thread turns it into RequestTimeoutError)."""


@dataclass(frozen=True, slots=True)
class _ExpiresAt:
    """A table job's checkpoint: raises TableDeadlinePassed once the wall clock passes
    `unix_s` (wall-clock time, since the job runs in another process)."""

    unix_s: float

    def __call__(self) -> None:
        if time.time() >= self.unix_s:
            raise TableDeadlinePassed(f"deadline passed {time.time() - self.unix_s:.3f} s ago")


def _compute_table(
    job: TableJob, expires_at_unix_s: float | None = None, checkpoint: Checkpoint = no_checkpoint
) -> CandidateTable:
    model, gpus, precisions, workload, slo, grid, (speculative, published, draft) = job
    if expires_at_unix_s is not None:
        checkpoint = _ExpiresAt(expires_at_unix_s)
    return candidate_table(
        model=model, gpus=gpus, precisions=precisions, workload=workload, slo=slo, grid=grid, checkpoint=checkpoint,
        speculative=speculative, published=published, draft=draft,
    )  # fmt: skip


def _in_workers(jobs: list[TableJob], deadline: Deadline | None) -> list[CandidateTable]:
    """Each job's table from the worker processes, in order. Past `deadline`: every job not yet
    started is cancelled, the running ones stop at their next checkpoint (they carry the same
    deadline), and RequestTimeoutError is raised."""
    expires_at = None if deadline is None else time.time() + deadline.remaining_s()
    futures = [_WORKERS.submit(job, expires_at) for job in jobs]
    done, not_done = wait(futures, timeout=None if deadline is None else deadline.remaining_s(), return_when=FIRST_EXCEPTION)
    failed = [future for future in futures if future in done and future.exception() is not None]
    if not_done or failed:
        for future in futures:
            future.cancel()
    timed_out = any(isinstance(future.exception(), TableDeadlinePassed) for future in failed) or (not_done and not failed)
    if deadline is not None and timed_out:
        raise RequestTimeoutError(timeout_s=deadline.timeout_s)
    if failed:
        raise failed[0].exception()  # type: ignore[misc]  # the first job (in order) that failed
    return [future.result() for future in futures]


def candidate_tables(jobs: list[TableJob], deadline: Deadline | None = None) -> list[CandidateTable]:
    """The candidate table of each job (identical jobs computed once), from the per-process cache
    or computed; two or more missing tables are computed in parallel, one process per CPU. Past
    `deadline` the work stops and RequestTimeoutError is raised (nothing is cached).

    `candidate_table` is a pure function of its inputs, so the tables are the same whichever
    process computes them, and in the order asked.
    """
    # GPU specs hold dicts (not hashable); their repr is a full, deterministic description.
    keys = [
        (model, workload.at_rate(1.0), slo, repr(gpus), repr(precisions), grid, levers)
        for model, gpus, precisions, workload, slo, grid, levers in jobs
    ]
    missing = {key: job for key, job in zip(keys, jobs, strict=True) if key not in _TABLE_CACHE}
    workers = min(len(missing), os.cpu_count() or 1)
    computed: list[CandidateTable] | None = None
    if workers >= 2:
        try:
            computed = _in_workers(list(missing.values()), deadline)
        except BrokenProcessPool:
            # A worker died (e.g. a host script without the `if __name__ == "__main__"` guard that
            # multiprocessing needs, whose main module the worker re-runs): compute here instead,
            # and start new workers next time.
            _WORKERS.stop()
            computed = None
    if computed is None:
        checkpoint = no_checkpoint if deadline is None else deadline_checkpoint(deadline)
        computed = [_compute_table(job, checkpoint=checkpoint) for job in missing.values()]
    for key, table in zip(missing, computed, strict=True):
        _TABLE_CACHE[key] = table
        while len(_TABLE_CACHE) > _TABLE_CACHE_SIZE:
            del _TABLE_CACHE[next(iter(_TABLE_CACHE))]
    return [_TABLE_CACHE[key] for key in keys]


def clear_table_cache() -> None:
    """Forget the cached candidate tables (benchmarks measuring a cold start call this)."""
    _TABLE_CACHE.clear()


def deadline_checkpoint(deadline: Deadline) -> Checkpoint:
    """The planner's checkpoint for this request: RequestTimeoutError once its deadline has passed."""

    def checkpoint() -> None:
        if deadline.remaining_s() <= 0:
            raise RequestTimeoutError(timeout_s=deadline.timeout_s)

    return checkpoint


def table_jobs(body: FleetPlanRequest, inputs: FleetInputs, models: dict[str, ModelSpec]) -> list[TableJob]:
    """Each workload's candidate-table job, in the request's order (equal shapes give equal jobs); a
    workload with classes has none (its arrangements are its options: planner/fleet_classes.py)."""
    grid = body.search.to_grid()
    return [
        (
            models[w.model],
            tuple(inputs.gpus),
            tuple(inputs.precisions),
            w.to_workload(),
            w.shape_slo().to_slo(),
            grid,
            table_levers(body, w, models),
        )
        for w in table_workloads(body)
    ]


def table_workloads(body: FleetPlanRequest) -> list[FleetWorkloadSpec]:
    """The workloads with a candidate table: those without classes, in the request's order."""
    return [w for w in body.workloads if w.classes is None]


def table_levers(body: FleetPlanRequest, w: FleetWorkloadSpec, models: dict[str, ModelSpec] | None = None) -> TableLevers:
    """The workload's speculative mode (its own, else constraints.speculative), when it speculates the draft heads
    published for its model (api/deploy.py, as a single plan's PlanningInputs.draft_methods) and what it pins about
    its drafts (`draft_model`, its spec from `models`, which `fleet_inputs` read; `acceptance_rate`)."""
    mode = body.constraints.speculative if w.speculative is None else w.speculative
    draft = None
    if w.draft_model is not None or w.acceptance_rate is not None:
        spec = None if w.draft_model is None or models is None else models[w.draft_model]
        draft = DraftPin(draft_model=spec, acceptance_rate=w.acceptance_rate)
    return (mode, None if mode == "off" else published_draft_methods(w.model), draft)
