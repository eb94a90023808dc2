"""Candidate configurations for one plan: enumeration, the drops made before any queueing, and the
cheap bounds that let the planner skip most of the queueing model's root-finds.

A candidate is (GPU, weight precision, KV precision, tp, batch limit, chunk budget). A whole
(GPU, precision, tp) group is dropped, with its reason, when the GPU cannot run the precision,
tp does not divide the model, the weights plus one request do not fit, the catalog has no
on-demand price, its calibration is graded below the request's minimum confidence, or an SLO
target lies below a latency no load can undercut:

    TPOT ≥ one decode step of one sequence         t_step(1, 1, 1)
    TTFT ≥ the prefill of the prompt alone         t_step(p_q, 0, p_q(p_q+1)/2)
    E2E  ≥ max(prefill of p_q, (o_q − 1) · t_step(1, 1, 1))

(the queueing model adds waits, step-mates and interference on top of each, so a group these
bounds refuse could not meet the SLO at any rate; p_q, o_q are the lengths at one percentile
point below the SLO's, so sampling noise in the model's percentile never makes the bound unsafe).

Per batch/chunk candidate an upper bound on the queueing model's saturation rate needs none of
its tables (planner/queueing.py `_saturation`: all c = min(batch, ⌊KV capacity / E[p + o]⌋) slots
busy, each request holding one for `steps` steps of mean duration T̄(c)). With d = E[p] +
E[o(o−1)/2]/E[o−1] the mean context a decode reads and π = E[p(p+1)/2]/E[p] the mean position a
prefill token attends to (the queueing model's own moments):

- without chunking, steps = E[o] and T̄(c) is the mean over k ~ Poisson(c/E[o]) arrivals per step
  of t_step(c + k·E[p], c·d, c·d + k·E[p]·π). Holding the weight bytes at n = c (MoE reads only
  more with more tokens) makes the step convex in k (combine(a, b) is convex in b for a fixed
  a), so by Jensen T̄(c) ≥ that step at k = c/E[o] — the mean prefill each step carries:

      saturation ≤ c / (E[o] · t_step(c + c·E[p]/E[o], c·d, c·d + c·E[p]·π/E[o]))

  (exact when the step is compute-bound: long prompts, where the old decode-only bound was loose);
- with a chunk budget C, b = C − c prefill tokens fit beside c decodes; steps = E[⌈p/b⌉] + E[o] − 1
  (over the queueing model's own prompt grid), m = c/steps prompts arrive per step, and T̄(c) is a
  step-weighted mean of one carry step with min(k·E[p], b) tokens and (k·E[p] − b)⁺/b full-budget
  steps. The same Jensen argument bounds it below by the step carrying the mean tokens per step,
  m·E[p] / (1 + E[spill]) ≥ m·E[p] / (1 + m·E[p]/b) =: x; and the budget admits at most b prefill
  tokens per full-chunk step t_full = t_step(c + b, c·d, c·d + b·π):

      saturation ≤ min(c / (steps · t_step(c + x, c·d, c·d + x·π)), b / (E[p] · t_full)).

The bounds are computed in planner/saturation_bounds.py and checked against the queueing model itself
(tests/planner/test_planning_bounds.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import NamedTuple

import numpy as np

from planner.confidence import meets
from planner.errors import UnsupportedConfigurationError
from planner.expert_parallel import (
    expert_parallel_degrees,
    expert_parallel_kv_capacity_tokens,
    expert_parallel_memory_fit,
    expert_parallel_step_model,
    never_faster,
)
from planner.memory import memory_fit
from planner.optimizer import candidate_id
from planner.packing import InstanceOffer, offers_for, per_replica_floor
from planner.packing import cost_usd_per_hour as packed_cost_usd_per_hour
from planner.parallel import is_valid_tensor_parallel
from planner.performance import prefill
from planner.pipeline import lone_prefill_s
from planner.precision import check_precision
from planner.replica_physics import REPLICAS, VARIANTS, replica_physics, variant_physics
from planner.saturation_bounds import ROUNDING, DraftCoefficients, StepCoefficients, bound_moments, saturation_bounds
from planner.specs import GpuSpec, InstanceTypeSpec, ModelSpec, Precision
from planner.speculative import (
    MethodName,
    check_draft_model,
    default_acceptance,
    draft_model_acceptance,
    search_method,
)
from planner.step_model import StepModel
from planner.units import GB, MS_PER_S
from planner.workload import Slo, Workload

#: Default grids (docs/design.md "The optimisation"): tp within a node; batch limits and chunked-prefill
#: budgets as vLLM deployments set `max_num_seqs` and `max_num_batched_tokens` (None = no chunking).
#: Both are plain integers with no engine-side cap (https://docs.vllm.ai/en/latest/models/engine_args.html:
#: `--max-num-seqs`, `--max-num-batched-tokens`), so the grids reach what memory allows rather than an
#: arbitrary 256: a batch limit above a group's KV slot count collapses onto one setting (`_settings`:
#: the KV cache, not the limit, sets its concurrency), so the large limits cost candidates only on
#: groups whose cache really holds that many requests (small models on large-memory GPUs).
#: The spacing is ×2 up to 256 and ×4 above (batch 1,024, 4,096), chunk budgets ×4 to 2,048 then
#: 16,384: every grid point costs the search a queueing prediction per group, and the halfway points
#: (batch 512 and 2,048, chunk 8,192) changed no plan's cost on the 24 requests of
#: bench/plan_latency.py while costing +18 % of p50 CPU (docs/plan-benchmark.md, "The coarser top of the grid").
TP_DEGREES: tuple[int, ...] = (1, 2, 4, 8)
BATCH_LIMITS: tuple[int, ...] = (8, 16, 32, 64, 128, 256, 1024, 4096)
CHUNK_BUDGETS: tuple[int | None, ...] = (None, 512, 2048, 16384)


@dataclass(frozen=True, slots=True, kw_only=True)
class Drop:
    """Why a group of candidates (or one candidate) left before the MILP.

    `constraint` names the physics ("precision", "tensor_parallel", "memory", "price", "ttft",
    "tpot", "e2e", "kv_cache", "queueing", "max_gpus", "budget", "gpu_inventory") or the request's
    trust in the GPU's calibration ("min_confidence");
    `bound_s` / `target_s` carry the latency bound that refused an SLO.
    """

    gpu: str
    weights_precision: str
    kv_precision: str
    tp: int | None
    constraint: str
    reason: str
    bound_s: float | None = None
    target_s: float | None = None
    needed_bytes: float | None = None
    available_bytes: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Group:
    """One (GPU, precision, tp) that holds the model: everything its candidates share."""

    gpu: GpuSpec
    precision: Precision
    tp: int
    step_model: StepModel
    kv_capacity_tokens: int
    kv_slots: int  # ⌊capacity / E[p + o]⌋
    price_usd_per_hour: float  # tp × on-demand price per GPU; in instance mode the per-replica floor min_t P_t/k_t
    batch1_decode_s: float
    prefill_quantile_s: float
    #: Instance mode (planner/packing.py): the instance types a replica of this group fits in; empty
    #: when GPUs are bought one by one.
    offers: tuple[InstanceOffer, ...] = ()
    #: Pipeline stages and expert-parallel degree of a replica (planner/pipeline.py): tp × pp GPUs.
    pp: int = 1
    ep: int = 1

    @property
    def key(self) -> tuple[str, str, str, int]:
        """(GPU, weights, KV, tp); groups differing only in pp or ep share it (`layout_key` tells them apart)."""
        return (self.gpu.slug, self.precision.weights.slug, self.precision.kv_cache.slug, self.tp)

    @property
    def layout_key(self) -> tuple[str, str, str, int, int, int]:
        return (*self.key, self.pp, self.ep)

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    @property
    def layout(self) -> str:
        """The candidate id's part after `tp{tp}/`: `pp2/` with pipeline stages, `ep8/` with expert parallelism."""
        return ("" if self.pp == 1 else f"pp{self.pp}/") + ("" if self.ep == 1 else f"ep{self.ep}/")

    @property
    def draft(self) -> str:
        """The speculative draft its step model verifies, as the candidate id's suffix ("/eagle-k3"); "" without."""
        spec = self.step_model.speculation
        return "" if spec is None else f"/{spec.method}-k{spec.draft_tokens}"

    def cost_usd_per_hour(self, replicas: int) -> float:
        """What `replicas` replicas cost per hour: replicas × price, or the cheapest whole instances
        holding them (never below replicas × price, the floor the search's bounds use)."""
        if self.offers:
            return packed_cost_usd_per_hour(replicas, self.offers)
        return replicas * self.price_usd_per_hour


class Option(NamedTuple):
    """One batch/chunk setting of a group, with its bound on the saturation rate.

    A named tuple rather than a frozen dataclass: a plan enumerates ~2,000 of them, and a tuple is
    built in 0.4 µs where the dataclass took 2.7 µs (5 ms of a plan; measured 2026-12-01)."""

    id: str
    group: Group
    batch_limit: int
    chunk_tokens: int | None
    slots: int
    saturation_bound_rps: float


def _lengths_below(workload: Workload, percentile: float) -> tuple[float, float]:
    q = max(0.5, percentile - 1.0) / 100.0
    return workload.prompt_tokens.quantile(q), workload.output_tokens.quantile(q)


def slo_floor_drop(group_key: tuple[str, str, str, int], group: Group, slo: Slo, output_q: float) -> Drop | None:
    """A Drop when an SLO target lies below what this group takes even with no load at all."""
    gpu, weights, kv, tp = group_key
    floors = (
        ("tpot", slo.tpot_s, group.batch1_decode_s, "one decode step of a single sequence"),
        ("ttft", slo.ttft_s, group.prefill_quantile_s, "the prefill of the prompt alone"),
        (
            "e2e",
            slo.e2e_s,
            max(group.prefill_quantile_s, (output_q - 1.0) * group.batch1_decode_s),
            "the prefill plus one decode step per output token of a single request",
        ),
    )
    for metric, target, bound, what in floors:
        if target is not None and bound > target:
            return Drop(
                gpu=gpu,
                weights_precision=weights,
                kv_precision=kv,
                tp=tp,
                constraint=metric,
                reason=f"{metric} target {target * MS_PER_S:.4g} ms is below {what}: {bound * MS_PER_S:.4g} ms",
                bound_s=bound,
                target_s=target,
            )
    return None


def enumerate_groups(
    *,
    model: ModelSpec,
    gpus: Sequence[GpuSpec],
    precisions: Sequence[Precision],
    workload: Workload,
    slo: Slo,
    tp_degrees: Sequence[int] = TP_DEGREES,
    min_confidence: str | None = None,
    pp_degrees: Sequence[int] = (1,),
    expert_parallel: bool = False,
    ep_degrees: Sequence[int] | None = None,
) -> tuple[list[Group], list[Drop]]:
    """Every (GPU, precision, tp) that can serve the model within the SLO floors, and every drop.

    Pipeline stages (pp in `pp_degrees` beyond 1, planner/pipeline.py; the default (1,) searches none:
    the single-pool planner passes planner/pipeline.py PP_DEGREES, while the fleet, class, batch-job and
    capacity searches, which count a replica's GPUs as tp, do not search stages yet) are searched for a (GPU,
    precision) only where no in-node tp holds the model: where one does, a pipeline of the same GPUs
    reads every stage's weights once per micro-batch (pp × the weight bytes over pp × the bandwidth,
    the same time as one tp-group alone) while tp divides the read, so pp cannot beat tp ≤ a node on
    the step time (tests/planner/test_pipeline.py shows it), and the search would only spend time on it.
    A pipeline group whose stages do not hold the model is left out silently (the in-node memory drops
    already say the model does not fit one node). Where no in-node tp holds the model, tensor parallelism
    over 2, 4 or 8 whole nodes (pp 1, up to as many GPUs as the widest pipeline) is offered too, its
    all-reduce priced on the NIC (planner/parallel.py `tp_link`), so it loses to in-node tp × pp across
    nodes wherever the per-token NIC traffic outweighs the pipeline's re-read of the weights
    (tests/planner/test_pipeline_search.py).

    With `expert_parallel` (the single-pool planner passes it), an MoE model's tp-GPU groups (tp > 1
    dividing its experts, pp 1) are offered a second time as ep = tp: attention data-parallel, experts
    sharded, an all-to-all per MoE layer (planner/expert_parallel.py). Which wins depends on the step's
    tokens (the all-reduces it saves against the dense weights every rank re-reads), so both are priced;
    with a profile that counts no communication the ep group could only lose (it re-reads the dense
    weights and saves nothing) and is not offered. The fleet search (planner/fleet_candidates.py) passes
    it too; the class, batch-job and capacity searches do not offer it yet. `ep_degrees` (a pinned ep, planner/pins.py) keeps
    only the groups of those ep: (1,) no expert-parallel group, (tp,) only the ep = tp ones.

    A GPU whose calibration is graded below `min_confidence` (planner/confidence.py) is dropped
    whole, once per precision, before anything is computed from its efficiencies."""
    groups: list[Group] = []
    drops: list[Drop] = []
    shape = _RequestShape.of(workload, slo)
    for gpu in gpus:
        if not meets(gpu.calibration_grade, min_confidence):
            reason = f"its calibration is graded {gpu.calibration_grade}, below the minimum confidence {min_confidence}"
            drops.extend(_drop(gpu, precision, None, "min_confidence", reason) for precision in precisions)
            continue
        for precision in precisions:
            refused = _precision_drop(gpu, precision)
            if refused is not None:
                drops.append(refused)
                continue
            found_in_node = (
                [_group_or_drop(gpu, model, precision, tp, slo, shape) for tp in tp_degrees] if 1 in pp_degrees else []
            )
            groups.extend(g for g in found_in_node if isinstance(g, Group))
            drops.extend(d for d in found_in_node if isinstance(d, Drop))
            constraints = {"group" if isinstance(f, Group) else f.constraint for f in found_in_node}
            needed = "memory" in constraints and constraints <= {"memory", "tensor_parallel"}
            if needed or 1 not in pp_degrees:
                # no in-node replica holds the model (or pp is pinned above 1): pipeline stages (planner/pipeline.py)
                for tp in tp_degrees:
                    for pp in (p for p in pp_degrees if p > 1):
                        staged = _group_or_drop(gpu, model, precision, tp, slo, shape, pp=pp)
                        if isinstance(staged, Group):
                            groups.append(staged)
                        elif staged.constraint != "memory" or 1 not in pp_degrees:
                            drops.append(staged)  # a stage layout the model refuses, an SLO floor, or a pinned pp's fit
                if needed:
                    # tensor parallelism across whole nodes, priced on the NIC (planner/parallel.py tp_link): as many
                    # GPUs as the pipelines of in-node tp stages, so each loses to them only where the physics says so
                    for tp in _cross_node_tp_degrees(gpu, tp_degrees, pp_degrees):
                        across = _group_or_drop(gpu, model, precision, tp, slo, shape, cross_node=True)
                        if isinstance(across, Group):
                            groups.append(across)
                        elif across.constraint != "memory":
                            drops.append(across)
            if expert_parallel and 1 in pp_degrees and gpu.efficiency.include_comm:
                for tp in tp_degrees:
                    if ep_degrees is not None and tp not in ep_degrees:
                        continue
                    if tp > 1 and tp <= gpu.gpus_per_node and tp in expert_parallel_degrees(model, tp):
                        found = _expert_parallel_group_or_drop(gpu, model, precision, tp, slo, shape)
                        if isinstance(found, Group):
                            groups.append(found)
                        else:
                            drops.append(found)
    if ep_degrees is not None:
        groups = [g for g in groups if g.ep in ep_degrees]
    return groups, drops


@dataclass(frozen=True, slots=True)
class _RequestShape:
    """What enumeration needs of the workload: the mean request's tokens (KV slots), the prompt and
    output lengths just below the SLO's percentile (the SLO floors), and the p99 request (memory fit)."""

    request_tokens: float
    prompt_q: float
    output_q: float
    largest_request: int

    @staticmethod
    def of(workload: Workload, slo: Slo) -> _RequestShape:
        prompt_q, output_q = _lengths_below(workload, slo.percentile)
        return _RequestShape(
            request_tokens=workload.prompt_tokens.mean + workload.output_tokens.mean,
            prompt_q=prompt_q,
            output_q=output_q,
            largest_request=math.ceil(workload.prompt_tokens.quantile(0.99) + workload.output_tokens.quantile(0.99)),
        )


def _drop(
    gpu: GpuSpec,
    precision: Precision,
    tp: int | None,
    constraint: str,
    reason: str,
    *,
    needed_bytes: float | None = None,
    available_bytes: float | None = None,
) -> Drop:
    """A Drop of (gpu, precision, tp) for `constraint`; a memory drop carries the bytes it compared."""
    return Drop(
        gpu=gpu.slug,
        weights_precision=precision.weights.slug,
        kv_precision=precision.kv_cache.slug,
        tp=tp,
        constraint=constraint,
        reason=reason,
        needed_bytes=needed_bytes,
        available_bytes=available_bytes,
    )


def _precision_drop(gpu: GpuSpec, precision: Precision) -> Drop | None:
    """A Drop when the GPU cannot run the precision, or has no price to plan with."""
    try:
        check_precision(gpu, precision)
    except UnsupportedConfigurationError as exc:
        return _drop(gpu, precision, None, "precision", exc.detail)
    if gpu.price_usd_per_hour_on_demand <= 0:
        return _drop(gpu, precision, None, "price", f"{gpu.slug} has no on-demand price in the catalog")
    return None


def _cross_node_tp_degrees(gpu: GpuSpec, tp_degrees: Sequence[int], pp_degrees: Sequence[int]) -> list[int]:
    """tp over whole nodes (2, 4, 8 nodes, up to the most GPUs a pipeline of the grid's in-node tp takes)."""
    most = max(t for t in tp_degrees if t <= gpu.gpus_per_node) * max(pp_degrees) if tp_degrees else 0
    return [n * gpu.gpus_per_node for n in (2, 4, 8) if n * gpu.gpus_per_node <= most]


def _group_or_drop(
    gpu: GpuSpec,
    model: ModelSpec,
    precision: Precision,
    tp: int,
    slo: Slo,
    shape: _RequestShape,
    *,
    pp: int = 1,
    cross_node: bool = False,
) -> Group | Drop:
    """The (gpu, precision, tp, pp) group, or why it cannot serve: tp, memory, KV cache, then the SLO floors.
    tp beyond a node only with `cross_node` (whole nodes, planner/parallel.py)."""
    if pp > model.layers:
        return _drop(gpu, precision, tp, "tensor_parallel", f"pp {pp} exceeds {model.slug}'s {model.layers} layers")
    if (tp > gpu.gpus_per_node and not cross_node) or not is_valid_tensor_parallel(gpu, model, tp):
        return _drop(
            gpu,
            precision,
            tp,
            "tensor_parallel",
            f"tp {tp} does not divide {model.slug}'s heads or exceeds the {gpu.gpus_per_node} GPUs of a {gpu.slug} node",
        )
    largest_request = shape.largest_request
    fit = memory_fit(gpu, model, precision, tp, gpu.efficiency, context_tokens=largest_request, pp=pp)
    if not fit.fits:
        return _drop(
            gpu,
            precision,
            tp,
            "memory",
            f"cannot hold the model: weights {fit.weights_bytes / GB:.1f} GB + one "
            f"{largest_request:,}-token request need {fit.required_bytes / GB:.1f} GB, "
            f"{tp * pp} × {gpu.slug}{'' if pp == 1 else f' (tp {tp} × pp {pp})'} offer {fit.available_bytes / GB:.1f} GB",
            needed_bytes=fit.required_bytes,
            available_bytes=fit.available_bytes,
        )
    group = _group(gpu, model, precision, tp, shape, pp=pp)
    if group.kv_slots < 1:
        return _drop(
            gpu,
            precision,
            tp,
            "kv_cache",
            f"the KV cache ({group.kv_capacity_tokens:,} tokens) cannot hold one average request "
            f"({shape.request_tokens:,.0f} tokens)",
        )
    floor = slo_floor_drop(group.key, group, slo, shape.output_q)
    return group if floor is None else floor


def _expert_parallel_group_or_drop(
    gpu: GpuSpec, model: ModelSpec, precision: Precision, ep: int, slo: Slo, shape: _RequestShape
) -> Group | Drop:
    """The ep-GPU expert-parallel group (planner/expert_parallel.py), or why it cannot serve: memory, KV, SLO floors."""
    if not is_valid_tensor_parallel(gpu, model, ep):
        return _drop(gpu, precision, ep, "tensor_parallel", f"ep {ep} does not divide {model.slug}'s heads")
    fit = expert_parallel_memory_fit(gpu, model, precision, ep, gpu.efficiency, context_tokens=shape.largest_request)
    if not fit.fits:
        return _drop(
            gpu,
            precision,
            ep,
            "memory",
            f"expert-parallel ep {ep}: every GPU holds the {model.slug} non-routed weights and 1/{ep} of its experts; "
            f"{fit.weights_bytes / GB:.1f} GB of weights + one {shape.largest_request:,}-token request on its GPU "
            f"need {fit.required_bytes / GB:.1f} GB of {fit.available_bytes / GB:.1f} GB",
            needed_bytes=fit.required_bytes,
            available_bytes=fit.available_bytes,
        )
    sm = expert_parallel_step_model(gpu, model, precision, ep, gpu.efficiency)
    capacity = expert_parallel_kv_capacity_tokens(gpu, model, precision, ep, gpu.efficiency)
    group = Group(
        gpu=gpu,
        precision=precision,
        tp=ep,
        ep=ep,
        step_model=sm,
        kv_capacity_tokens=capacity,
        kv_slots=int(capacity // shape.request_tokens),
        price_usd_per_hour=ep * gpu.price_usd_per_hour_on_demand,  # ep GPUs × on-demand $/GPU-h
        batch1_decode_s=sm.step_s(1, 1, 1),
        prefill_quantile_s=prefill(sm, max(1, math.floor(shape.prompt_q))).time_s,
    )
    if group.kv_slots < 1:
        return _drop(
            gpu,
            precision,
            ep,
            "kv_cache",
            f"the expert-parallel KV cache ({capacity:,} tokens) cannot hold one average request ({shape.request_tokens:,.0f} tokens)",
        )
    floor = slo_floor_drop(group.key, group, slo, shape.output_q)
    return group if floor is None else floor


def _group(gpu: GpuSpec, model: ModelSpec, precision: Precision, tp: int, shape: _RequestShape, *, pp: int = 1) -> Group:
    sm, capacity, batch1_decode_s = REPLICAS.value(
        (gpu, model, precision), (tp, pp), partial(replica_physics, gpu, model, precision, tp, pp)
    )
    prompt_q = max(1, math.floor(shape.prompt_q))
    return Group(
        gpu=gpu,
        precision=precision,
        tp=tp,
        pp=pp,
        step_model=sm,
        kv_capacity_tokens=capacity,
        kv_slots=int(capacity // shape.request_tokens),
        price_usd_per_hour=tp * pp * gpu.price_usd_per_hour_on_demand,  # tp·pp GPUs × on-demand $/GPU-h
        batch1_decode_s=batch1_decode_s,
        # the TTFT floor: a prompt alone goes through every stage in turn (planner/pipeline.py lone_prefill_s)
        prefill_quantile_s=prefill(sm, prompt_q).time_s if pp == 1 else lone_prefill_s(sm, pp, prompt_q),
    )


def speculative_groups(
    groups: Sequence[Group],
    model: ModelSpec,
    workload: Workload,
    *,
    draft_tokens: Sequence[int],
    published: frozenset[str] | None = None,
    acceptance_rate: float | None = None,
    draft_model: ModelSpec | None = None,
) -> list[Group]:
    """Each group verifying the model's search draft head (planner/speculative.py `search_method`)
    at each draft length (with the method's default α, or `acceptance_rate` where the request gives
    one): its step model verifies k + 1 tokens per decoder, its KV cache loses what
    the head holds, and its one-sequence TPOT floor is the verify step over E. A variant whose cache
    cannot hold one average request is left out. Empty when the model offers no head (or, with
    `published`, none with a published checkpoint). With `draft_model` (constraints.pin.draft_model)
    that catalog model drafts instead of a head, at the given `acceptance_rate`."""
    source: str | None = None
    if draft_model is not None:
        check_draft_model(model, draft_model)
        method: MethodName | None = "draft_model"
        if acceptance_rate is None:  # the published pair's (planner/speculative.py `draft_model_acceptance`)
            published_pair = draft_model_acceptance(model, draft_model, workload.task)
            acceptance_rate, source = published_pair.acceptance_rate, published_pair.source
    else:
        method = search_method(model, published)
    if method is None:
        return []
    alpha = (
        default_acceptance(method, workload.task).acceptance_rate if acceptance_rate is None else acceptance_rate
    )  # given: measured
    request_tokens = workload.prompt_tokens.mean + workload.output_tokens.mean
    variants: list[Group] = []
    for group in groups:
        if group.pp > 1 or group.ep > 1:
            continue  # a draft over pipeline stages or expert-parallel ranks is not modelled: the group plans without one
        for k in draft_tokens:
            sm, capacity, batch1_decode_s = VARIANTS.value(
                (group.gpu, model, group.precision, group.step_model, draft_model),
                (group.tp, method, k, alpha, source),
                partial(
                    variant_physics,
                    group.gpu,
                    model,
                    group.precision,
                    group.tp,
                    group.step_model,
                    k,
                    method,
                    alpha,
                    source,
                    draft_model,
                ),
            )
            if capacity // request_tokens < 1:
                continue
            variants.append(
                replace(
                    group,
                    step_model=sm,
                    kv_capacity_tokens=capacity,
                    kv_slots=int(capacity // request_tokens),
                    batch1_decode_s=batch1_decode_s,
                )
            )
    return variants


def packed_groups(groups: Sequence[Group], instance_types: Sequence[InstanceTypeSpec]) -> tuple[list[Group], list[Drop]]:
    """Instance mode: each group with the instance types a replica of it fits in (planner/packing.py),
    priced at its per-replica floor; a group no instance type holds is dropped, saying why (no
    instance type carries the GPU, or none has an NVLink domain of tp GPUs)."""
    kept: list[Group] = []
    drops: list[Drop] = []
    for group in groups:
        offers = offers_for(group.gpu.slug, group.tp, instance_types) if group.pp == 1 else ()
        if offers:
            kept.append(replace(group, offers=offers, price_usd_per_hour=per_replica_floor(offers)))
            continue
        carrying = [t for t in instance_types if t.gpu == group.gpu.slug]
        reason = (
            f"no instance type of the provider carries {group.gpu.slug}"
            if not carrying
            else f"a tp {group.tp} × pp {group.pp} replica spans instances, which instance packing does not price"
            if group.pp > 1
            else f"no {group.gpu.slug} instance type holds a tp {group.tp} replica in one NVLink domain "
            f"(largest domain {max(t.nvlink_domain for t in carrying)} GPUs)"
        )
        drops.append(
            Drop(
                gpu=group.gpu.slug,
                weights_precision=group.precision.weights.slug,
                kv_precision=group.precision.kv_cache.slug,
                tp=group.tp,
                constraint="instance_type",
                reason=reason,
            )
        )
    return kept, drops


def _settings(
    group: Group, batch_limits: Sequence[int], chunk_budgets: Sequence[int | None]
) -> list[tuple[int, int | None, int]]:
    """(batch limit, chunk budget, slots) of a group; batch limits above the KV slot count collapse
    onto the first one (the KV cache, not the limit, sets their concurrency, so they serve identically)."""
    settings: list[tuple[int, int | None, int]] = []
    seen_kv_limited = False
    for batch in sorted(batch_limits):
        slots = min(batch, group.kv_slots)
        if batch > group.kv_slots:
            if seen_kv_limited:
                continue
            seen_kv_limited = True
        settings.extend((batch, chunk, slots) for chunk in chunk_budgets if chunk is None or chunk > batch)
    return settings


def _beaten_by_twin(group: Group, setting: tuple[int, int | None, int], twin: Group | None) -> bool:
    """Whether the ep group's (batch, chunk, slots) setting cannot beat the same setting of its ep = 1 twin (same
    GPUs, precision and tp, so the same price): a chunked setting (every step carries at most the chunk's tokens:
    C − n prefill tokens beside n decodes, C > batch) with the twin's slots the same and its KV capacity no smaller,
    whose steps planner/expert_parallel.py `never_faster` proves slower at every token count up to C and every KV read
    up to the ep group's capacity. Without chunking a step carries as many prompts as arrive, no bound holds, and
    the setting stays, as it does wherever ep may win (its all-to-all is cheaper per token than the all-reduces)."""
    batch, chunk, slots = setting
    if twin is None or chunk is None or twin.kv_capacity_tokens < group.kv_capacity_tokens:
        return False
    if min(batch, twin.kv_slots) != slots:
        return False
    return never_faster(group.step_model, twin.step_model, max_tokens=chunk, max_kv_tokens=group.kv_capacity_tokens)


def enumerate_all_options(
    groups: Sequence[Group],
    workload: Workload,
    *,
    batch_limits: Sequence[int] = BATCH_LIMITS,
    chunk_budgets: Sequence[int | None] = CHUNK_BUDGETS,
) -> list[Option]:
    """Batch × chunk settings of every group, in group order, each with its saturation bound; an expert-parallel
    setting its ep = 1 twin is sure to beat is left out (`_beaten_by_twin`)."""
    twins = {g.layout_key: g for g in groups if g.ep == 1 and g.pp == 1}
    settings = [
        (index, setting)
        for index, group in enumerate(groups)
        for setting in _settings(group, batch_limits, chunk_budgets)
        if group.ep == 1 or not _beaten_by_twin(group, setting, twins.get((*group.key, 1, 1)))
    ]
    if not settings:
        return []
    which = np.array([index for index, _ in settings], dtype=np.intp)
    coefficients = StepCoefficients.of([g.step_model for g in groups], which)
    bounds = (
        saturation_bounds(
            coefficients,
            np.array([s[2] for _, s in settings]),
            np.array([s[1] or 0 for _, s in settings]),
            bound_moments(workload),
            workload.prompt_tokens,
            DraftCoefficients.of([g.step_model for g in groups], which),
        )
        * ROUNDING
    )
    # candidate_id's format, its group part written once per group
    prefixes = [
        candidate_id(
            gpu=g.key[0], weights_precision=g.key[1], kv_precision=g.key[2], tp=g.key[3], batch_limit=0, chunk_tokens=None
        ).removesuffix("b0/nochunk")
        + g.layout  # "pp2/" for a pipeline group
        for g in groups
    ]
    drafts = [g.draft for g in groups]  # the speculating variants' id suffix, once per group
    return [
        Option(
            f"{prefixes[index]}b{batch}/{'nochunk' if chunk is None else f'c{chunk}'}{drafts[index]}",
            groups[index],
            batch,
            chunk,
            slots,
            bound,
        )
        for (index, (batch, chunk, slots)), bound in zip(settings, bounds.tolist(), strict=True)
    ]


def enumerate_options(
    group: Group,
    workload: Workload,
    *,
    batch_limits: Sequence[int] = BATCH_LIMITS,
    chunk_budgets: Sequence[int | None] = CHUNK_BUDGETS,
) -> list[Option]:
    """Batch × chunk settings of one group (`enumerate_all_options` for one)."""
    return enumerate_all_options([group], workload, batch_limits=batch_limits, chunk_budgets=chunk_budgets)
