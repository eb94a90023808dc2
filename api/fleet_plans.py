"""From a fleet-plan request naming catalog rows to the planner's `FleetSpec`, and from the
`FleetPlan` back to the response body.

`plan_fleet(body, catalog)` reads the GPUs, models and precisions the request names (404 for an
unknown slug or efficiency profile), applies the request's price overrides, builds each
workload's candidate table once per distinct (model, request mix, SLO) with
`planner.fleet_candidates.CandidateTables`, and solves one fleet MILP (`planner.fleet.solve_fleet`).
An infeasible fleet raises the planner's InfeasiblePlanError, whose members (workload, period,
gpu, gpus_short, shortfalls) the problem document carries.

Bounded work (docs/reliability.md "Bounded work"): the catalog is read in the request's thread,
then the tables and the MILP run under the request's `Deadline`. The MILP's limit is the one
policy every planning endpoint shares (api.settings.solver_time_limit_s), taken when the MILP
starts: the least of the service's `solver_time_limit_s`, a share of the time the request has left
and the request's own `solver_time_limit_s`, which may only lower it; the tables' jobs carry the deadline into the worker processes, which stop at the next
(GPU, tp) search once it has passed, and jobs not yet started are cancelled; `solve_fleet` checks
it between stages. So a request answered 503 stops burning CPU within one stage. Before any of
that, a request whose MILP would be larger than `MAX_MILP_COLUMNS` is a 422 naming the bound.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from api.deploy import published_draft_methods
from api.disagg_plans import LINK
from api.errors import RequestTimeoutError
from api.inputs import BUILT_IN_EFFICIENCIES, engine_gpus, engine_read, priced
from api.observability import Deadline
from api.rounding import rounded
from api.schemas.fleet_plan_response import (
    AssignmentRead,
    CandidateRead,
    CandidateSearchRead,
    ClassPoolsAssignmentRead,
    CostRead,
    DemandShadowPriceRead,
    FleetClassesRead,
    FleetClassPoolRead,
    FleetClassRead,
    FleetLeversRead,
    FleetPlanResponse,
    FleetPoolRead,
    FleetTopologyRead,
    GpuPriceRead,
    InventoryShadowPriceRead,
    ModelSizeRead,
    PeriodRead,
    PoolAssignmentRead,
    ShadowPricesRead,
    SolverRead,
)
from api.schemas.fleet_plans import FleetPlanRequest, FleetWorkloadSpec
from api.schemas.plan_result import PrefixCachingRead, SpeculativeRead
from api.schemas.plans import DEFAULT_PRECISIONS, EngineRead, PlanWarning, PrecisionRead
from api.schemas.prices import price_overrides
from api.settings import DEFAULT_PRICE_PROVIDER
from catalog.errors import NotFoundError
from catalog.fleet_plans import FleetPlans, new_fleet_plan_id
from catalog.prices import ChosenPrice
from catalog.repository import Catalog, Page
from planner.confidence import meets
from planner.errors import InfeasiblePlanError, PlannerInputError
from planner.fleet_candidates import (
    CandidateGrid,
    CandidateTable,
    candidate_table,
    no_candidates_error,
)
from planner.fleet_classes import arrangement_options
from planner.fleet_levers import NO_LEVERS, CandidateLevers, DraftPin, SpeculativeMode
from planner.fleet_pools import pool_options
from planner.fleet_solve import solve_fleet
from planner.fleet_spec import (
    Checkpoint,
    ClassFigure,
    FleetClassAssignment,
    FleetConstraints,
    FleetPlan,
    FleetSpec,
    FleetWorkload,
    GpuPrice,
    PoolConfig,
    PoolOption,
    SpotOffer,
    no_checkpoint,
)
from planner.optimizer import Candidate
from planner.plan_records import PlanConstraints
from planner.planning import HOURS_PER_MONTH, SECONDS_PER_HOUR, PlanningInputs, PlanningRequest
from planner.specs import GpuSpec, ModelSpec, Precision
from planner.speculative import check_draft_model
from planner.units import MS_PER_S
from planner.workload import FixedLength, Slo, Workload

_PAGE = 500

SHARE_POOLS_NOTE = (
    "share_pools is accepted but not modelled in this version: each workload runs its own replicas, "
    "so workloads of the same model never share one (the plan may cost more than a pooled one)."
)


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetInputs:
    """What the catalog and the request give the planner, and what to tell the caller about it."""

    gpus: tuple[GpuSpec, ...]
    precisions: tuple[Precision, ...]
    prices: dict[str, GpuPrice]
    price_sources: dict[str, str]
    chosen_prices: dict[str, ChosenPrice]
    spot: dict[str, SpotOffer]
    catalog_version: int
    notes: tuple[str, ...]
    #: The answer's `engine` section (api/inputs.py engine_read) when the request named an engine.
    engine: EngineRead | None = None


def _pages(list_page: Callable[..., Page]) -> Iterator[str]:
    """Every slug a catalog listing (`list_gpus`, `list_quantizations`) pages through."""
    offset = 0
    while True:
        page = list_page(limit=_PAGE, offset=offset)
        yield from (str(record["slug"]) for record in page.items)
        offset += len(page.items)
        if not page.items or offset >= page.total:
            return


def resolve_inputs(body: FleetPlanRequest, catalog: Catalog, default_provider: str = DEFAULT_PRICE_PROVIDER) -> FleetInputs:
    """GPU specs (at the request's provider's prices, else `default_provider`'s, with the
    request's overrides on top), precisions, prices and spot offers, with the same defaults as
    /v1/plans: every catalog GPU, precisions bf16/bf16 and fp8/fp8. NotFoundError for any unknown
    GPU slug the request names (constraints, inventory, prices, spot) or an unknown provider, or a
    stored efficiency profile missing for a GPU it names (unnamed GPUs lacking it are skipped).
    GPUs the provider does not price are left out with a note (catalog.prices)."""
    notes: list[str] = []
    named = set(body.inventory) | set(body.prices) | set(body.spot)
    for slug in sorted(named):
        catalog.get_gpu(slug)  # 404 for a slug the catalog lacks
    named_gpus = body.constraints.gpus is not None
    allowed = list(dict.fromkeys(body.constraints.gpus)) if body.constraints.gpus is not None else list(_pages(catalog.list_gpus))
    gpus: list[GpuSpec] = []
    prices: dict[str, GpuPrice] = {}
    sources: dict[str, str] = {}
    specs: list[GpuSpec] = []
    for slug in allowed:
        try:
            specs.append(catalog.gpu_spec(slug, body.efficiency_profile))
        except NotFoundError:
            if named_gpus or body.efficiency_profile in BUILT_IN_EFFICIENCIES:
                raise
    engine = None
    if body.engine is not None:  # each GPU at its engine profile; GPUs the engine does not run on are left out
        on_engine, choices = engine_gpus(catalog, specs, body.engine, body.efficiency_profile)
        specs = list(on_engine)
        if specs:
            engine = engine_read(body.engine, [choices[g.slug] for g in specs])
    pricing = priced(catalog, specs, body.provider or default_provider, price_overrides(body.prices))
    notes.extend(pricing.notes)
    for slug, price in body.prices.items():
        if price.reserved_3y is not None or price.spot is not None:
            notes.append(f"prices.{slug}: reserved_3y and spot are not used by fleet plans (spot offers are `spot`)")
    for spec in pricing.specs:
        slug = spec.slug
        chosen = pricing.prices[slug]
        on_demand = chosen.on_demand_usd_per_hour
        reserved = chosen.reserved_1y_usd_per_hour
        if not meets(spec.calibration_grade, body.constraints.min_confidence):
            notes.append(
                f"{slug} left out: its calibration is graded {spec.calibration_grade}, below the minimum "
                f"confidence {body.constraints.min_confidence}"
            )
            continue
        if on_demand <= 0:
            notes.append(f"{slug} has no on-demand price: left out (give one in `prices`)")
            continue
        if reserved is None:
            reserved = on_demand
            notes.append(f"{slug} has no reserved price: reserving it is priced at its on-demand price")
        gpus.append(spec)
        prices[slug] = GpuPrice(on_demand_usd_per_hour=on_demand, reserved_usd_per_hour=reserved)
        sources[slug] = "request" if chosen.override else "catalog"
    spot: dict[str, SpotOffer] = {}
    for slug, offer in body.spot.items():
        if slug not in prices:
            notes.append(f"spot offer for {slug} ignored: that GPU type is not allowed or has no price")
            continue
        spot[slug] = SpotOffer(discount_fraction=offer.discount, max_gpus=offer.max_gpus)
    if body.constraints.precisions is not None:
        precisions = tuple(catalog.precision(p.weights, p.kv_cache) for p in body.constraints.precisions)
    else:
        known = set(_pages(catalog.list_quantizations))
        precisions = tuple(catalog.precision(w, kv) for w, kv in DEFAULT_PRECISIONS if w in known and kv in known)
    if body.share_pools:
        notes.append(SHARE_POOLS_NOTE)
    return FleetInputs(
        gpus=tuple(gpus),
        precisions=precisions,
        prices=prices,
        price_sources=sources,
        chosen_prices=pricing.prices,
        spot=spot,
        catalog_version=catalog.catalog_version(),
        notes=tuple(notes),
        engine=engine,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetOutcome:
    plan: FleetPlan
    inputs: FleetInputs
    tables: dict[str, CandidateTable]  # workload name → its table (shared between equal shapes)
    distinct_tables: int
    candidates_ms: float
    plan_ms: float
    pool_options_offered: dict[str, int] = field(default_factory=dict)  # workload name → pool options offered
    arrangements_offered: dict[str, tuple[str, ...]] = field(default_factory=dict)  # workload name → class arrangements


#: Candidate tables kept per process, keyed by everything they depend on (a re-plan after a
#: demand, price or inventory change reuses them); the oldest is dropped past this many.
_TABLE_CACHE_SIZE = 256
_TABLE_CACHE: dict[tuple[object, ...], CandidateTable] = {}

#: Most replica variables (Σ_w candidates_w × periods) a fleet MILP may have: past it, building the
#: model and its LP relaxations alone would not fit the request timeout on a 2-core machine
#: (docs/fleet-benchmark.md "Bounded work: the cost model").
MAX_MILP_COLUMNS = 60_000

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

    def submit(self, job: _TableJob, expires_at_unix_s: float | None) -> Future[CandidateTable]:
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
_TableJob = tuple[ModelSpec, tuple[GpuSpec, ...], tuple[Precision, ...], Workload, Slo, CandidateGrid, "TableLevers"]
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
    job: _TableJob, expires_at_unix_s: float | None = None, checkpoint: Checkpoint = no_checkpoint
) -> CandidateTable:
    model, gpus, precisions, workload, slo, grid, (speculative, published, draft) = job
    if expires_at_unix_s is not None:
        checkpoint = _ExpiresAt(expires_at_unix_s)
    return candidate_table(
        model=model, gpus=gpus, precisions=precisions, workload=workload, slo=slo, grid=grid, checkpoint=checkpoint,
        speculative=speculative, published=published, draft=draft,
    )  # fmt: skip


def _in_workers(jobs: list[_TableJob], deadline: Deadline | None) -> list[CandidateTable]:
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


def candidate_tables(jobs: list[_TableJob], deadline: Deadline | None = None) -> list[CandidateTable]:
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
        checkpoint = no_checkpoint if deadline is None else _deadline_checkpoint(deadline)
        computed = [_compute_table(job, checkpoint=checkpoint) for job in missing.values()]
    for key, table in zip(missing, computed, strict=True):
        _TABLE_CACHE[key] = table
        while len(_TABLE_CACHE) > _TABLE_CACHE_SIZE:
            del _TABLE_CACHE[next(iter(_TABLE_CACHE))]
    return [_TABLE_CACHE[key] for key in keys]


def clear_table_cache() -> None:
    """Forget the cached candidate tables (benchmarks measuring a cold start call this)."""
    _TABLE_CACHE.clear()


def _deadline_checkpoint(deadline: Deadline) -> Checkpoint:
    """The planner's checkpoint for this request: RequestTimeoutError once its deadline has passed."""

    def checkpoint() -> None:
        if deadline.remaining_s() <= 0:
            raise RequestTimeoutError(timeout_s=deadline.timeout_s)

    return checkpoint


def milp_size_error(workloads: list[FleetWorkload], periods: int) -> PlannerInputError | None:
    """The 422 for a fleet whose MILP would have more replica columns (Σ_w candidates_w × periods)
    than MAX_MILP_COLUMNS, or None."""
    columns = sum(len(w.candidates) for w in workloads) * periods  # Σ_w |C_w| · P replica variables
    if columns <= MAX_MILP_COLUMNS:
        return None
    return PlannerInputError(
        f"the fleet MILP would have {columns} replica variables (Σ candidates per workload × {periods} periods), "
        f"more than this service's bound of {MAX_MILP_COLUMNS}: plan fewer workloads or periods, or narrow "
        "constraints.gpus, constraints.precisions or the search grid",
        constraint="milp_columns",
        limit=MAX_MILP_COLUMNS,
        needed=columns,
    )


def fleet_inputs(
    body: FleetPlanRequest, catalog: Catalog, default_provider: str = DEFAULT_PRICE_PROVIDER
) -> tuple[FleetInputs, dict[str, ModelSpec]]:
    """The specs a fleet plan is made of (`resolve_inputs`) and its models, read from the catalog;
    NotFoundError, or PlannerInputError when no GPU type or no precision is left to plan with."""
    inputs = resolve_inputs(body, catalog, default_provider)
    models = {slug: catalog.model_spec(slug) for slug in dict.fromkeys(w.model for w in body.workloads)}
    for index, w in enumerate(body.workloads):
        if w.draft_model is None:
            continue
        draft = models.get(w.draft_model) or catalog.model_spec(w.draft_model)  # 404 for a slug the catalog lacks
        try:
            check_draft_model(models[w.model], draft)
        except PlannerInputError as error:  # a plan's constraints.pin.draft_model is a fleet workload's draft_model
            raise PlannerInputError(
                error.detail, constraint="draft_model", field=f"workloads[{index}].draft_model", workload=w.name
            ) from None
        models[w.draft_model] = draft
    if not inputs.gpus:
        if body.constraints.gpus is None:  # the caller constrained nothing: what is missing is the catalog's
            raise PlannerInputError(
                "the catalog has no GPU type priced at this provider that the planner can use: add "
                "one (POST /v1/gpus, POST /v1/prices) or give prices in the request",
                constraint="gpus",
            )
        raise PlannerInputError("no GPU types to plan with: allow at least one", constraint="gpus")
    if not inputs.precisions:
        if body.constraints.precisions is None:
            defaults = ", ".join(f"{w}/{kv}" for w, kv in DEFAULT_PRECISIONS)
            raise PlannerInputError(
                f"the catalog has none of the default precisions {defaults}: add their quantizations "
                "(POST /v1/quantizations) or name precisions in constraints.precisions",
                constraint="precisions",
            )
        raise PlannerInputError("no precisions to plan with: allow at least one", constraint="precisions")
    return inputs, models


def table_jobs(body: FleetPlanRequest, inputs: FleetInputs, models: dict[str, ModelSpec]) -> list[_TableJob]:
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


def plan_fleet(
    body: FleetPlanRequest,
    catalog: Catalog,
    default_provider: str = DEFAULT_PRICE_PROVIDER,
    *,
    deadline: Deadline | None = None,
    solver_time_limit_s: float | None = None,
) -> FleetOutcome:
    """The cheapest fleet for `body` at the request's provider's prices (else `default_provider`'s).
    The catalog is read here; the tables and the MILP run under `deadline` when one is given
    (RequestTimeoutError past it, the work stopped), the MILP within api.settings.solver_time_limit_s
    of `solver_time_limit_s` (the service's; None: the request's alone), the time left and the
    request's `solver_time_limit_s`. Raises NotFoundError,
    InfeasiblePlanError (a workload no configuration serves, or demand beyond inventory or
    budget), PlannerInputError (no GPUs or precisions, a MILP past MAX_MILP_COLUMNS), SolverError."""
    started = time.perf_counter()
    inputs, models = fleet_inputs(body, catalog, default_provider)
    configured = body.solver_time_limit_s if solver_time_limit_s is None else solver_time_limit_s
    if deadline is None:
        return plan_with_tables(body, inputs, models, started=started, deadline=None, solver_time_limit_s=configured)
    return deadline.run(
        plan_with_tables, body, inputs, models, started=started, deadline=deadline, solver_time_limit_s=configured
    )


def plan_with_tables(
    body: FleetPlanRequest,
    inputs: FleetInputs,
    models: dict[str, ModelSpec],
    *,
    started: float,
    deadline: Deadline | None,
    solver_time_limit_s: float,
    tables: list[CandidateTable] | None = None,
    candidates_ms: float | None = None,
) -> FleetOutcome:
    """The tables and the MILP: pure work on specs already read (run under the request deadline).
    `tables` (one per workload without classes, in order) are used as given when an operation's tasks computed
    them (api/fleet_operation.py), with `candidates_ms` the time they took; else they are computed here. A
    workload with classes is offered its arrangements (`_class_options`)."""
    jobs = table_jobs(body, inputs, models)
    if tables is None:
        tables = candidate_tables(jobs, deadline)
    tabled = dict(zip((w.name for w in table_workloads(body)), tables, strict=True))
    by_workload: dict[str, CandidateTable] = {}
    workloads = []
    checkpoint = no_checkpoint if deadline is None else _deadline_checkpoint(deadline)
    for w in body.workloads:
        if w.classes is not None:
            arranged = _class_options(body, w, inputs, models, checkpoint, solver_time_limit_s)
            workloads.append(
                FleetWorkload(name=w.name, candidates=(), demand_rps=tuple(w.day_demand(body.periods)), pool_options=arranged)
            )
            continue
        table = tabled[w.name]
        options = _pool_options(body, w, inputs, models, checkpoint)
        candidates = () if w.topology == "disaggregated" else table.candidates
        if not candidates and not options:
            if w.topology == "aggregated":
                raise no_candidates_error(w.name, table)
            raise InfeasiblePlanError(
                f"workload {w.name!r} (topology {w.topology}) has no prefill and decode pools meeting its SLOs at every "
                "period's demand"
                + ("" if w.topology == "disaggregated" else " and no aggregated candidate")
                + ": allow more GPU types or precisions, or relax its SLOs",
                constraint="candidates",
                workload=w.name,
            )
        by_workload[w.name] = table
        workloads.append(
            FleetWorkload(name=w.name, candidates=candidates, demand_rps=tuple(w.day_demand(body.periods)), pool_options=options)
        )
    if (too_large := milp_size_error(workloads, body.periods)) is not None:
        raise too_large
    if candidates_ms is None:
        candidates_ms = (time.perf_counter() - started) * MS_PER_S
    used = {c.gpu for w in workloads for c in w.candidates} | {g for w in workloads for o in w.pool_options for g in o.gpu_types}
    spec = FleetSpec(
        workloads=tuple(workloads),
        prices={gpu: price for gpu, price in inputs.prices.items() if gpu in used},
        inventory={gpu: counts if isinstance(counts, int) else tuple(counts) for gpu, counts in body.inventory.items()},
        spot={gpu: offer for gpu, offer in inputs.spot.items() if gpu in used},
        period_hours=body.period_hours,
        constraints=FleetConstraints(
            min_replicas=body.constraints.min_replicas,
            n_plus_one=body.constraints.n_plus_one,
            budget_usd_per_day=body.constraints.budget_usd_per_day,
        ),
    )
    if deadline is None:
        plan = solve_fleet(spec, time_limit_s=min(solver_time_limit_s, body.solver_time_limit_s))
    else:
        checkpoint()
        # the one policy (api.settings.solver_time_limit_s), taken when the MILP starts: the tables took their share
        limit_s = deadline.solver_time_limit_s(solver_time_limit_s, body.solver_time_limit_s)
        plan = solve_fleet(spec, time_limit_s=limit_s, checkpoint=checkpoint)
    return FleetOutcome(
        plan=plan,
        inputs=inputs,
        tables=by_workload,
        distinct_tables=len({(job[0], job[3].at_rate(1.0), job[4], job[6]) for job in jobs}),
        candidates_ms=candidates_ms,
        plan_ms=(time.perf_counter() - started) * MS_PER_S,
        pool_options_offered={w.name: sum(o.arrangement is None for o in w.pool_options) for w in workloads},
        arrangements_offered={w.name: tuple(o.arrangement for o in w.pool_options if o.arrangement) for w in workloads},
    )


def _pool_options(
    body: FleetPlanRequest, w: Any, inputs: FleetInputs, models: dict[str, ModelSpec], checkpoint: Checkpoint
) -> tuple[PoolOption, ...]:
    """The workload's separate-pool options (planner/fleet_pools.py): none for topology aggregated."""
    if w.topology == "aggregated":
        return ()
    return pool_options(
        gpus=inputs.gpus,
        model=models[w.model],
        precisions=inputs.precisions,
        tps=body.search.to_grid().tp_degrees,
        workload=replace(w.to_workload(), prefix_reuse=None),  # pools plan no prefix cache (the replicas' candidates do)
        slo=w.shape_slo().to_slo(),
        link=LINK,
        demand_rps=w.day_demand(body.periods),
        constraints=FleetConstraints(min_replicas=body.constraints.min_replicas, n_plus_one=body.constraints.n_plus_one),
        checkpoint=checkpoint,
    )


def _class_options(
    body: FleetPlanRequest,
    w: FleetWorkloadSpec,
    inputs: FleetInputs,
    models: dict[str, ModelSpec],
    checkpoint: Checkpoint,
    solver_time_limit_s: float,
) -> tuple[PoolOption, ...]:
    """The arrangement options of a workload with classes (planner/fleet_classes.py), each pool planned by the
    single-class planner on the fleet's GPUs, precisions and search grid, under its min_replicas and N+1,
    without speculation (as api/classes_plans.py plans class pools) and unsimulated (as every fleet option)."""
    grid = body.search.to_grid()
    base = PlanningRequest(
        workload=Workload(arrival_rate_rps=1.0, prompt_tokens=FixedLength(tokens=1), output_tokens=FixedLength(tokens=1)),
        slo=Slo(e2e_s=1.0),  # both replaced per pool
        constraints=PlanConstraints(min_replicas=body.constraints.min_replicas, n_plus_one=body.constraints.n_plus_one),
        verify=False,
        tp_degrees=grid.tp_degrees,
        batch_limits=grid.batch_limits,
        chunk_budgets=grid.chunk_budgets,
        solver_time_limit_s=min(solver_time_limit_s, body.solver_time_limit_s),
    )
    planning = PlanningInputs(
        model=models[w.model], gpus=inputs.gpus, precisions=inputs.precisions, catalog_version=inputs.catalog_version
    )
    try:
        return arrangement_options(
            classes=[k.to_class() for k in w.classes or ()],
            inputs=planning,
            base=base,
            periods=body.periods,
            period_hours=body.period_hours,
            checkpoint=checkpoint,
        )
    except InfeasiblePlanError as error:
        raise InfeasiblePlanError(
            f"workload {w.name!r}: {error.detail}: allow more GPU types or precisions, or relax its classes' targets",
            constraint="classes",
            workload=w.name,
        ) from error


def _pool_read(pool: PoolConfig, grades: dict[str, str]) -> FleetPoolRead:
    return FleetPoolRead(
        role="prefill" if pool.role == "prefill" else "decode",
        gpu=pool.gpu,
        tp=pool.tp,
        pp=pool.pp,
        replicas=pool.replicas,
        gpus=pool.gpus,
        precision=PrecisionRead(weights=pool.weights_precision, kv_cache=pool.kv_precision),
        batch_limit=pool.batch_limit,
        chunk_tokens=pool.chunk_tokens,
        rho=pool.rho,
        binding=pool.binding,
        spare_replicas=pool.spare_replicas,
        calibration_grade=grades.get(pool.gpu),
    )


def _topologies(body: FleetPlanRequest, plan: FleetPlan, offered: dict[str, int]) -> dict[str, FleetTopologyRead]:
    """Each workload's requested and chosen topology and the pool option it runs (one for every period)."""
    chosen = {pair.workload: pair.option for period in plan.periods for pair in period.pools}
    return {
        w.name: FleetTopologyRead(
            requested=w.topology,
            chosen="disaggregated" if w.name in chosen else "aggregated",
            pool_option=chosen.get(w.name),
            pool_options_offered=offered.get(w.name, 0),
        )
        for w in body.workloads
    }


def _precision(candidate: Candidate) -> PrecisionRead:
    return PrecisionRead(weights=candidate.weights_precision, kv_cache=candidate.kv_precision)


def _candidate_read(candidate: Candidate) -> CandidateRead:
    return CandidateRead(
        id=candidate.id,
        gpu=candidate.gpu,
        tp=candidate.tp,
        pp=candidate.pp,
        ep=candidate.ep,
        precision=_precision(candidate),
        batch_limit=candidate.batch_limit,
        chunk_tokens=candidate.chunk_tokens,
        gpus_per_replica=candidate.gpus_per_replica,
        max_rps_at_slo=candidate.max_rps_at_slo,
        saturation_rps=candidate.saturation_rps,
    )


def _per_unit_costs(body: FleetPlanRequest, total_usd: float, horizon_hours: float, period_hours: float) -> dict[str, Any]:
    """Cost per hour and per month (730 h) of the schedule, and per million output tokens demanded."""
    streams = [(w.day_demand(body.periods), w.to_workload().output_tokens.mean) for w in body.workloads if w.classes is None]
    streams += [
        (list(k.to_class().day_rps(body.periods)), k.to_class().output_tokens.mean)
        for w in body.workloads
        for k in w.classes or ()
    ]  # a workload with classes: each class's rate and mean output per period
    output_tokens = sum(
        rate * period_hours * SECONDS_PER_HOUR * mean for rates, mean in streams for rate in rates
    )  # Σ λ_wp · h · 3600 s/h · mean output tokens
    usd_per_hour = total_usd / horizon_hours if horizon_hours > 0 else 0.0
    return {
        "usd_per_hour": usd_per_hour,
        "usd_per_month": usd_per_hour * HOURS_PER_MONTH,
        "usd_per_million_output_tokens": total_usd / output_tokens * 1e6 if output_tokens > 0 else None,
    }


def _lever_reads(levers: CandidateLevers) -> dict[str, Any]:
    """A candidate's `prefix_caching` and `speculative` as the response reads them (null without)."""
    prefix, draft = levers.prefix_caching, levers.speculative
    return {
        "prefix_caching": None if prefix is None else PrefixCachingRead.model_validate(prefix, from_attributes=True),
        "speculative": None if draft is None else SpeculativeRead.model_validate(draft, from_attributes=True),
    }


def _candidate_levers(tables: dict[str, CandidateTable], workload: str, candidate: Candidate) -> CandidateLevers:
    table = tables.get(workload)
    return NO_LEVERS if table is None else table.levers.get(candidate.id, NO_LEVERS)


def _levers(body: FleetPlanRequest, plan: FleetPlan, tables: dict[str, CandidateTable]) -> dict[str, FleetLeversRead]:
    """Each workload with replicas: its speculative mode, whether it gave prefix_reuse, and the levers of the
    configuration serving its most GPU-hours (the first such in schedule order on a tie)."""
    gpu_periods: dict[str, dict[str, int]] = {}
    first: dict[str, Candidate] = {}
    for period in plan.periods:
        for a in period.assignments:
            used = gpu_periods.setdefault(a.workload, {})
            used[a.candidate.id] = used.get(a.candidate.id, 0) + a.gpus
            first.setdefault(f"{a.workload}\0{a.candidate.id}", a.candidate)
    out: dict[str, FleetLeversRead] = {}
    for w in body.workloads:
        served = gpu_periods.get(w.name)
        if not served:
            continue
        top = max(served, key=lambda cid: served[cid])  # dicts keep schedule order: max takes the first of equals
        chosen = _candidate_levers(tables, w.name, first[f"{w.name}\0{top}"])
        drafting = chosen.speculative is not None and chosen.speculative.method == "draft_model"
        out[w.name] = FleetLeversRead(
            speculative_mode=table_levers(body, w)[0],
            prefix_reuse=w.prefix_reuse is not None,
            draft_model=w.draft_model if drafting else None,
            **_lever_reads(chosen),
        )
    return out


def _class_rates(body: FleetPlanRequest) -> dict[tuple[str, str], list[float]]:
    """(workload, class) → the class's rate in each period, for the workloads with classes."""
    return {(w.name, k.name): list(k.to_class().day_rps(body.periods)) for w in body.workloads for k in w.classes or ()}


def _class_read(figure: ClassFigure, demand_rps: float) -> FleetClassRead:
    return FleetClassRead(
        name=figure.name,
        pool=figure.pool,
        demand_rps=demand_rps,
        percentile=figure.percentile,
        ttft_ms=figure.ttft_s * MS_PER_S,
        tpot_ms=figure.tpot_s * MS_PER_S,
        e2e_s=figure.e2e_s,
        deadline_h=figure.deadline_h,
        meets_target=figure.meets_target,
        shed_fraction=figure.shed_fraction,
    )


def _class_pools_read(
    arranged: FleetClassAssignment, grades: dict[str, str], rates: dict[tuple[str, str], list[float]]
) -> ClassPoolsAssignmentRead:
    by_pool: dict[str, list[str]] = {}
    here = [pool.role for pool in arranged.pools]
    for figure in arranged.classes:
        # a deferred class in a period without extra replicas is served by the interactive pool's idle capacity
        by_pool.setdefault(figure.pool if figure.pool in here else here[0], []).append(figure.name)
    return ClassPoolsAssignmentRead(
        name=arranged.workload,
        arrangement=arranged.arrangement,
        pools=[
            FleetClassPoolRead(
                name=pool.role,
                classes=by_pool.get(pool.role, []),
                gpu=pool.gpu,
                tp=pool.tp,
                pp=pool.pp,
                ep=pool.ep,
                replicas=pool.replicas,
                gpus=pool.gpus,
                precision=PrecisionRead(weights=pool.weights_precision, kv_cache=pool.kv_precision),
                batch_limit=pool.batch_limit,
                chunk_tokens=pool.chunk_tokens,
                utilisation=pool.rho,
                scheduling="priority" if pool.binding == "priority" else "fcfs",
                calibration_grade=grades.get(pool.gpu),
            )
            for pool in arranged.pools
        ],
        classes=[
            _class_read(figure, rates.get((arranged.workload, figure.name), [0.0] * (arranged.period + 1))[arranged.period])
            for figure in arranged.classes
        ],
        gpus=dict(arranged.gpus),
        demand_rps=arranged.offered_rps,
    )


def _classes(body: FleetPlanRequest, outcome: FleetOutcome, periods: list[PeriodRead]) -> dict[str, FleetClassesRead]:
    """Each workload with classes: the arrangement run (one option for the whole day) and its classes' figures
    in the period of its peak demand (the first such)."""
    out: dict[str, FleetClassesRead] = {}
    for w in body.workloads:
        if w.classes is None:
            continue
        served = [
            (period.demand_rps.get(w.name, 0.0), -period.period, arranged)
            for period in periods
            for arranged in period.class_pools
            if arranged.name == w.name
        ]
        if not served:
            continue
        peak = max(served, key=lambda item: item[:2])[2]
        out[w.name] = FleetClassesRead(
            arrangement=peak.arrangement, offered=list(outcome.arrangements_offered.get(w.name, ())), classes=peak.classes
        )
    return out


def _periods_read(
    plan: FleetPlan,
    grades: dict[str, str],
    tables: dict[str, CandidateTable] | None = None,
    rates: dict[tuple[str, str], list[float]] | None = None,
) -> list[PeriodRead]:
    """Each period's GPUs and workloads' assignments, as served."""
    tables = {} if tables is None else tables
    rates = {} if rates is None else rates
    periods = []
    for period in plan.periods:
        periods.append(
            PeriodRead(
                period=period.index,
                start_hour=period.index * plan.period_hours,
                demand_rps=dict(period.demand_rps),
                on_demand_gpus=dict(period.on_demand_gpus),
                spot_gpus=dict(period.spot_gpus),
                gpus_held=dict(period.gpus_held),
                gpus_used=dict(period.gpus_used),
                workloads=[
                    AssignmentRead(
                        name=a.workload,
                        gpu=a.candidate.gpu,
                        tp=a.candidate.tp,
                        pp=a.candidate.pp,
                        ep=a.candidate.ep,
                        precision=_precision(a.candidate),
                        batch_limit=a.candidate.batch_limit,
                        chunk_tokens=a.candidate.chunk_tokens,
                        replicas=a.replicas,
                        gpus=a.gpus,
                        max_rps_at_slo=a.candidate.max_rps_at_slo,
                        capacity_rps=a.capacity_rps,
                        demand_rps=period.demand_rps[a.workload],
                        offered_rps=a.offered_rps,
                        target_rho=a.target_rho,
                        calibration_grade=grades.get(a.candidate.gpu),
                        **_lever_reads(_candidate_levers(tables, a.workload, a.candidate)),
                    )
                    for a in period.assignments
                ],
                class_pools=[_class_pools_read(arranged, grades, rates) for arranged in period.class_pools],
                pools=[
                    PoolAssignmentRead(
                        name=pair.workload,
                        option=pair.option,
                        ratio=f"{pair.prefill.replicas}P{pair.decode.replicas}D",
                        prefill=_pool_read(pair.prefill, grades),
                        decode=_pool_read(pair.decode, grades),
                        gpus=dict(pair.gpus),
                        demand_rps=period.demand_rps[pair.workload],
                    )
                    for pair in period.pools
                ],
                cost_usd=period.cost_usd,
                utilisation=period.gpu_utilisation,
            )
        )
    return periods


def _notes(inputs: FleetInputs, plan: FleetPlan, tables: list[CandidateTable]) -> list[str]:
    """The inputs' notes, and what the search and the solver could not promise."""
    notes = list(inputs.notes)
    if not all(t.exhaustive for t in tables):
        notes.append("the candidate search hit its root-find bound for some workload: a better configuration may exist")
    if plan.solver.status == "feasible":
        notes.append(
            f"the solver's time limit stopped the search: the plan is within {plan.solver.mip_gap:.2%} of optimal"
            if plan.solver.mip_gap is not None
            else "the solver's time limit stopped the search before a proof"
        )
    return notes


def _low_confidence_warnings(plan: FleetPlan, grades: dict[str, str]) -> list[PlanWarning]:
    """A warning for each scheduled GPU type whose calibration is graded low."""
    scheduled = sorted(
        {a.candidate.gpu for period in plan.periods for a in period.assignments}
        | {gpu for period in plan.periods for pair in period.pools for gpu in pair.gpus}
        | {gpu for period in plan.periods for arranged in period.class_pools for gpu in arranged.gpus}
    )
    return [
        PlanWarning(
            code="low_confidence_plan",
            gpu=gpu,
            grade="low",
            message=(
                f"the schedule runs on {gpu}, whose calibration is graded low (GET /v1/gpus/{gpu}: efficiency.confidence): "
                "its capacity may be off by more than the calibration's usual error; constraints.min_confidence leaves such GPUs out"
            ),
        )
        for gpu in scheduled
        if grades.get(gpu) == "low"
    ]


def _prices_read(inputs: FleetInputs, gpus_priced: set[str]) -> dict[str, GpuPriceRead]:
    """The prices of the GPU types some candidate uses, with where each came from."""
    return {
        gpu: GpuPriceRead(
            on_demand_usd_per_hour=price.on_demand_usd_per_hour,
            reserved_usd_per_hour=price.reserved_usd_per_hour,
            spot_usd_per_hour=(
                price.on_demand_usd_per_hour * (1 - inputs.spot[gpu].discount_fraction)  # on-demand less the discount
                if gpu in inputs.spot
                else None
            ),
            source="request" if inputs.price_sources.get(gpu) == "request" else "catalog",
            provider=inputs.chosen_prices[gpu].provider,
            as_of=inputs.chosen_prices[gpu].as_of,
            price_source=inputs.chosen_prices[gpu].source,
        )
        for gpu, price in sorted(inputs.prices.items())
        if gpu in gpus_priced
    }


def fleet_plan_response(
    body: FleetPlanRequest, outcome: FleetOutcome, *, plan_id: str, created_at: datetime
) -> FleetPlanResponse:
    plan, inputs = outcome.plan, outcome.inputs
    grades = {gpu.slug: gpu.calibration_grade for gpu in inputs.gpus}
    periods = _periods_read(plan, grades, outcome.tables, _class_rates(body))
    cost = plan.cost
    shadow = plan.shadow_prices
    tables = list({id(t): t for t in outcome.tables.values()}.values())
    notes = _notes(inputs, plan, tables)
    gpus_priced = (
        {c.gpu for t in tables for c in t.candidates}
        | {gpu for period in plan.periods for pair in period.pools for gpu in pair.gpus}
        | {gpu for period in plan.periods for arranged in period.class_pools for gpu in arranged.gpus}
    )
    warnings = _low_confidence_warnings(plan, grades)
    response = FleetPlanResponse(
        id=plan_id,
        created_at=created_at.astimezone(UTC).isoformat(),
        catalog_version=inputs.catalog_version,
        efficiency_profile=body.efficiency_profile,
        period_hours=plan.period_hours,
        reserved_gpus={gpu: n for gpu, n in plan.reserved_gpus.items() if n},
        prices=_prices_read(inputs, gpus_priced),
        periods=periods,
        cost=CostRead(
            usd_total=cost.total_usd,
            usd_per_day=cost.usd_per_day,
            horizon_hours=len(plan.periods) * plan.period_hours,
            reserved_usd=cost.reserved_usd,
            on_demand_usd=cost.on_demand_usd,
            spot_usd=cost.spot_usd,
            idle_usd=cost.idle_usd,
            per_workload_usd=dict(cost.per_workload_usd),
            per_period_usd=list(cost.per_period_usd),
            **_per_unit_costs(body, cost.total_usd, len(plan.periods) * plan.period_hours, plan.period_hours),
        ),
        shadow_prices=None
        if shadow is None
        else ShadowPricesRead(
            method=shadow.method,
            demand=[
                DemandShadowPriceRead(workload=d.workload, period=d.period, usd_per_rps=d.usd_per_rps) for d in shadow.demand
            ],
            inventory=[InventoryShadowPriceRead(gpu=i.gpu, period=i.period, usd_per_gpu=i.usd_per_gpu) for i in shadow.inventory],
        ),
        solver=SolverRead(
            name=plan.solver.name, status=plan.solver.status, gap=plan.solver.mip_gap, solve_ms=plan.solver.solve_s * MS_PER_S
        ),
        model_size=ModelSizeRead(
            candidates=plan.model_size.candidates,
            candidates_dropped=plan.candidates_dropped,
            variables=plan.model_size.variables,
            constraints=plan.model_size.constraints,
        ),
        candidate_search=CandidateSearchRead(
            distinct_tables=outcome.distinct_tables,
            options_enumerated=sum(t.options_enumerated for t in tables),
            mu_searches=sum(t.mu_searches for t in tables),
            predictions=sum(t.predictions for t in tables),
            exhaustive=all(t.exhaustive for t in tables),
            ms=outcome.candidates_ms,
        ),
        plan_ms=outcome.plan_ms,
        notes=notes,
        warnings=warnings,
        engine=inputs.engine,
        candidates={name: [_candidate_read(c) for c in table.candidates] for name, table in outcome.tables.items()}
        if body.include_candidates
        else None,
        topologies=_topologies(body, plan, outcome.pool_options_offered),
        levers=_levers(body, plan, outcome.tables),
        classes=_classes(body, outcome, periods),
    )
    # what is served (and stored) is rounded (api/rounding.py); `outcome` keeps the unrounded figures
    return FleetPlanResponse.model_validate(rounded(response.model_dump(mode="json")))


def create_fleet_plan(
    body: FleetPlanRequest,
    catalog: Catalog,
    fleet_plans: FleetPlans,
    *,
    default_provider: str,
    deadline: Deadline,
    solver_time_limit_s: float,
) -> FleetPlanResponse:
    """POST /v1/fleet-plans' work, in every planning endpoint's shape: resolve the specs, plan under
    the request's deadline (`plan_fleet`), store, and answer the stored response."""
    plan_id = new_fleet_plan_id()
    created_at = datetime.now(UTC)
    outcome = plan_fleet(body, catalog, default_provider, deadline=deadline, solver_time_limit_s=solver_time_limit_s)
    return store_fleet_plan(body, outcome, fleet_plans, plan_id=plan_id, created_at=created_at)


def store_fleet_plan(
    body: FleetPlanRequest, outcome: FleetOutcome, fleet_plans: FleetPlans, *, plan_id: str, created_at: datetime
) -> FleetPlanResponse:
    """Store the planned fleet under `plan_id` and answer it as stored."""
    plan = fleet_plan_response(body, outcome, plan_id=plan_id, created_at=created_at)
    fleet_plans.save(
        plan_id=plan_id,
        request=body.model_dump(mode="json"),
        response=plan.model_dump(mode="json"),
        catalog_version=plan.catalog_version,
        created_at=created_at,
    )
    return plan
