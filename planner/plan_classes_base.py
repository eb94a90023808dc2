"""The types and shared steps of planner/plan_classes.py: the plan's dataclasses, one call's
context, the single-class plans its pools are made of and their per-class figures.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from planner.candidates import Option
from planner.expert_parallel import expert_parallel_kv_capacity_tokens, expert_parallel_step_model
from planner.memory import kv_capacity_tokens
from planner.performance import build_step_model
from planner.pipeline import ParallelSection, replica_parallel_section
from planner.plan_deferral import DeferralSchedule
from planner.plan_predict import cached_prediction
from planner.plan_rows import FleetRow
from planner.planning import PlanningInputs, PlanningRequest, PlanResult, plan_capacity
from planner.queueing import Latency, Prediction, predict
from planner.specs import GpuSpec, ModelSpec, Precision
from planner.step_model import StepModel
from planner.traffic_classes import TrafficClass, merged_workload
from planner.workload import Serving, Slo, Workload


@dataclass(frozen=True, slots=True, kw_only=True)
class ArrangementCost:
    name: str
    cost_usd_per_hour: float | None  # None: not comparable / infeasible
    reason: str
    #: shared_priority_shedding only: shared_priority's cost less this one's (what the admission
    #: limit saves); None when either is not priced.
    saving_vs_no_shedding_usd_per_hour: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassFigures:
    name: str
    arrangement_pool: str
    percentile: float
    ttft_s: float  # at `percentile`
    tpot_s: float
    e2e_s: float
    deadline_h: float | None
    meets_target: bool
    shed_fraction: float
    #: Admit a request of the class only while a replica holds fewer than this many (running +
    #: waiting, every class); None: always admitted. Set by the shedding arrangement.
    admission_limit: int | None = None
    #: The share of the class's requests served in a later period of the day than they arrived in
    #: (the deferred arrangement's schedule, planner/plan_deferral.py `deferred_fraction`); 0 elsewhere.
    deferred_fraction: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolPlan:
    name: str
    classes: tuple[str, ...]
    gpu: str
    tp: int
    replicas: int
    batch_limit: int
    chunk_tokens: int | None
    cost_usd_per_hour: float
    utilisation: float
    weights_precision: str
    kv_precision: str
    scheduling: str = "fcfs"  # "priority": the classes share the pool, the lower priority value served first
    #: Pipeline stages and expert-parallel degree of a replica (planner/pipeline.py): tp × pp GPUs.
    pp: int = 1
    ep: int = 1
    #: A pool in pipeline stages or expert-parallel: its per-stage time, bubble and communication terms, as an
    #: aggregated plan's justification.parallel (`pool_parallel_section`); None at pp 1 and ep 1.
    parallel: ParallelSection | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassVerified:
    """One class on the priority pool: the queueing model's wait for a slot against the step-level
    class simulator's, and the class's simulated latencies and refusals (planner/simulator_classes_step.py)."""

    name: str
    wait_model_s: float  # at the plan's percentile
    wait_simulated_s: float
    ttft_simulated_s: float  # the class's simulated TTFT at the plan's percentile
    e2e_simulated_s: float
    shed_fraction_simulated: float
    meets_target: bool
    tpot_simulated_s: float = 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class PeriodVerified:
    """One period of a deferred plan's day run: the interactive pool at that period's rates with the
    background work it takes then, simulated at step level, and the background work arriving then."""

    period: int
    interactive_rps: float
    background_in_pool_rps: float  # served on the interactive pool's idle capacity (the day run's average)
    extra_replicas: int
    #: Each interactive class's simulated (TTFT, TPOT, E2E) at its percentile, by name; empty when the
    #: pool was not simulated with the background in it (a mixed fleet or a configuration that cannot hold it).
    interactive: tuple[tuple[str, float, float, float], ...]
    background_completion_h: float  # the longest arrival-to-done of the work arriving in the period
    meets_target: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class Verified:
    method: str
    interactive_p99_wait_model_s: float
    interactive_p99_wait_simulated_s: float
    classes: tuple[ClassVerified, ...] = ()
    #: Pools the simulator refused on the way (configuration and replicas, why), cheapest first.
    refuted: tuple[str, ...] = ()
    #: The deferred arrangement's day run, period by period (planner/simulator_classes_day.py).
    periods: tuple[PeriodVerified, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassesPlan:
    chosen: str
    compared: tuple[ArrangementCost, ...]
    pools: tuple[PoolPlan, ...]
    classes: tuple[ClassFigures, ...]
    verification: Verified | None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Candidate:
    name: str
    cost_usd_per_hour: float
    pools: tuple[PoolPlan, ...]
    classes: tuple[ClassFigures, ...]
    #: Whether the cost is the arrangement's last word: its single-class plans were simulated (or
    #: the request does not verify). A cost that is not final is a lower bound: simulation only
    #: ever raises a single-class plan's cost (planner/plan_verify.py `_verified_search`).
    final: bool = True
    verification: Verified | None = None
    #: The deferred arrangement's schedule (extra background replicas per period); None for the others.
    schedule: DeferralSchedule | None = None


def _pool(
    name: str, classes: Sequence[TrafficClass], result: PlanResult, prediction: Prediction, inputs: PlanningInputs
) -> PoolPlan:
    row = result.row
    return PoolPlan(
        name=name,
        classes=tuple(k.name for k in classes),
        gpu=row.gpu,
        tp=row.tp,
        replicas=result.replicas,
        batch_limit=row.batch_limit,
        chunk_tokens=row.chunk_tokens,
        cost_usd_per_hour=result.cost_usd_per_hour,
        utilisation=result.target_rho,
        weights_precision=row.weights_precision,
        kv_precision=row.kv_precision,
        pp=row.pp,
        ep=row.ep,
        parallel=row_parallel_section(row, inputs, merged_workload(classes), prediction),
    )


def _row_setting(row: FleetRow, inputs: PlanningInputs) -> tuple[GpuSpec, Precision]:
    """The GPU and precision a plan row names."""
    gpu = next(g for g in inputs.gpus if g.slug == row.gpu)
    precision = next(
        p for p in inputs.precisions if p.weights.slug == row.weights_precision and p.kv_cache.slug == row.kv_precision
    )
    return gpu, precision


def _row_model(row: FleetRow, inputs: PlanningInputs) -> tuple[StepModel, int]:
    """The step model and KV capacity of a plan row's configuration, as enumeration builds them (planner/candidates.py)."""
    gpu, precision = _row_setting(row, inputs)
    return pool_step_model(gpu, inputs.model, precision, tp=row.tp, pp=row.pp, ep=row.ep)


def row_parallel_section(
    row: FleetRow, inputs: PlanningInputs, workload: Workload, prediction: Prediction
) -> ParallelSection | None:
    """A class pool's parallel section (planner/pipeline.py `replica_parallel_section`, None at pp 1 and ep 1): its
    step model rebuilt as the pool's prediction builds it, its decode step at the prediction's mean occupancy, as an
    aggregated plan's justification shows its replica's."""
    if row.pp == 1 and row.ep == 1:
        return None
    gpu, precision = _row_setting(row, inputs)
    sm, _ = pool_step_model(gpu, inputs.model, precision, tp=row.tp, pp=row.pp, ep=row.ep)
    occupancy = prediction.queueing.mean_occupancy if prediction.queueing else 1.0
    return replica_parallel_section(
        gpu, inputs.model, precision.weights, sm, tp=row.tp, pp=row.pp, ep=row.ep, batch=occupancy, workload=workload
    )


def pool_step_model(
    gpu: GpuSpec, model: ModelSpec, precision: Precision, *, tp: int, pp: int = 1, ep: int = 1
) -> tuple[StepModel, int]:
    """The step model and KV capacity of one replica of a pool: tp × pp GPUs in stages (planner/pipeline.py), or an
    ep-GPU expert-parallel group (planner/expert_parallel.py), as planner/candidates.py builds its groups."""
    if ep > 1:
        return (
            expert_parallel_step_model(gpu, model, precision, ep, gpu.efficiency),
            expert_parallel_kv_capacity_tokens(gpu, model, precision, ep, gpu.efficiency),
        )
    return (
        build_step_model(gpu, model, precision, tp, gpu.efficiency, pp=pp),
        kv_capacity_tokens(gpu, model, precision, tp, gpu.efficiency, pp=pp),
    )


def _pool_prediction(result: PlanResult, workload: Workload, percentile: float, inputs: PlanningInputs) -> Prediction:
    """The queueing model's prediction for a single-class plan's largest row at its load: the one an
    explained plan reports as `predicted` (planning.py `_main_prediction`), without the explained
    plan's re-planned sections, which the class plan does not show."""
    row = result.row
    step_model, capacity = _row_model(row, inputs)
    if workload.arrival_cv == 1.0 and len(result.rows) == 1:
        # a random split of Poisson arrivals is Poisson: one replica at λ/r, the rate the search probed
        serving = Serving(replicas=1, batch_limit=row.batch_limit, chunk_tokens=row.chunk_tokens)
        rate_rps = workload.arrival_rate_rps / row.replicas
        return cached_prediction(step_model, workload.at_rate(1.0), serving, capacity, rate_rps, percentile)
    serving = Serving(replicas=row.replicas, batch_limit=row.batch_limit, chunk_tokens=row.chunk_tokens)
    return predict(step_model, workload.at_rate(row.offered_rps), serving, kv_capacity_tokens=capacity, percentile=percentile)


def _figures(k: TrafficClass, pool: str, result: PlanResult, prediction: Prediction) -> ClassFigures:
    def at(latency: Latency | None) -> float:
        return 0.0 if latency is None else latency.at_percentile_s

    return ClassFigures(
        name=k.name,
        arrangement_pool=pool,
        percentile=prediction.percentile,
        ttft_s=at(prediction.ttft),
        tpot_s=at(prediction.tpot),
        e2e_s=at(prediction.e2e),
        deadline_h=k.deadline_h,
        meets_target=True,  # the single-class planner met the target it was given
        shed_fraction=0.0,
    )


@dataclass(slots=True, kw_only=True)
class _Context:
    """One `plan_classes` call: its inputs and the single-class plans made so far.

    `plans` holds them by (class names, SLO, verified): the deferred arrangement's pools are also
    the segregated ones, and a verified plan stands in for an unverified one of the same pool (it
    is the final answer the unverified one is a lower bound of)."""

    classes: Sequence[TrafficClass]
    inputs: PlanningInputs
    base: PlanningRequest
    plans: dict[tuple[tuple[str, ...], Slo, bool], PlanResult] = field(default_factory=dict)
    #: The priority pool's candidate configurations, enumerated once for both priority arrangements.
    priority_options: list[Option] | None = None

    @property
    def checkpoint(self) -> Callable[[], None] | None:
        return self.base.checkpoint


def _plan_one(ctx: _Context, classes: Sequence[TrafficClass], slo: Slo, *, verify: bool) -> tuple[PlanResult, Prediction, bool]:
    """The single-class plan for `classes` merged at `slo` (simulated when `verify` and the request
    verifies), its prediction, and whether it is final (simulated, or the request does not verify).

    Planned without the justification (`explain` off): the class plan shows each pool's cost and
    predicted percentiles, not its re-planned sections."""
    names = tuple(k.name for k in classes)
    verify = verify and ctx.base.verify
    key = (names, slo, verify)
    if not verify and (names, slo, True) in ctx.plans:
        key = (names, slo, True)
    if key not in ctx.plans:
        request = replace(ctx.base, workload=merged_workload(classes), slo=slo, advise=False, explain=False, verify=verify)
        ctx.plans[key] = plan_capacity(request, ctx.inputs)
    result = ctx.plans[key]
    prediction = _pool_prediction(result, merged_workload(classes), slo.percentile, ctx.inputs)
    return result, prediction, key[2] or not ctx.base.verify


def meets_slo(slo: Slo, ttft_s: float, tpot_s: float, e2e_s: float) -> bool:
    return all(
        target is None or value <= target for target, value in ((slo.ttft_s, ttft_s), (slo.tpot_s, tpot_s), (slo.e2e_s, e2e_s))
    )


class _NotComparable(Exception):
    """An arrangement the request gives no grounds to price (its reason is the message)."""
