"""Body of GET /v1/plans/{id} (and the answer to POST /v1/plans): the cheapest verified plan, its
cost, its predicted latencies and its justification; `plan_response` builds it from the planner's
`PlanResult`.

Times at the edge are milliseconds (`ttft_ms`, `tpot_ms`) and seconds for end-to-end (`e2e_s`),
as SLOs are usually stated; the justification keeps the planner's SI names (`*_s`, `*_bytes`,
`*_rps`), the unit in every name, so a person can redo each number with the formulas it quotes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from api.rounding import rounded
from api.schemas.catalog import Page
from api.schemas.disaggregation import DisaggregationRead
from api.schemas.plan_result import (
    JustificationRead,
    PlanPredicted,
    PlanProvenance,
    PrefixCachingRead,
    SpeculativeRead,
    VerificationRead,
    justification_read,
    predicted_read,
    provenance_read,
    verification_read,
)
from api.schemas.prices import PlanPriceRead
from planner.packing import InstanceUse
from planner.planning import HOURS_PER_MONTH, PlanResult


class PrecisionRead(BaseModel):
    weights: str
    kv_cache: str


class InstanceRead(BaseModel):
    """Whole instances of one type in the plan (constraints.unit instance): no replica straddles two."""

    provider: str
    instance_type: str
    count: int
    gpus_per_instance: int
    gpus_used: int = Field(description="GPUs running replicas: replicas × tp.")
    stranded_gpus: int = Field(description="count × gpus_per_instance − gpus_used: paid for, idle.")
    usd_per_instance_hour: float
    usd_per_hour: float = Field(description="count × usd_per_instance_hour.")


def instances_read(uses: Sequence[InstanceUse]) -> list[dict[str, Any]] | None:
    """`plan.instances` entries, None in GPU mode (no instances)."""
    if not uses:
        return None
    return [
        {
            "provider": u.provider,
            "instance_type": u.instance_type,
            "count": u.count,
            "gpus_per_instance": u.gpus_per_instance,
            "gpus_used": u.gpus_used,
            "stranded_gpus": u.stranded_gpus,
            "usd_per_instance_hour": u.usd_per_instance_hour,
            "usd_per_hour": u.usd_per_hour,
        }
        for u in uses
    ]


class FleetRowRead(BaseModel):
    gpu: str
    tp: int
    replicas: int
    gpus: int
    precision: PrecisionRead
    batch_limit: int = Field(description="vLLM max_num_seqs.")
    chunk_tokens: int | None = Field(description="vLLM max_num_batched_tokens with chunked prefill; null = no chunking.")
    target_rho: float = Field(description="Per-replica arrival rate / per-replica saturation rate.")
    max_rps_at_slo: float = Field(description="Largest per-replica rate meeting every SLO (queueing model).")
    saturation_rps: float
    offered_rps: float
    cost_usd_per_hour: float
    cost_usd_per_month: float | None = Field(default=None, description="cost_usd_per_hour × 730 h.")
    cost_usd_per_million_output_tokens: float | None = Field(
        default=None, description="This row's cost per hour over the output tokens its share of the traffic makes per hour."
    )
    instances: list[InstanceRead] | None = Field(default=None, description="This row's instances (constraints.unit instance).")
    pp: int = Field(default=1, description="Pipeline-parallel stages per replica: a replica is tp × pp GPUs.")
    ep: int = Field(default=1, description="Expert-parallel degree (MoE); 1 = experts tensor-split.")


class PoolRead(BaseModel):
    """One pool of the deployment: an aggregated plan has one `mixed` pool per configuration."""

    role: Literal["prefill", "decode", "mixed"]
    gpu: str
    tp: int
    pp: int = Field(default=1, description="Pipeline-parallel stages per replica: a replica is tp × pp GPUs.")
    ep: int = Field(default=1, description="Expert-parallel degree (MoE); 1 = experts tensor-split.")
    replicas: int
    batch_limit: int | None = Field(description="Most sequences a replica runs at once (null for a prefill pool).")
    chunk_tokens: int | None = Field(description="Prompt tokens per step (a prefill pool's token budget; null = no chunking).")
    precision: PrecisionRead


class PlanDecision(BaseModel):
    """The decisions: for a mixed fleet the largest row, with every row in `fleet`. For a disaggregated plan
    the decode pool's configuration, with `replicas` and `gpus_total` counting both pools; every pool is in `pools`."""

    gpu: str
    tp: int
    pp: int = Field(
        default=1,
        description="Pipeline-parallel stages per replica: a replica is tp × pp GPUs, over several nodes when tp × pp "
        "exceeds a node (docs/design.md, Pipeline and expert parallelism).",
    )
    ep: int = Field(
        default=1,
        description="Expert-parallel degree of an MoE model: 1 = experts tensor-split; tp = attention data-parallel over "
        "the tp GPUs, experts sharded, an all-to-all per MoE layer (docs/design.md, Pipeline and expert parallelism).",
    )
    replicas: int
    gpus_total: int
    precision: PrecisionRead
    batch_limit: int
    chunk_tokens: int | None
    target_rho: float = Field(description="Arrival rate / saturation capacity of the whole plan.")
    fleet: list[FleetRowRead] | None = Field(default=None, description="Every configuration of a mixed fleet.")
    engine: str | None = Field(
        default=None,
        description="The engine the plan is priced on (request `engine` or constraints.pin.engine; `engine` at the top "
        "says why); null when none was asked for (the engine-agnostic calibration).",
    )
    instances: list[InstanceRead] | None = Field(
        default=None,
        description="Whole instances the plan buys (constraints.unit instance; every row's in a mixed fleet); null in GPU mode.",
    )
    speculative: SpeculativeRead | None = Field(
        default=None,
        description="The speculative decoding the plan deploys (constraints.speculative); null without. Its predicted and "
        "verified figures are the plan's own.",
    )
    prefix_caching: PrefixCachingRead | None = Field(
        default=None,
        description="The prefix cache the plan deploys (workload.prefix_reuse); null without reuse or when a cache does not "
        "lower the cost. Its predicted and verified figures are the plan's own.",
    )
    topology: Literal["aggregated", "disaggregated"] = Field(
        default="aggregated", description="Whether prefill and decode share replicas (`aggregated`) or run in separate pools."
    )
    pools: list[PoolRead] = Field(
        default_factory=list,
        description="The deployment's pools: one `mixed` pool per configuration of an aggregated plan; a `prefill` and a "
        "`decode` pool of a disaggregated one.",
    )


class PlanCost(BaseModel):
    """On-demand cost of the whole plan, in `currency`."""

    usd_per_hour: float
    usd_per_month: float = Field(description="730 hours.")
    usd_per_million_output_tokens: float = Field(description="usd_per_hour over the output tokens served per hour, × 1e6.")
    currency: Literal["USD"] = "USD"
    prices: list[PlanPriceRead] = Field(
        default_factory=list, description="The price each GPU of the plan was costed at: whose, which, from when and where from."
    )
    notes: list[str] = Field(
        default_factory=list,
        description="GPUs left out because the provider does not price them (and the request gave no price).",
    )


class PlanWarning(BaseModel):
    """A part of the answer resting on weak evidence."""

    code: Literal["low_confidence_plan", "low_confidence_alternative"] = Field(
        description="`low_confidence_plan`: the plan runs on the GPU; `low_confidence_alternative`: a priced alternative does."
    )
    gpu: str
    grade: str = Field(description="The GPU's calibration grade.")
    message: str


class BatchJobVerificationRead(BaseModel):
    """One replica simulated on a sample of the job, every request present at the start (planner/batch_jobs.py)."""

    sample_requests: int = Field(description="Requests simulated (the replica's whole share when smaller than 4,000).")
    seed: int
    completion_rate_rps: float = Field(
        description="Completions per second between the 10th and 90th percentile completion times."
    )
    ci_low_rps: float | None = Field(
        description="Batch-means confidence interval of the rate (10 time blocks); null for one wave."
    )
    ci_high_rps: float | None
    confidence_level: float
    window_completions: int
    window_s: float
    makespan_s: float = Field(description="When the sample's last request finished.")
    makespan_rate_rps: float = Field(
        description="(sample + batch slots) / makespan: the plan uses the lowest of this, completion_rate_rps and the "
        "analytic rate, so its finish formula covers the sample's own drain."
    )
    predicted_makespan_s: float = Field(
        description="(sample + slots) / throughput_rps_per_replica: the finish formula on the sample."
    )


class BatchJobRead(BaseModel):
    """A batch job's plan: throughput per replica, replicas, finish time and cost per job (planner/batch_jobs.py)."""

    requests: int
    prompt_tokens_total: float = Field(description="requests × mean prompt length.")
    output_tokens_total: float = Field(description="requests × mean output length.")
    slots: int = Field(description="Sequences one replica runs at once: min(batch_limit, KV cache / mean request).")
    throughput_rps_per_replica: float = Field(
        description="The rate the job is sized with: the lower of the analytic and the simulated."
    )
    analytic_throughput_rps: float = Field(description="The queueing model's saturation rate at this setting (every slot busy).")
    verified_throughput_rps: float | None = Field(description="The simulator's completion rate; null when verify was false.")
    verification: BatchJobVerificationRead | None
    replicas: int
    gpus: int
    requests_per_replica: int = Field(description="⌈requests / replicas⌉: the busiest replica's share.")
    finish_h: float = Field(description="(requests_per_replica + slots) / throughput_rps_per_replica, in hours.")
    deadline_h: float | None
    max_gpus: int | None
    billed_h_per_replica: float = Field(description="Each replica bills from the start to the finish, per second, 60 s minimum.")
    gpu_hours: float = Field(description="replicas × tp × billed_h_per_replica.")
    price_usd_per_gpu_hour: float = Field(description="The on-demand price per GPU-hour the job is costed at.")
    cost_usd: float = Field(description="gpu_hours × price_usd_per_gpu_hour: the whole job.")
    usd_per_million_output_tokens: float = Field(description="cost_usd / output_tokens_total × 1e6.")
    binding: Literal["deadline", "max_gpus", "deadline_and_max_gpus"] = Field(
        description="What set the replica count: the deadline (the cheapest count meeting it) or the GPU budget (the most that fit)."
    )
    candidates_total: int
    candidates_evaluated: int = Field(
        description="Candidates whose exact throughput was computed; the rest were beaten by their cost floor."
    )
    verifications: int
    billing: str = Field(description="How the cost is billed, in a sentence.")
    method: str = Field(description="How the plan was found, in a sentence.")


class EngineProfileRead(BaseModel):
    """The efficiency profile a GPU was priced with under the chosen engine (planner/engines.py)."""

    gpu: str
    engine: str
    generation: str | None = Field(
        description="Engine release generation the profile was fitted on (major.minor, e.g. `0.11`), `all` for the profile "
        "pooled over the engine's releases; null for the per-GPU calibration."
    )
    source: str
    fallback: bool = Field(
        description="True when the pair (or the requested generation) had no profile of its own and a documented fallback "
        "stood in."
    )
    reason: str
    at_bounds: list[str] = Field(
        default_factory=list,
        description="Fitted parameters of the profile sitting on a bound of their range (e.g. `η_compute = 1`): pinned by "
        "the bound, not determined by the data; an efficiency η on a bound makes the profile under-determined (low "
        "confidence), while the overhead or overlap on the ends of their ranges are admissible; the reason says which.",
    )
    calibration_grade: str | None = Field(
        default=None,
        description="The calibration grade (low, medium, high) the GPU is priced at on this profile: its catalog grade, "
        "lowered one step when `at_bounds` names an efficiency η (the reason says so; low stays low). `calibration_grades` and "
        "constraints.min_confidence use it. Null in plans stored before it was kept.",
    )


class EngineRead(BaseModel):
    """Which engine the plan is priced on and why."""

    chosen: str
    allowed: list[str] = Field(description="The engines the request allowed.")
    reason: str = Field(description="Why this engine: the cheapest of those allowed, or the only one allowed.")
    profile: EngineProfileRead = Field(description="The plan's GPU under the chosen engine.")
    profiles: list[EngineProfileRead] = Field(default_factory=list, description="Every GPU of the plan (a mixed fleet's rows).")


class PlanResponse(BaseModel):
    id: str
    name: str | None
    plan: PlanDecision
    cost: PlanCost
    predicted: PlanPredicted | None = Field(description="Predicted latency percentiles; null for a batch job (no latency SLO).")
    justification: JustificationRead | None = Field(
        description="step_model, memory, roofline, queueing, binding, alternatives, sensitivity, candidates; SI units in every "
        "name. Null for a batch job (its `batch_job` section says how it was planned)."
    )
    verification: VerificationRead | None = Field(
        description="Simulated percentiles next to the SLOs; null when verify was false."
    )
    provenance: PlanProvenance
    calibration_grades: dict[str, str] = Field(
        default_factory=dict, description="Calibration grade (low, medium, high) of each GPU the plan runs on."
    )
    warnings: list[PlanWarning] = Field(
        default_factory=list,
        description="What the plan or an alternative rests on that deserves a second look: a GPU whose calibration is graded low.",
    )
    engine: EngineRead | None = Field(
        default=None, description="The engine the plan is priced on, its profile and why; null when the request named none."
    )
    batch_job: BatchJobRead | None = Field(
        default=None,
        description="A batch job's throughput, replicas, finish time and cost per job; null for interactive traffic.",
    )
    disaggregation: DisaggregationRead | None = Field(
        default=None,
        description="Why the plan is (or is not) disaggregated: per-pool ρ and binding constraint, the KV transfer's cost, "
        "the interference removed, predicted and simulated p99s, and the other topology's best plan; null unless "
        "constraints.topology is `disaggregated` or `any`.",
    )


class PlanSummaryRead(BaseModel):
    """One stored plan in a list (GET /v1/plans): what it was asked and what it chose, enough to pick
    the plan to open; the whole plan is GET /v1/plans/{id}."""

    id: str
    name: str | None = Field(description="The deployment the plan was made for; null for none.")
    created_at: datetime
    catalog_version: int = Field(description="The catalog version the plan was made against.")
    model: str = Field(description="The model's catalog slug.")
    workload: Literal["interactive", "batch", "classes"] = Field(
        description="Traffic at a rate within SLOs, a job of fixed size, or several traffic classes (a class plan)."
    )
    arrival_rate_rps: float | None = Field(
        description="Arrivals per second (interactive; a class plan's summed over its classes); null for a batch job."
    )
    requests: int | None = Field(description="Requests in the job (batch); null for interactive traffic.")
    deadline_h: float | None = Field(description="The batch job's deadline; null without one and for interactive traffic.")
    gpu: str = Field(description="The GPU type; a class plan's first pool's, a disaggregated plan's decode pool's.")
    tp: int = Field(description="Tensor parallelism; a class plan's first pool's, a disaggregated plan's decode pool's.")
    replicas: int = Field(description="Replicas; a class or disaggregated plan's summed over its pools.")
    gpus_total: int
    topology: Literal["aggregated", "disaggregated"] = Field(
        description="One pool serving prefill and decode, or separate prefill and decode pools (plan.topology)."
    )
    shape: str = Field(
        description="The deployment in words: `8 × h100-sxm (tp 2, 4 replicas)`; a disaggregated plan's xPyD and "
        "pools, `1P2D: 2 × h100-sxm prefill (tp 2, 1 replica), 4 × a100-80gb-sxm decode (tp 2, 2 replicas)`; a class "
        "plan's pools joined by `; `."
    )
    precision: str = Field(description="weights/kv_cache; a class plan's first pool's, a disaggregated plan's decode pool's.")
    cost_usd_per_hour: float = Field(description="On-demand cost of the whole plan, as planned.")
    cost_usd_per_month: float = Field(description="730 hours.")
    job_cost_usd: float | None = Field(description="The whole batch job's cost; null for interactive traffic.")
    prefix_cache_hit_rate: float | None = Field(
        description="plan.prefix_caching.hit_rate: the prefix cache's hit rate; null without a cache (and for a class plan)."
    )
    prefix_cache_tokens: int | None = Field(
        description="plan.prefix_caching.cache_tokens: KV tokens each replica gives the cache; null without a cache."
    )
    prefix_cache_routing: Literal["random", "prefix_aware", "as_measured"] | None = Field(
        description="plan.prefix_caching.routing; null without a cache."
    )
    speculative_method: Literal["eagle", "mtp", "medusa", "draft_model"] | None = Field(
        description="plan.speculative.method: the draft that proposes tokens; null without speculative decoding."
    )
    speculative_draft_tokens: int | None = Field(
        description="plan.speculative.draft_tokens: k, tokens drafted per sequence and step; null without speculative decoding."
    )
    speculative_draft_model: str | None = Field(
        description="The catalog model drafting (constraints.pin.draft_model) when the method is draft_model; else null."
    )
    currency: Literal["USD"] = "USD"


class PlanPage(Page[PlanSummaryRead]):
    """A page of stored plans, newest first."""


def _row_read(row: Any, result: PlanResult) -> dict[str, Any]:
    offered_total = sum(r.offered_rps for r in result.rows)
    cost_share = row.cost_usd_per_hour / result.cost_usd_per_hour if result.cost_usd_per_hour > 0 else 0.0
    traffic_share = row.offered_rps / offered_total if offered_total > 0 else 0.0
    return {
        "gpu": row.gpu,
        "tp": row.tp,
        "replicas": row.replicas,
        "gpus": row.gpus,
        "precision": {"weights": row.weights_precision, "kv_cache": row.kv_precision},
        "batch_limit": row.batch_limit,
        "chunk_tokens": row.chunk_tokens,
        "target_rho": row.target_rho,
        "max_rps_at_slo": row.max_rps_at_slo,
        "saturation_rps": row.saturation_rps,
        "offered_rps": row.offered_rps,
        "cost_usd_per_hour": row.cost_usd_per_hour,
        "cost_usd_per_month": row.cost_usd_per_hour * HOURS_PER_MONTH,
        "cost_usd_per_million_output_tokens": (
            result.cost_usd_per_million_output_tokens * cost_share / traffic_share if traffic_share > 0 else None
        ),  # the plan's $/Mtok × (share of cost ÷ share of traffic)
        "instances": instances_read(row.instances),
        "pp": row.pp,
        "ep": row.ep,
    }


def _mixed_pool(row: Any) -> dict[str, Any]:
    return {
        "role": "mixed",
        "gpu": row.gpu,
        "tp": row.tp,
        "pp": row.pp,
        "ep": row.ep,
        "replicas": row.replicas,
        "batch_limit": row.batch_limit,
        "chunk_tokens": row.chunk_tokens,
        "precision": {"weights": row.weights_precision, "kv_cache": row.kv_precision},
    }


def plan_response(
    plan_id: str,
    name: str | None,
    result: PlanResult,
    created_at: str,
    *,
    prices: Sequence[Mapping[str, Any]] = (),
    price_notes: Sequence[str] = (),
    calibration_grades: Mapping[str, str] | None = None,
    engine: str | None = None,
) -> dict[str, Any]:
    """The JSON body (also what is stored) of one plan; `prices` are the prices of the GPUs the
    plan uses (PlanPriceRead), `price_notes` say which GPUs were left out unpriced,
    `calibration_grades` the calibration grade of each GPU planned with (none given: no grades,
    no warnings), `engine` the pinned engine it echoes. Numbers are rounded as api/rounding.py
    says; `result` keeps them unrounded."""
    main = result.row
    if result.predicted is None or result.justification is None or result.provenance is None:
        raise ValueError("a plan response needs the planner's justification (PlanningRequest.explain)")
    body = {
        "id": plan_id,
        "name": name,
        "plan": {
            "gpu": main.gpu,
            "tp": main.tp,
            "pp": main.pp,
            "ep": main.ep,
            "replicas": result.replicas,
            "gpus_total": result.gpus_total,
            "precision": {"weights": main.weights_precision, "kv_cache": main.kv_precision},
            "batch_limit": main.batch_limit,
            "chunk_tokens": main.chunk_tokens,
            "target_rho": result.target_rho,
            "fleet": [_row_read(r, result) for r in result.rows] if len(result.rows) > 1 else None,
            "engine": engine,
            "instances": instances_read(result.instances),
            "speculative": None if result.speculative is None else SpeculativeRead.model_validate(result.speculative),
            "prefix_caching": None if result.prefix_caching is None else PrefixCachingRead.model_validate(result.prefix_caching),
            "topology": "aggregated",
            "pools": [_mixed_pool(r) for r in result.rows],
        },
        "cost": {
            "usd_per_hour": result.cost_usd_per_hour,
            "usd_per_month": result.cost_usd_per_month,
            "usd_per_million_output_tokens": result.cost_usd_per_million_output_tokens,
            "currency": "USD",
            "prices": [dict(price) for price in prices if price["gpu"] in {r.gpu for r in result.rows}],
            "notes": list(price_notes),
        },
        "predicted": predicted_read(result.predicted),
        "justification": justification_read(result.justification),
        "verification": verification_read(result.verification),
        "provenance": provenance_read(replace(result.provenance, created_at=created_at)),
    }
    answer = PlanResponse.model_validate(body).model_dump(mode="json")
    answer.update(_confidence(answer, result, calibration_grades or {}))
    read: dict[str, Any] = rounded(PlanResponse.model_validate(answer).model_dump(mode="json"))
    return read


def _confidence(answer: Mapping[str, Any], result: PlanResult, grades: Mapping[str, str]) -> dict[str, Any]:
    """The plan's GPUs' grades, each alternative's `confidence` (its GPU's grade), and a warning for
    every low-graded GPU the plan or a priced alternative rests on (the plan's own first, each GPU once)."""
    plan_gpus = list(dict.fromkeys(row.gpu for row in result.rows))
    warnings: list[dict[str, Any]] = []
    warned: set[str] = set()
    for gpu in plan_gpus:
        if grades.get(gpu) == "low":
            warned.add(gpu)
            warnings.append(
                {
                    "code": "low_confidence_plan",
                    "gpu": gpu,
                    "grade": "low",
                    "message": (
                        f"the plan runs on {gpu}, whose calibration is graded low (GET /v1/gpus/{gpu}: efficiency.confidence): "
                        "its capacity and latencies may be off by more than the calibration's usual error; "
                        "constraints.min_confidence leaves such GPUs out"
                    ),
                }
            )
    justification = dict(answer["justification"])
    alternatives = []
    for entry in justification.get("alternatives") or []:
        gpu = entry.get("name") if entry.get("kind") == "gpu" else entry.get("gpu")
        grade = grades.get(gpu) if gpu is not None else None
        alternatives.append({**entry, "confidence": grade})
        if grade == "low" and gpu not in warned and entry.get("cost_usd_per_hour") is not None:
            warned.add(gpu)
            warnings.append(
                {
                    "code": "low_confidence_alternative",
                    "gpu": gpu,
                    "grade": "low",
                    "message": (
                        f"the alternative on {gpu} rests on a calibration graded low (GET /v1/gpus/{gpu}: efficiency.confidence): "
                        "its cost may be off by more than the calibration's usual error"
                    ),
                }
            )
    if "alternatives" in justification:
        justification["alternatives"] = alternatives
    return {
        "justification": justification,
        "calibration_grades": {gpu: grades[gpu] for gpu in plan_gpus if gpu in grades},
        "warnings": warnings,
    }
