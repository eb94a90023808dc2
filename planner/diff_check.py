"""The forward model on a stored plan (planner/diff.py's module docstring): each deployed configuration at
its share of a new workload's rate, with the plan's levers, predicted by the planner's own queueing model;
a disaggregated plan's pools by planner/disagg.py's model. Re-planning compares these checks' answers.

A replica is rebuilt at its own layout, as the search built it: tp × pp GPUs in pipeline stages
(planner/pipeline.py) or an ep-GPU expert-parallel group (planner/expert_parallel.py), through
planner/plan_classes_base.py `pool_step_model`, the step model and KV capacity a class plan's pools share; a
disaggregated plan's prefill replica of pp stages serves pp prompts at once, each through the stages in turn
(`lone_prompt_step_model`, planner/plan_disagg_candidates.py's module docstring).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from planner.diff_changes import PoolRole
from planner.disagg import DecodePool, KvLink, PrefillPool, predict_disagg
from planner.errors import HeadroomError, PlannerInputError, UnstableLoadError
from planner.expert_parallel import expert_parallel_memory_fit
from planner.memory import kv_bytes_per_token, memory_fit
from planner.pipeline import check_pipeline_parallel, lone_prompt_step_model
from planner.plan_classes_base import pool_step_model
from planner.plan_prefix import measured_prompts, reduced_prompts
from planner.precision import check_precision
from planner.prefix_cache import Routing, prefix_hits
from planner.queueing import Prediction, predict
from planner.specs import GpuSpec, ModelSpec, Precision
from planner.speculative import (
    MethodName,
    draft_model_speculation,
    head_speculation,
    speculative_kv_capacity_tokens,
    speculative_step_model,
)
from planner.step_model import Speculation, StepModel
from planner.units import MS_PER_S
from planner.workload import Serving, Slo, Workload


@dataclass(frozen=True, slots=True, kw_only=True)
class DeployedRow:
    """One configuration of a plan as deployed, with today's specs, and the share of the traffic it serves."""

    gpu: GpuSpec
    precision: Precision
    tp: int
    replicas: int
    batch_limit: int
    chunk_tokens: int | None
    traffic_share: float = 1.0
    #: Pipeline stages and expert-parallel degree of a replica (a plan stored before rows carried them: 1).
    pp: int = 1
    ep: int = 1

    def __post_init__(self) -> None:
        if self.replicas < 1 or self.tp < 1 or self.pp < 1 or self.ep < 1:
            raise PlannerInputError(
                f"a deployed row needs replicas, tp, pp and ep >= 1, got {self.replicas}, {self.tp}, {self.pp}, {self.ep}"
            )
        if not (0.0 < self.traffic_share <= 1.0):
            raise PlannerInputError(f"traffic_share must be in (0, 1], got {self.traffic_share}")

    @property
    def cost_usd_per_hour(self) -> float:
        return self.replicas * self.tp * self.pp * self.gpu.price_usd_per_hour_on_demand  # replicas × tp·pp GPUs × $/GPU-h


@dataclass(frozen=True, slots=True, kw_only=True)
class DeployedSpeculation:
    """The speculative decoding a plan deploys (its `plan.speculative`): the draft method, k and the
    acceptance rate it was planned with, and for `draft_model` the catalog model that drafts
    (constraints.pin.draft_model)."""

    method: MethodName
    draft_tokens: int
    acceptance_rate: float
    draft_model: ModelSpec | None = None

    def __post_init__(self) -> None:
        if self.method == "draft_model" and self.draft_model is None:
            raise PlannerInputError("a plan speculating with a draft model needs the draft model", field="pin.draft_model")

    def on(self, model: ModelSpec, row: DeployedRow) -> Speculation:
        """The draft's per-pass cost on `row`'s configuration, as planner/candidates.py speculative_groups builds it."""
        if self.draft_model is not None:
            return draft_model_speculation(
                self.draft_model, row.precision, row.tp, draft_tokens=self.draft_tokens, acceptance_rate=self.acceptance_rate
            )
        return head_speculation(
            model, row.precision, row.tp, method=self.method, draft_tokens=self.draft_tokens, acceptance_rate=self.acceptance_rate
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DeployedPrefixCache:
    """The prefix cache a plan deploys (its `plan.prefix_caching`): the KV tokens each replica gives
    it and the routing it was planned under (`as_measured` for a measured hit rate)."""

    cache_tokens: int
    routing: str

    def __post_init__(self) -> None:
        if self.cache_tokens < 0:
            raise PlannerInputError(f"a prefix cache needs cache_tokens >= 0, got {self.cache_tokens}", field="cache_tokens")


@dataclass(frozen=True, slots=True, kw_only=True)
class Levers:
    """What a plan deploys beside its rows' configurations, each None when it deploys none."""

    speculation: DeployedSpeculation | None = None
    prefix_cache: DeployedPrefixCache | None = None


NO_LEVERS = Levers()


def _with_levers(
    row: DeployedRow, model: ModelSpec, workload: Workload, levers: Levers, step_model: StepModel, capacity: int
) -> tuple[StepModel, int, Workload]:
    """The row's step model, KV capacity and offered workload with the plan's levers, as the planner
    predicted its configuration: speculation verifies the draft and gives the draft's weights and cache
    their memory (planner/candidates.py speculative_groups); the prefix cache takes its tokens from the
    KV and the replicas prefill the prompt mixture of its hit classes (planner/plan_prefix.py), at the
    row's replica count and `workload`'s rate (the hit rate the plan reports is at its own replica count).
    A workload without prefix reuse finds nothing cached: the cache only takes its memory."""
    if levers.speculation is not None:
        if row.pp > 1 or row.ep > 1:
            raise PlannerInputError(
                f"a plan speculating on a replica of pp {row.pp}, ep {row.ep} was not made by this planner "
                "(drafts are planned on pp 1, ep 1 replicas only)",
                field="speculative",
            )
        spec = levers.speculation.on(model, row)
        capacity = speculative_kv_capacity_tokens(row.gpu, model, row.precision, row.tp, row.gpu.efficiency, spec)
        step_model = speculative_step_model(step_model, spec)
    cache = levers.prefix_cache
    if cache is None:
        return step_model, capacity, workload
    capacity -= cache.cache_tokens
    if capacity <= 0:
        raise PlannerInputError(f"a prefix cache of {cache.cache_tokens} tokens leaves no KV for the sequences on {row.gpu.slug}")
    reuse = workload.prefix_reuse
    if reuse is None:
        return step_model, capacity, workload
    if reuse.measured:
        assert reuse.hit_rate is not None  # measured ⇔ a hit rate is given (PrefixReuse)
        mix = measured_prompts(workload.prompt_tokens, reuse.hit_rate)
    else:
        routing: Routing = "prefix_aware" if cache.routing == "prefix_aware" else "random"
        hits = prefix_hits(reuse, cache.cache_tokens, routing, row.replicas, arrival_rate_rps=workload.arrival_rate_rps)
        mix = reduced_prompts(workload.prompt_tokens, hits.classes)
    return step_model, capacity, replace(workload, prompt_tokens=mix, prefix_reuse=None)


@dataclass(frozen=True, slots=True, kw_only=True)
class RowCheck:
    """One row under the forward model: latencies at the SLO's percentile (seconds) or why it cannot run."""

    gpu: str
    per_replica_rate_rps: float
    meets_slo: bool
    unstable: bool
    utilisation: float | None
    predicted_s: dict[str, float]
    misses: tuple[str, ...]
    problem: str | None = None
    role: PoolRole = "mixed"


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """A plan under the forward model at one arrival rate."""

    arrival_rate_rps: float
    meets_slo: bool
    rows: tuple[RowCheck, ...]
    cost_usd_per_hour: float
    summary: str


def _targets(slo: Slo) -> dict[str, float]:
    return {m: t for m, t in (("ttft", slo.ttft_s), ("tpot", slo.tpot_s), ("e2e", slo.e2e_s)) if t is not None}


def _at(prediction: Prediction, metric: str) -> float:
    latency = getattr(prediction, metric)
    return 0.0 if latency is None else latency.at_percentile_s


def format_latency(metric: str, seconds: float) -> str:
    """A latency as the summaries show it: E2E in seconds, TTFT and TPOT in milliseconds."""
    return f"{seconds:.3g} s" if metric == "e2e" else f"{seconds * MS_PER_S:.4g} ms"


def replica_model(
    gpu: GpuSpec, model: ModelSpec, precision: Precision, *, tp: int, pp: int = 1, ep: int = 1
) -> tuple[StepModel, int]:
    """One deployed replica's step model and KV capacity at its layout (module docstring), after the checks the
    search made on it: the GPU runs the precision, tp × pp (ep) is a layout of the model, and its memory still
    holds the weights and one token's KV (ep copies of the non-routed weights when expert-parallel)."""
    check_precision(gpu, precision)
    check_pipeline_parallel(gpu, model, tp, pp, ep)
    if ep > 1:
        fit = expert_parallel_memory_fit(gpu, model, precision, ep, gpu.efficiency)
    else:
        fit = memory_fit(gpu, model, precision, tp, gpu.efficiency, pp=pp)
    if not fit.fits:
        layout = ("" if pp == 1 else f" (tp {tp} × pp {pp})") + ("" if ep == 1 else f" (ep {ep})")
        raise PlannerInputError(f"{model.slug} no longer fits on {tp * pp} × {gpu.slug}{layout}")
    return pool_step_model(gpu, model, precision, tp=tp, pp=pp, ep=ep)


def check_row(row: DeployedRow, model: ModelSpec, workload: Workload, slo: Slo, levers: Levers = NO_LEVERS) -> RowCheck:
    """The row at its share of `workload`'s rate: one replica (at its tp, pp and ep) at λ·share/r, as the planner
    decides replicas, with the plan's speculation and prefix cache (`_with_levers`)."""
    rate = workload.arrival_rate_rps * row.traffic_share / row.replicas  # λ · share / r per replica
    try:
        step_model, capacity = replica_model(row.gpu, model, row.precision, tp=row.tp, pp=row.pp, ep=row.ep)
        step_model, capacity, offered = _with_levers(row, model, workload, levers, step_model, capacity)
        serving = Serving(replicas=1, batch_limit=row.batch_limit, chunk_tokens=row.chunk_tokens)
        prediction = predict(step_model, offered.at_rate(rate), serving, kv_capacity_tokens=capacity, percentile=slo.percentile)
    except HeadroomError as exc:
        return RowCheck(
            gpu=row.gpu.slug,
            per_replica_rate_rps=rate,
            meets_slo=False,
            unstable=False,
            utilisation=None,
            predicted_s={},
            misses=("configuration",),
            problem=exc.detail,
        )
    targets = _targets(slo)
    predicted = {} if prediction.unstable else {metric: _at(prediction, metric) for metric in targets}
    misses = tuple(m for m, target in targets.items() if prediction.unstable or predicted[m] > target)
    return RowCheck(
        gpu=row.gpu.slug,
        per_replica_rate_rps=rate,
        meets_slo=not misses,
        unstable=prediction.unstable,
        utilisation=prediction.utilisation,
        predicted_s=predicted,
        misses=misses,
    )


def check_plan(rows: Sequence[DeployedRow], model: ModelSpec, workload: Workload, slo: Slo, levers: Levers = NO_LEVERS) -> Check:
    """Every row of a deployed plan at `workload`'s rate, with the plan's levers, and a one-sentence summary."""
    if not rows:
        raise PlannerInputError("a deployed plan needs at least one row")
    checks = tuple(check_row(row, model, workload, slo, levers) for row in rows)
    meets = all(c.meets_slo for c in checks)
    return Check(
        arrival_rate_rps=workload.arrival_rate_rps,
        meets_slo=meets,
        rows=checks,
        cost_usd_per_hour=sum(r.cost_usd_per_hour for r in rows),
        summary=_summary(checks, slo, meets),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class DeployedPool:
    """One pool of a disaggregated plan as deployed, with today's specs (a prefill pool has no batch limit)."""

    role: Literal["prefill", "decode"]
    gpu: GpuSpec
    precision: Precision
    tp: int
    replicas: int
    batch_limit: int | None
    #: Pipeline stages and expert-parallel degree of a replica (a plan stored before pools carried them: 1).
    pp: int = 1
    ep: int = 1

    def __post_init__(self) -> None:
        if self.replicas < 1 or self.tp < 1 or self.pp < 1 or self.ep < 1:
            raise PlannerInputError(
                f"a deployed pool needs replicas, tp, pp and ep >= 1, got {self.replicas}, {self.tp}, {self.pp}, {self.ep}"
            )
        if self.role == "decode" and (self.batch_limit is None or self.batch_limit < 1):
            raise PlannerInputError(f"a decode pool needs a batch limit >= 1, got {self.batch_limit}")

    @property
    def gpus_per_replica(self) -> int:
        """tp × pp: the GPUs a replica's KV is spread over, so the links a transfer to or from it runs over."""
        return self.tp * self.pp

    @property
    def cost_usd_per_hour(self) -> float:
        return self.replicas * self.gpus_per_replica * self.gpu.price_usd_per_hour_on_demand  # replicas × tp·pp GPUs × $/GPU-h


def check_pools(
    prefill: DeployedPool, decode: DeployedPool, model: ModelSpec, workload: Workload, slo: Slo, *, link: KvLink
) -> Check:
    """A disaggregated plan under planner/disagg.py's model at `workload`'s rate: the planner's own
    prediction of its pools (predict_disagg, the KV crossing `link` over min(tp·pp) of the two replicas' GPUs),
    each pool rebuilt at its layout (`replica_model`), a prefill replica of pp stages pp servers of a lone prompt
    (as planner/plan_disagg.py predicts its choice); one row per pool with its ρ; TTFT, TPOT and E2E are the
    deployment's, so both rows carry them."""
    rate = workload.arrival_rate_rps
    pools = (prefill, decode)
    try:
        prefill_step, _ = replica_model(prefill.gpu, model, prefill.precision, tp=prefill.tp, pp=prefill.pp, ep=prefill.ep)
        decode_step, capacity = replica_model(decode.gpu, model, decode.precision, tp=decode.tp, pp=decode.pp, ep=decode.ep)
        prediction = predict_disagg(
            PrefillPool(
                step_model=lone_prompt_step_model(prefill_step, prefill.pp),
                replicas=prefill.replicas * prefill.pp,  # pp prompts in flight on a replica of pp stages
                tp=prefill.gpus_per_replica,
            ),
            DecodePool(
                step_model=decode_step,
                replicas=decode.replicas,
                batch_limit=decode.batch_limit or 1,
                kv_capacity_tokens=float(capacity),
                tp=decode.gpus_per_replica,
            ),
            workload,
            link=link,
            kv_bytes_per_token=kv_bytes_per_token(model, decode.precision.kv_cache),
            percentile=slo.percentile,
        )
    except UnstableLoadError as exc:
        rows = tuple(
            RowCheck(
                gpu=p.gpu.slug,
                per_replica_rate_rps=rate / p.replicas,
                meets_slo=False,
                unstable=True,
                utilisation=None,
                predicted_s={},
                misses=tuple(_targets(slo)),
                problem=None,
                role=p.role,
            )
            for p in pools
        )
        summary = f"a pool would be overloaded ({exc.detail})"
        return Check(arrival_rate_rps=rate, meets_slo=False, rows=rows, cost_usd_per_hour=_pools_cost(pools), summary=summary)
    except HeadroomError as exc:
        rows = tuple(
            RowCheck(
                gpu=p.gpu.slug,
                per_replica_rate_rps=rate / p.replicas,
                meets_slo=False,
                unstable=False,
                utilisation=None,
                predicted_s={},
                misses=("configuration",),
                problem=exc.detail,
                role=p.role,
            )
            for p in pools
        )
        return Check(arrival_rate_rps=rate, meets_slo=False, rows=rows, cost_usd_per_hour=_pools_cost(pools), summary=exc.detail)
    targets = _targets(slo)
    latencies = {"ttft": prediction.ttft_s, "tpot": prediction.tpot_s, "e2e": prediction.e2e_s}
    predicted = {metric: latencies[metric] for metric in targets}
    misses = tuple(m for m, target in targets.items() if predicted[m] > target)
    rows = tuple(
        RowCheck(
            gpu=p.gpu.slug,
            per_replica_rate_rps=rate / p.replicas,  # every request passes through both pools
            meets_slo=not misses,
            unstable=False,
            utilisation=rho,
            predicted_s=dict(predicted),
            misses=misses,
            role=p.role,
        )
        for p, rho in ((prefill, prediction.prefill.rho), (decode, prediction.decode.rho))
    )
    return Check(
        arrival_rate_rps=rate,
        meets_slo=not misses,
        rows=rows,
        cost_usd_per_hour=_pools_cost(pools),
        summary=_summary(rows, slo, not misses),
    )


def _pools_cost(pools: Sequence[DeployedPool]) -> float:
    return sum(p.cost_usd_per_hour for p in pools)


def unavailable(arrival_rate_rps: float, problem: str) -> Check:
    """A plan that cannot be evaluated any more (its GPU, model or profile left the catalog)."""
    row = RowCheck(
        gpu="",
        per_replica_rate_rps=0.0,
        meets_slo=False,
        unstable=False,
        utilisation=None,
        predicted_s={},
        misses=("configuration",),
        problem=problem,
    )
    return Check(arrival_rate_rps=arrival_rate_rps, meets_slo=False, rows=(row,), cost_usd_per_hour=math.nan, summary=problem)


def _summary(checks: Sequence[RowCheck], slo: Slo, meets: bool) -> str:
    targets = _targets(slo)
    label = f"p{slo.percentile:g}"
    problems = [c.problem for c in checks if c.problem]
    if problems:
        return problems[0]
    if any(c.unstable for c in checks):
        return "a replica would be overloaded (arrivals at or above its saturation rate)"
    if meets:
        return f"{label} " + ", ".join(
            f"{m.upper()} {format_latency(m, max(c.predicted_s[m] for c in checks))} ≤ {format_latency(m, t)}"
            for m, t in targets.items()
        )
    worst = [(c, m) for c in checks for m in c.misses]
    return f"{label} " + ", ".join(
        f"{m.upper()} {format_latency(m, c.predicted_s[m])} > {format_latency(m, targets[m])} target" for c, m in worst
    )
