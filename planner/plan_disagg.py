"""The cheapest disaggregated deployment: a prefill pool and a decode pool, each sized at the SLO budget it is given.

Each pool has its own candidates (GPU, precision, tp; the decode pool also its batch limit, the
prefill pool its token budget), so the pools may run on different GPUs. The TTFT target is split:
a fraction f goes to the prefill pool (its queue wait and the prefill of a p99 prompt), the rest to
the decode side (admission wait and the KV transfer); f is searched over `TTFT_SPLITS`. For each f,
each candidate's replica count is the fewest that meets its budget (and TPOT, for decode), and a
MILP over every split's candidates picks one candidate per pool, both of one split:

    minimise   Σ_(f,p) cost_fp · prefill[f,p] + Σ_(f,d,g) cost_fdg · decode[f,d,g]
    subject to Σ prefill = 1,  Σ decode = 1
               decode[f,d,g] ≤ Σ_{p: tp_p = g, same KV format} prefill[f,p]   (same split; the transfer runs over min(tp_p, tp_d) links)
               Σ gpus · prefill + Σ gpus · decode ≤ max_gpus                                   (constraints.max_gpus)
               Σ cost · prefill + Σ cost · decode ≤ budget_usd_per_hour                        (constraints.budget_usd_per_hour)
               Σ_{on k} gpus · prefill + Σ_{on k} gpus · decode ≤ inventory_k, each k listed  (constraints.inventory)

The request's other constraints act on the candidates before the MILP: each pool's replicas are
max(min_replicas, needed + [N+1], 1), as the aggregated plan counts them (planner/plan_search.py), the
N+1 spare priced; a pinned gpu, precision or tp narrows both pools' candidates, a pinned batch limit
the decode pool's. `pool_refusals` names what the pools cannot honour (instances, speculation, a
pinned replica count or chunk budget), refused rather than ignored.

An E2E target bounds the decode pool: E2E_q ≈ TTFT_q + (o_q − 1) · t_step(n̄) (planner/disagg.py's
prediction), and the pools' TTFT is at most the target they split, so a decode candidate must have
(o_q − 1) · t_step(n̄) ≤ e2e − ttft.

The chosen plan is then simulated (planner/simulator_disagg.py); a pool whose simulated p99 misses
gains a replica, up to `MAX_VERIFY_ROUNDS` times.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import pulp

from planner.confidence import meets
from planner.disagg import (
    DecodeOccupancy,
    DecodePool,
    DisaggPrediction,
    KvLink,
    PrefillPool,
    decode_occupancy,
    decode_saturated,
    decode_slots,
    decode_step_s,
    decode_tpot_lower_bound_s,
    gpu_scale_out_link,
    intra_node_link,
    kv_transfer_s,
    predict_disagg,
    prefill_queue,
    prefill_s,
    prefill_service_moments,
    scale_out_link,
)
from planner.errors import (
    InfeasiblePlanError,
    ModelDoesNotFitError,
    PlannerInputError,
    SolverError,
    UnstableLoadError,
    UnsupportedConfigurationError,
)
from planner.memory import kv_bytes_per_token, kv_capacity_tokens
from planner.milp import constraint_name, solve
from planner.performance import build_step_model
from planner.plan_records import PlanConstraints
from planner.plan_result import Relaxation, as_dict
from planner.simulator_disagg import simulate_disagg
from planner.specs import GpuSpec, ModelSpec, Precision
from planner.step_model import StepModel
from planner.workload import Slo, Workload

#: Fractions of the TTFT target given to the prefill pool (the rest to admission and transfer).
TTFT_SPLITS: tuple[float, ...] = (0.5, 0.6, 0.7, 0.8, 0.9, 0.95)
#: Decode batch limits tried (powers of two, vLLM's default max_num_seqs is 256).
DECODE_BATCH_LIMITS: tuple[int, ...] = (8, 16, 32, 64, 128, 256)
#: Prefill token budget per step (vLLM's max_num_batched_tokens for chunked prefill defaults to 8,192 on large GPUs).
PREFILL_TOKEN_BUDGET = 8192
MAX_POOL_REPLICAS = 64
MAX_VERIFY_ROUNDS = 3
VERIFY_REQUESTS = 4000
SOLVER_TIME_LIMIT_S = 10.0
#: Skip, by closed-form bounds, the replica counts and candidates that cannot be chosen (the answers are the
#: same either way; tests/planner/test_plan_disagg_bounds.py turns it off to show that).
PRUNE = True


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolCandidate:
    """One pool configuration with the replicas it needs at its budget and what binds it."""

    role: str
    gpu: str
    weights: str
    kv_cache: str
    tp: int
    replicas: int
    batch_limit: int | None
    chunk_tokens: int | None
    cost_usd_per_hour: float
    rho: float
    binding: str
    step_model: StepModel
    kv_capacity_tokens: float
    kv_bytes_per_token: float
    price_usd_per_gpu_hour: float
    #: The GPU's gpus_per_node: how many share its scale-up link (one node).
    gpus_per_node: int
    #: Replicas beyond what the SLOs need, kept for constraints.n_plus_one (priced, in `replicas`).
    spare_replicas: int = 0

    @property
    def gpus(self) -> int:
        return self.tp * self.replicas

    @property
    def serving_replicas(self) -> int:
        """The replicas left with the N+1 spare lost: what the prediction and the simulation size."""
        return self.replicas - self.spare_replicas

    def with_replicas(self, replicas: int) -> PoolCandidate:
        return replace(
            self,
            replicas=replicas,
            cost_usd_per_hour=self.price_usd_per_gpu_hour * self.tp * replicas,  # price × tp × replicas
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class DisaggPlan:
    prefill: PoolCandidate
    decode: PoolCandidate
    ttft_prefill_fraction: float
    prediction: DisaggPrediction
    #: Simulated p99 (TTFT, TPOT, E2E) of the final plan, and the replicas the verification added.
    simulated_s: tuple[float, float, float] | None
    verify_added_replicas: int
    link: KvLink
    kv_bytes_per_token: float
    #: Why the KV crosses `link`: one node's scale-up link or the scale-out network (`_link_why`).
    link_why: str
    #: The node's GPU count when both pools sit in one node (`link` is then its scale-up link).
    node_gpus: int | None
    #: The scale-out network between the two pools' GPUs (planner/disagg.py scale_out_link: the slower NIC of the
    #: pair, from the catalog; its link when the pools outgrow one node) and whether one node was offered, so a later
    #: verification (verify_disaggregated) decides the link the same way.
    scale_out_link: KvLink
    same_node: bool
    #: The limits the pools were planned within (verify_disaggregated checks the replicas it adds against them).
    constraints: PlanConstraints = field(default_factory=PlanConstraints)

    @property
    def cost_usd_per_hour(self) -> float:
        return self.prefill.cost_usd_per_hour + self.decode.cost_usd_per_hour

    @property
    def gpus(self) -> int:
        return self.prefill.gpus + self.decode.gpus


@dataclass(frozen=True, slots=True, kw_only=True)
class _Setting:
    gpu: GpuSpec
    precision: Precision
    tp: int
    step_model: StepModel
    kv_capacity_tokens: float
    kv_bytes_per_token: float


def _settings(gpus: Sequence[GpuSpec], model: ModelSpec, precisions: Sequence[Precision], tps: Sequence[int]) -> list[_Setting]:
    out = []
    for gpu in gpus:
        for precision in precisions:
            for tp in tps:
                try:
                    sm = build_step_model(gpu, model, precision, tp, gpu.efficiency)
                except (UnsupportedConfigurationError, ModelDoesNotFitError, PlannerInputError):
                    continue
                capacity = kv_capacity_tokens(gpu, model, precision, tp, gpu.efficiency)
                if capacity > 0:
                    out.append(
                        _Setting(
                            gpu=gpu,
                            precision=precision,
                            tp=tp,
                            step_model=sm,
                            kv_capacity_tokens=float(capacity),
                            kv_bytes_per_token=kv_bytes_per_token(model, precision.kv_cache),
                        )
                    )
    return out


def _candidate(setting: _Setting, role: str, replicas: int, rho: float, binding: str, batch_limit: int | None) -> PoolCandidate:
    price = setting.gpu.price_usd_per_hour_on_demand
    return PoolCandidate(
        role=role,
        gpu=setting.gpu.slug,
        weights=setting.precision.weights.slug,
        kv_cache=setting.precision.kv_cache.slug,
        tp=setting.tp,
        replicas=replicas,
        batch_limit=batch_limit,
        chunk_tokens=PREFILL_TOKEN_BUDGET if role == "prefill" else None,
        cost_usd_per_hour=price * setting.tp * replicas,  # price × tp × replicas
        rho=rho,
        binding=binding,
        step_model=setting.step_model,
        kv_capacity_tokens=setting.kv_capacity_tokens,
        kv_bytes_per_token=setting.kv_bytes_per_token,
        price_usd_per_gpu_hour=price,
        gpus_per_node=setting.gpu.gpus_per_node,
    )


def prefill_candidate(
    setting: _Setting,
    workload: Workload,
    budget_s: float,
    q: float,
    moments: tuple[float, float] | None = None,
    *,
    max_replicas: int = MAX_POOL_REPLICAS,
) -> PoolCandidate | None:
    """The fewest replicas c with W_q(c) + S(p_q) ≤ budget; None when no c ≤ max_replicas does.
    `moments`: the setting's prefill (E[S], c_s²), when the caller keeps them across budgets."""
    prompt_q = workload.prompt_tokens.quantile(q)
    if setting.kv_capacity_tokens < prompt_q:
        return None  # the replica's memory after its weights cannot hold a p99 prompt's KV while prefilling it
    service_q = prefill_s(setting.step_model, prompt_q)
    if service_q > budget_s:
        return None
    if moments is None:
        moments = prefill_service_moments(setting.step_model, workload.prompt_tokens)
    first = max(1, math.floor(workload.arrival_rate_rps * moments[0]) + 1)  # ρ < 1 needs c > λ·E[S]
    binding = "utilisation" if first > 1 else "ttft"
    for c in range(first, max_replicas + 1):
        pool = PrefillPool(step_model=setting.step_model, replicas=c, tp=setting.tp)
        try:
            pq = prefill_queue(pool, workload, q, moments=moments)
        except UnstableLoadError:
            binding = "utilisation"
            continue
        if pq.wait_q_s + service_q <= budget_s:
            return _candidate(setting, "prefill", c, pq.rho, binding, None)
        binding = "ttft"
    return None


def decode_candidate(
    setting: _Setting,
    batch_limit: int,
    workload: Workload,
    slo: Slo,
    budget_s: float,
    transfer: tuple[float, float],
    q: float,
    known: dict[int, DecodeOccupancy | None] | None = None,
    *,
    max_replicas: int = MAX_POOL_REPLICAS,
) -> PoolCandidate | None:
    """The fewest replicas r meeting TPOT, admission wait + transfer ≤ budget and, with an E2E target,
    (o_q − 1)·t_step(n̄) ≤ e2e − ttft (the module docstring's E2E bound); `transfer` = (mean, q-quantile) s.
    `known` keeps each r's occupancy (None: unstable) across calls that differ only in the budget."""
    transfer_mean, transfer_q = transfer
    if transfer_q > budget_s:
        return None
    known = {} if known is None else known
    pool_of = DecodePool(
        step_model=setting.step_model,
        replicas=1,
        batch_limit=batch_limit,
        kv_capacity_tokens=setting.kv_capacity_tokens,
        tp=setting.tp,
    )
    try:
        slots, _ = decode_slots(pool_of, workload)
    except PlannerInputError:
        return None  # one mean context does not fit the replica's KV memory
    context = workload.prompt_tokens.mean + workload.output_tokens.mean / 2.0
    if slo.tpot_s is not None and decode_step_s(setting.step_model, 1.0, context) > slo.tpot_s:
        return None  # even a batch of one misses TPOT
    steps_q = max(workload.output_tokens.quantile(q) - 1.0, 0.0)  # decode steps after the first token of a q-quantile output
    decode_cap_s = None if slo.e2e_s is None else slo.e2e_s - (slo.ttft_s or 0.0)  # E2E left after the TTFT target
    if decode_cap_s is not None and steps_q * decode_step_s(setting.step_model, 1.0, context) > decode_cap_s:
        return None  # even a batch of one decodes a q-quantile output past the E2E target
    hold_min = transfer_mean + max(workload.output_tokens.mean - 1.0, 0.0) * decode_step_s(setting.step_model, 1.0, context)
    first = max(1, math.ceil(workload.arrival_rate_rps * hold_min / slots))  # a replica holds at most s / H_min req/s
    binding = "utilisation" if first > 1 else "tpot"
    for r in range(first, max_replicas + 1):
        if PRUNE and r not in known:
            # closed forms before the root-find: a saturated pool is unstable (decode_occupancy's own test), and
            # the mean batch is at least λ·H_min/r, so TPOT_q is at least the step at that batch's quantile
            if decode_saturated(pool_of, workload, transfer_mean, replicas=r):
                known[r] = None
            elif slo.tpot_s is not None and decode_tpot_lower_bound_s(pool_of, workload, hold_min, q, replicas=r) > slo.tpot_s:
                binding = "tpot"
                continue
        if r not in known:
            pool = DecodePool(
                step_model=setting.step_model,
                replicas=r,
                batch_limit=batch_limit,
                kv_capacity_tokens=setting.kv_capacity_tokens,
                tp=setting.tp,
            )
            try:
                known[r] = decode_occupancy(pool, workload, transfer_mean, q)
            except UnstableLoadError:
                known[r] = None
        occ = known[r]
        if occ is None:
            binding = "utilisation"
            continue
        if slo.tpot_s is not None and occ.step_q_s > slo.tpot_s:
            binding = "tpot"
            continue
        if decode_cap_s is not None and steps_q * occ.step_s > decode_cap_s:
            binding = "e2e"
            continue
        if occ.admission_wait_q_s + transfer_q > budget_s:
            binding = "ttft"
            continue
        return _candidate(setting, "decode", r, occ.rho, binding if r > 1 else occ.binding, batch_limit)
    return None


def prefill_replicas_lower_bound(
    setting: _Setting, workload: Workload, slo: Slo, q: float, moments: tuple[float, float] | None = None
) -> int | None:
    """The fewest prefill replicas `prefill_candidate` could answer at any TTFT split: c > λ·E[S] (the pool at ρ = 1,
    no queueing); None when no split's budget admits the setting (the p99 prompt's KV or prefill does not fit)."""
    if slo.ttft_s is None or setting.kv_capacity_tokens < workload.prompt_tokens.quantile(q):
        return None
    if prefill_s(setting.step_model, workload.prompt_tokens.quantile(q)) > max(TTFT_SPLITS) * slo.ttft_s:
        return None  # the largest prefill budget is shorter than one p99 prefill
    mean_s, _ = moments if moments is not None else prefill_service_moments(setting.step_model, workload.prompt_tokens)
    first = max(1, math.floor(workload.arrival_rate_rps * mean_s) + 1)  # prefill_candidate's first count
    return first if first <= MAX_POOL_REPLICAS else None


def decode_replicas_lower_bound(
    setting: _Setting, workload: Workload, slo: Slo, link: KvLink, q: float, *, node_link: KvLink | None = None
) -> int | None:
    """The fewest decode replicas `decode_candidate` could answer at any split and prefill tp, over the batch limits
    `_best_decode` tries: per limit, the fewest r with the pool at ρ < 1 and no queueing (r ≥ λ·H_min/s,
    H_min = t_x + (ō − 1)·t_step(1), the transfer over the most links, tp), not saturated and whose TPOT lower
    bound (planner/disagg.py) meets TPOT. None when no split admits the setting (one mean context does not fit,
    TPOT at a batch of one, the p99 transfer over the largest decode budget) or every limit needs more than 64."""
    by_memory = math.floor(setting.kv_capacity_tokens / (workload.prompt_tokens.mean + workload.output_tokens.mean))
    if by_memory < 1 or slo.ttft_s is None:
        return None
    context = workload.prompt_tokens.mean + workload.output_tokens.mean / 2.0
    step_one = decode_step_s(setting.step_model, 1.0, context)
    if slo.tpot_s is not None and step_one > slo.tpot_s:
        return None
    kv = setting.kv_bytes_per_token
    links = [link] if node_link is None else [link, node_link]  # the faster of the two bounds either
    p_q, p_mean = workload.prompt_tokens.quantile(q), workload.prompt_tokens.mean
    transfer_q = min(kv_transfer_s(prompt_tokens=p_q, kv_bytes_per_token=kv, link=x, gpus=setting.tp) for x in links)
    if transfer_q > (1.0 - min(TTFT_SPLITS)) * slo.ttft_s:
        return None
    transfer_mean = min(kv_transfer_s(prompt_tokens=p_mean, kv_bytes_per_token=kv, link=x, gpus=setting.tp) for x in links)
    hold_min = transfer_mean + max(workload.output_tokens.mean - 1.0, 0.0) * step_one  # t_x + (ō − 1)·t_step(1)
    best: int | None = None
    for limit in _decode_limits(by_memory):
        pool = DecodePool(
            step_model=setting.step_model,
            replicas=1,
            batch_limit=limit,
            kv_capacity_tokens=setting.kv_capacity_tokens,
            tp=setting.tp,
        )
        slots = min(limit, by_memory)
        r = max(1, math.ceil(workload.arrival_rate_rps * hold_min / slots))  # λ·H_min / s
        while r <= min(MAX_POOL_REPLICAS, best or MAX_POOL_REPLICAS) and (
            decode_saturated(pool, workload, transfer_mean, replicas=r)
            or (slo.tpot_s is not None and decode_tpot_lower_bound_s(pool, workload, hold_min, q, replicas=r) > slo.tpot_s)
        ):
            r += 1
        if r <= MAX_POOL_REPLICAS and (best is None or r < best):
            best = r
    return best


def _decode_cost_floor(setting: _Setting, workload: Workload, slo: Slo, link: KvLink, q: float) -> float:
    """The least a decode candidate of this setting can cost over `link` (inf: it has none): price × tp × its
    replica lower bound."""
    replicas = decode_replicas_lower_bound(setting, workload, slo, link, q)
    return math.inf if replicas is None else setting.gpu.price_usd_per_hour_on_demand * setting.tp * replicas  # $/GPU-h × tp × r


def _decode_limits(by_memory: int) -> list[int]:
    """The batch limits worth trying: those the KV memory holds, and the first past it (all larger give the same slots)."""
    return [b for b in DECODE_BATCH_LIMITS if b <= by_memory] + [b for b in DECODE_BATCH_LIMITS if b > by_memory][:1]


@dataclass(frozen=True, slots=True, kw_only=True)
class CostLowerBound:
    """A lower bound on the cheapest disaggregated plan's cost: the prefill and the decode pool of one KV format,
    each the cheapest at its replica lower bound, chosen alone (inf when no setting can be that pool)."""

    prefill_usd_per_hour: float
    decode_usd_per_hour: float

    @property
    def usd_per_hour(self) -> float:
        return self.prefill_usd_per_hour + self.decode_usd_per_hour


def disaggregated_cost_lower_bound(
    *,
    gpus: Sequence[GpuSpec],
    model: ModelSpec,
    precisions: Sequence[Precision],
    tps: Sequence[int],
    workload: Workload,
    slo: Slo,
    link: KvLink,
    same_node: bool = True,
) -> CostLowerBound:
    """`plan_disaggregated`'s cost is at least this (before verification, which only adds replicas): every pool it
    can answer has at least its setting's replica lower bound. Settings are taken cheapest GPU-hour first, so the
    prefill moments are computed only for settings that could still lower the bound."""
    q = slo.percentile / 100.0
    settings = sorted(_settings(gpus, model, precisions, tps), key=lambda s: s.gpu.price_usd_per_hour_on_demand * s.tp)
    # per KV format: both pools must hold the cache in one format (the MILP's transfer constraint)
    bounds: dict[str, tuple[float, float]] = {}
    for kv_format in dict.fromkeys(s.precision.kv_cache.slug for s in settings):
        prefill = decode = math.inf
        for s in (s for s in settings if s.precision.kv_cache.slug == kv_format):
            per_replica = s.gpu.price_usd_per_hour_on_demand * s.tp  # price × tp
            if per_replica >= prefill and per_replica >= decode:
                break  # a replica of this or any later setting costs at least both bounds so far
            if per_replica < prefill and (c := prefill_replicas_lower_bound(s, workload, slo, q)) is not None:
                prefill = min(prefill, per_replica * c)
            # pools in one node may move the KV over its scale-up link (plan_disaggregated's `same_node`)
            node_link = intra_node_link(s.gpu) if same_node and s.tp < s.gpu.gpus_per_node else None
            if (
                per_replica < decode
                and (r := decode_replicas_lower_bound(s, workload, slo, link, q, node_link=node_link)) is not None
            ):
                decode = min(decode, per_replica * r)
        bounds[kv_format] = (prefill, decode)
    prefill, decode = min(bounds.values(), key=sum, default=(math.inf, math.inf))
    return CostLowerBound(prefill_usd_per_hour=prefill, decode_usd_per_hour=decode)


@dataclass(frozen=True, slots=True, kw_only=True)
class _Choice:
    prefill: PoolCandidate
    decode: PoolCandidate
    fraction: float
    #: Set when both pools sit in one node of `node_gpus` GPUs and the KV moves over its scale-up link.
    node_link: KvLink | None = None
    node_gpus: int | None = None

    @property
    def cost_usd_per_hour(self) -> float:
        return self.prefill.cost_usd_per_hour + self.decode.cost_usd_per_hour


def pool_refusals(constraints: PlanConstraints) -> list[str]:
    """What separate pools cannot honour in `constraints`, one `constraints.<field>: why` each (empty: all honoured).
    gpus, precisions, min_confidence, max_gpus, budget, min_replicas, N+1, inventory and the gpu, tp, precision,
    batch_limit, pp 1 and engine pins are honoured; mixed_fleet allows what the pools already are (a pool per role,
    each of its own GPU), so it takes nothing away from them."""
    out = []
    if constraints.unit != "gpu":
        out.append(
            "constraints.unit instance: the pools are bought by the GPU; packing two pools into whole instances is not modelled"
        )
    if constraints.speculative == "on":
        out.append("constraints.speculative on: the decode pool's step model has no draft head")
    pin = constraints.pin
    if pin is not None:
        if pin.replicas is not None:
            out.append(
                "constraints.pin.replicas: the prefill and decode pools have a replica count each, and one pinned count "
                "names neither"
            )
        if pin.chunk_pinned:
            out.append(
                f"constraints.pin.chunk_tokens: the prefill pool's token budget is {PREFILL_TOKEN_BUDGET} (vLLM's default) "
                "and decode steps carry no prefill chunk"
            )
        if pin.draft_tokens is not None or pin.acceptance_rate is not None or pin.draft_model is not None:
            out.append("constraints.pin.draft_tokens and acceptance_rate: the pools do not speculate")
        if pin.pp is not None and pin.pp > 1:
            out.append("constraints.pin.pp: the prefill and decode pools are not searched in pipeline stages")
        if pin.ep is not None and pin.ep > 1:
            out.append("constraints.pin.ep: the prefill and decode pools are not searched expert-parallel")
    return out


def add_replica_floors(candidate: PoolCandidate, constraints: PlanConstraints) -> PoolCandidate:
    """replicas = max(min_replicas, needed + [N+1], 1) for one pool, as planner/plan_search.py counts an aggregated
    plan's; the N+1 spare is priced and kept as `spare_replicas`, so the pool still meets its budget with one lost."""
    spare = 1 if constraints.n_plus_one else 0
    replicas = max(constraints.min_replicas, candidate.replicas + spare, 1)  # max(min_replicas, needed + [N+1], 1)
    if replicas == candidate.replicas:
        return candidate
    binding = "min_replicas" if replicas > candidate.replicas + spare else candidate.binding
    return replace(candidate.with_replicas(replicas), spare_replicas=spare, binding=binding)


#: One binary decision per candidate: the variable and the candidate it chooses.
_Decisions = list[tuple[pulp.LpVariable, PoolCandidate]]


def add_max_gpus_constraints(problem: pulp.LpProblem, decisions: _Decisions, max_gpus: int) -> None:
    """Σ_p g_p·prefill_p + Σ_d g_d·decode_d ≤ max_gpus: both pools' GPUs, N+1 spares included."""
    problem += pulp.lpSum(c.gpus * v for v, c in decisions) <= max_gpus, "max_gpus"


def add_budget_constraints(problem: pulp.LpProblem, decisions: _Decisions, budget_usd_per_hour: float) -> None:
    """Σ_p cost_p·prefill_p + Σ_d cost_d·decode_d ≤ budget_usd_per_hour"""
    problem += pulp.lpSum(c.cost_usd_per_hour * v for v, c in decisions) <= budget_usd_per_hour, "budget"


def add_gpu_inventory_constraints(problem: pulp.LpProblem, decisions: _Decisions, inventory: Mapping[str, int]) -> None:
    """Σ_{p on k} g_p·prefill_p + Σ_{d on k} g_d·decode_d ≤ inventory_k for each GPU type k listed (both pools draw on it)."""
    for gpu, limit in sorted(inventory.items()):
        on_gpu = [(v, c) for v, c in decisions if c.gpu == gpu]
        if on_gpu:
            problem += pulp.lpSum(c.gpus * v for v, c in on_gpu) <= limit, constraint_name("gpu_inventory", gpu)


def _limited(constraints: PlanConstraints) -> bool:
    return constraints.max_gpus is not None or constraints.budget_usd_per_hour is not None or bool(constraints.inventory)


_Splits = dict[float, tuple[list[PoolCandidate], dict[tuple[int, int], PoolCandidate]]]


def _solve_pools(
    splits: _Splits, constraints: PlanConstraints, weight: Callable[[PoolCandidate], float] | None = None
) -> _Choice | None:
    """The MILP of the module docstring over every split's candidates at once: the prefill and the decode candidate
    must come from the same split, so the split is one more decision. `weight`: the objective's coefficient of a
    candidate (default its cost; the diagnosis of an infeasible limit minimises GPUs instead)."""
    problem = pulp.LpProblem("disaggregated_pools", pulp.LpMinimize)
    x = {
        (f, i): problem.add_variable(constraint_name("prefill", round(f * 100), i), cat=pulp.LpBinary)
        for f, (prefill, _) in splits.items()
        for i in range(len(prefill))
    }
    y = {
        (f, key): problem.add_variable(constraint_name("decode", round(f * 100), key[0], key[1]), cat=pulp.LpBinary)
        for f, (_, decode) in splits.items()
        for key in decode
    }
    decisions: _Decisions = [(v, splits[f][0][i]) for (f, i), v in x.items()]
    decisions += [(v, splits[f][1][key]) for (f, key), v in y.items()]
    coefficient = weight or (lambda c: c.cost_usd_per_hour)
    problem += pulp.lpSum(coefficient(c) * v for v, c in decisions)
    problem += pulp.lpSum(x.values()) == 1, "one_prefill_candidate"
    problem += pulp.lpSum(y.values()) == 1, "one_decode_candidate"
    for f, (prefill, decode) in splits.items():
        for key, option in decode.items():
            # same split; the KV crosses over min(tp_p, tp_d) links and both pools must hold it in the same format
            same = [x[(f, i)] for i, c in enumerate(prefill) if c.tp == key[1] and c.kv_cache == option.kv_cache]
            problem += y[(f, key)] <= pulp.lpSum(same), constraint_name("transfer_links", round(f * 100), key[0], key[1])
    if constraints.max_gpus is not None:
        add_max_gpus_constraints(problem, decisions, constraints.max_gpus)
    if constraints.budget_usd_per_hour is not None:
        add_budget_constraints(problem, decisions, constraints.budget_usd_per_hour)
    if constraints.inventory:
        add_gpu_inventory_constraints(problem, decisions, constraints.inventory)
    outcome = solve(problem, time_limit_s=SOLVER_TIME_LIMIT_S)
    if outcome.status not in ("optimal", "feasible"):
        return None
    (f_p, i_p) = next(k for k, v in x.items() if (v.value() or 0.0) > 0.5)
    (f_d, key_d) = next(k for k, v in y.items() if (v.value() or 0.0) > 0.5)
    if f_p != f_d:
        raise SolverError("the pools' MILP chose candidates of two TTFT splits (planner bug)")
    return _Choice(prefill=splits[f_p][0][i_p], decode=splits[f_d][1][key_d], fraction=f_p)


def _choose(splits: _Splits, constraints: PlanConstraints) -> _Choice | None:
    """The cheapest pair of pools within the limits; None when no pair meets the SLOs at all, InfeasiblePlanError
    naming the limits (with the relaxations that plan) when pairs exist but the limits rule every one out."""
    by_gpu = constraints.max_gpus is not None or bool(constraints.inventory)
    splits = {f: _undominated(p, d, by_gpu=by_gpu) for f, (p, d) in splits.items() if p and d}
    if not splits:
        return None
    chosen = _solve_pools(splits, constraints)
    if chosen is not None or not _limited(constraints):
        return chosen
    unlimited = replace(constraints, max_gpus=None, budget_usd_per_hour=None, inventory={})
    if _solve_pools(splits, unlimited) is None:
        return None
    raise _limits_error(splits, constraints)


def _whole_cents_up(cost_usd_per_hour: float) -> float:
    """A budget covering `cost_usd_per_hour`: whole cents rounded up, as planner/advice.py's budget relaxation."""
    return math.ceil(cost_usd_per_hour * 100 - 1e-6) / 100  # 1e-6 absorbs float noise in a whole number of cents


def _cost(choice: _Choice) -> float:
    return choice.prefill.cost_usd_per_hour + choice.decode.cost_usd_per_hour  # both pools


def _gpus_of(gpu: str) -> Callable[[PoolCandidate], float]:
    """The objective coefficient counting one GPU type's GPUs (the inventory relaxation minimises them)."""

    def weight(c: PoolCandidate) -> float:
        return float(c.gpus) if c.gpu == gpu else 0.0

    return weight


def _limits_error(splits: _Splits, constraints: PlanConstraints) -> InfeasiblePlanError:
    """Pairs of pools meet the SLOs but none within the limits: each limit relaxed alone to the smallest value that
    plans (exact: a MILP minimising what the limit counts without it), as the aggregated plan's advice reports them."""
    relaxations: list[Relaxation] = []
    families: list[str] = []
    budget = constraints.budget_usd_per_hour
    if budget is not None and (free := _solve_pools(splits, replace(constraints, budget_usd_per_hour=None))) is not None:
        families.append("budget")
        relaxations.append(
            Relaxation(
                constraint="constraints.budget_usd_per_hour",
                current=budget,
                value=_whole_cents_up(_cost(free)),
                unit="USD/h",
                cost_usd_per_hour=_cost(free),
            )
        )
    if constraints.max_gpus is not None:
        without = replace(constraints, max_gpus=None)
        fewest = _solve_pools(splits, without, weight=lambda c: c.gpus)
        if fewest is not None:
            needed = fewest.prefill.gpus + fewest.decode.gpus
            at = _solve_pools(splits, replace(constraints, max_gpus=needed))
            families.append("max_gpus")
            relaxations.append(
                Relaxation(
                    constraint="constraints.max_gpus",
                    current=constraints.max_gpus,
                    value=needed,
                    unit="GPUs",
                    cost_usd_per_hour=None if at is None else _cost(at),
                )
            )
    for gpu, limit in sorted(constraints.inventory.items()):
        rest = {g: n for g, n in constraints.inventory.items() if g != gpu}
        least = _solve_pools(splits, replace(constraints, inventory=rest), weight=_gpus_of(gpu))
        if least is None:
            continue
        used = sum(c.gpus for c in (least.prefill, least.decode) if c.gpu == gpu)
        if used <= limit:
            continue
        at = _solve_pools(splits, replace(constraints, inventory={**rest, gpu: used}))
        if "gpu_inventory" not in families:
            families.append("gpu_inventory")
        relaxations.append(
            Relaxation(
                constraint=f"constraints.inventory.{gpu}",
                current=limit,
                value=used,
                unit="GPUs",
                cost_usd_per_hour=None if at is None else _cost(at),
            )
        )
    limits = families or ["the limits together"]
    detail = f"every pair of prefill and decode pools meeting the SLOs breaks {' or '.join(limits)}"
    if budget is not None and relaxations and relaxations[0].constraint == "constraints.budget_usd_per_hour":
        detail += f": the cheapest pools cost {relaxations[0].cost_usd_per_hour:.2f} $/h against a budget of {budget:.2f} $/h"
    return InfeasiblePlanError(
        detail,
        constraint=families[0] if families else "limits",
        families=families,
        culprits=[r.constraint for r in relaxations],
        relaxations=[as_dict(r) for r in relaxations],
        relaxations_apply="any" if relaxations else None,
    )


def _undominated(
    prefill: list[PoolCandidate], decode: dict[tuple[int, int], PoolCandidate], *, by_gpu: bool = False
) -> tuple[list[PoolCandidate], dict[tuple[int, int], PoolCandidate]]:
    """Only the cheapest candidate of each (tp, KV format) prefill group and each (prefill tp, KV format)
    decode group can be optimal: the MILP's constraints see nothing else of them. With `by_gpu` (max_gpus or an
    inventory, which count GPUs per type) the groups are also per GPU type: on one GPU type and tp the cheapest
    candidate is also the one with the fewest GPUs, so nothing a GPU limit could need is dropped."""
    cheapest_p: dict[tuple[int, str, str], PoolCandidate] = {}
    for c in prefill:
        group = (c.tp, c.kv_cache, c.gpu if by_gpu else "")
        if group not in cheapest_p or c.cost_usd_per_hour < cheapest_p[group].cost_usd_per_hour:
            cheapest_p[group] = c
    cheapest_d: dict[tuple[int, str, str], tuple[tuple[int, int], PoolCandidate]] = {}
    for key, c in decode.items():
        group = (key[1], c.kv_cache, c.gpu if by_gpu else "")
        if group not in cheapest_d or c.cost_usd_per_hour < cheapest_d[group][1].cost_usd_per_hour:
            cheapest_d[group] = (key, c)
    return list(cheapest_p.values()), dict(cheapest_d.values())


def plan_disaggregated(
    *,
    gpus: Sequence[GpuSpec],
    model: ModelSpec,
    precisions: Sequence[Precision],
    tps: Sequence[int],
    workload: Workload,
    slo: Slo,
    link: KvLink,
    verify: bool = True,
    seed: int = 0,
    constraints: PlanConstraints | None = None,
    same_node: bool = True,
) -> DisaggPlan:
    """The cheapest (prefill pool, decode pool) meeting `slo` within `constraints` by the analytic model, verified
    by simulation. A constraint the pools cannot honour (`pool_refusals`) is refused, never ignored. `link` is the
    scale-out network between nodes; with `same_node`, pools of one GPU type whose GPUs fit one node may sit there
    and move the KV over the node's scale-up link instead (`_in_node_choice`), when that is cheaper or as cheap.
    `link` is the default scale-out network: a GPU with catalog figures (GpuSpec.scale_out_bytes_per_s) uses its own,
    and a pair of pools crosses the slower NIC of the two (planner/disagg.py scale_out_link). A decode candidate is
    sized over the slowest NIC among the prefill candidates of its tp (exact for one GPU type, conservative for a
    mixed pair: never sized over a faster link than it gets); the chosen pair's prediction and simulation use its own."""
    constraints = PlanConstraints() if constraints is None else constraints
    if slo.ttft_s is None:
        raise PlannerInputError("a disaggregated plan needs a TTFT target to split between the pools", field="slo.ttft_s")
    if refusals := pool_refusals(constraints):
        raise UnsupportedConfigurationError("separate prefill and decode pools do not take " + "; ".join(refusals))
    gpus, precisions, tps, batch_limits = _pinned(constraints, gpus, precisions, tps)
    q = slo.percentile / 100.0
    settings = _settings(gpus, model, precisions, tps)
    splits: dict[float, tuple[list[PoolCandidate], dict[tuple[int, int], PoolCandidate]]] = {}
    occupancies: dict[tuple[int, int, int, KvLink], dict[int, DecodeOccupancy | None]] = {}
    best_decode: dict[tuple[int, int, float, KvLink], PoolCandidate | None] = {}
    nic = {s.gpu.slug: gpu_scale_out_link(s.gpu, link) for s in settings}  # each GPU's own share of the network
    moments = [prefill_service_moments(s.step_model, workload.prompt_tokens) for s in settings]
    # a decode setting whose cheapest possible candidate (`_decode_cost_floor`) costs no less than a candidate already
    # found for the same (prefill tp, KV format[, GPU]) in this split cannot be kept by `_undominated` (which keeps the first
    # of the cheapest), so it is not searched: the MILP sees exactly the candidates it would without this (PRUNE)
    # (floored over the decode GPU's own NIC: no pair's link is faster, so no floor is too high)
    decode_floor = [_decode_cost_floor(s, workload, slo, nic[s.gpu.slug], q) if PRUNE else 0.0 for s in settings]
    by_gpu = constraints.max_gpus is not None or bool(constraints.inventory)  # `_choose`'s grouping
    for fraction in TTFT_SPLITS:
        prefill = [
            c
            for s, m in zip(settings, moments, strict=True)
            if (c := prefill_candidate(s, workload, fraction * slo.ttft_s, q, m)) is not None
        ]
        prefill = [add_replica_floors(c, constraints) for c in prefill]
        decode: dict[tuple[int, int], PoolCandidate] = {}
        cheapest: dict[tuple[int, str, str], float] = {}  # per `_undominated` group: the cheapest decode so far
        for g in sorted({c.tp for c in prefill}):
            slowest = min((nic[c.gpu] for c in prefill if c.tp == g), key=lambda x: x.bytes_per_s_per_gpu)
            for i, s in enumerate(settings):
                group = (g, s.precision.kv_cache.slug, s.gpu.slug if by_gpu else "")
                if PRUNE and decode_floor[i] >= cheapest.get(group, math.inf):
                    continue
                links = min(g, s.tp)  # prefill tps at or above the decode tp cost the same transfer
                own = nic[s.gpu.slug]
                pair = own if own.bytes_per_s_per_gpu <= slowest.bytes_per_s_per_gpu else slowest  # the slower NIC
                key = (i, links, fraction, pair)
                if key not in best_decode:
                    best_decode[key] = _best_decode(
                        s, workload, slo, (1.0 - fraction) * slo.ttft_s, pair, links, q, occupancies, batch_limits
                    )
                if (chosen := best_decode[key]) is not None:
                    decode[(i, g)] = floored = add_replica_floors(chosen, constraints)
                    cheapest[group] = min(cheapest.get(group, math.inf), floored.cost_usd_per_hour)
        splits[fraction] = (prefill, decode)
    try:
        best = _choose(splits, constraints)
        limits_error = None
    except InfeasiblePlanError as error:  # pairs across nodes exist but break a limit: one node's pairs may not
        best, limits_error = None, error
    ceiling = best.cost_usd_per_hour if best is not None and PRUNE else math.inf
    node = (
        _in_node_choice(settings, moments, workload, slo, link, q, slo.ttft_s, constraints, batch_limits, ceiling)
        if same_node
        else None
    )
    if node is not None and (best is None or node.cost_usd_per_hour <= best.cost_usd_per_hour):
        best = node  # as cheap or cheaper, and the transfer is faster
    if best is None and limits_error is not None:
        raise limits_error
    if best is None:
        raise InfeasiblePlanError("no disaggregated deployment meets the SLO with up to 64 replicas per pool")
    by_slug = {g.slug: g for g in gpus}
    pair_link = scale_out_link(by_slug[best.prefill.gpu], by_slug[best.decode.gpu], link)
    return _verified(best, workload, slo, pair_link, constraints, verify=verify, seed=seed, same_node=same_node)


def _pinned(
    constraints: PlanConstraints, gpus: Sequence[GpuSpec], precisions: Sequence[Precision], tps: Sequence[int]
) -> tuple[Sequence[GpuSpec], Sequence[Precision], Sequence[int], tuple[int, ...]]:
    """GPUs graded below constraints.min_confidence left out, then the pins the pools honour: gpu, precision and tp
    narrow both pools' candidates, batch_limit the decode pool's
    (a prefill pool has no batch limit: its token budget bounds a step). pp is 1 and engine recorded, as for
    aggregated plans (planner/pins.py); PlannerInputError naming the member for a pin outside what the request allows."""
    if constraints.min_confidence is not None:  # as planner/candidates.py drops them for aggregated plans
        graded = [g for g in gpus if meets(g.calibration_grade, constraints.min_confidence)]
        if not graded:
            raise InfeasiblePlanError(
                f"every allowed GPU's calibration is graded below the minimum confidence {constraints.min_confidence}",
                constraint="min_confidence",
            )
        gpus = graded
    pin = constraints.pin
    if pin is None:
        return gpus, precisions, tps, DECODE_BATCH_LIMITS
    if pin.gpu is not None:
        allowed = ", ".join(g.slug for g in gpus)
        gpus = [g for g in gpus if g.slug == pin.gpu]
        if not gpus:
            raise PlannerInputError(
                f"pinned gpu {pin.gpu!r} is not among the GPU types this plan may use (allowed and priced: {allowed})",
                constraint="pin.gpu",
                field="constraints.pin.gpu",
            )
    if pin.precision is not None:
        allowed = ", ".join(f"{p.weights.slug}/{p.kv_cache.slug}" for p in precisions)
        precisions = [p for p in precisions if (p.weights.slug, p.kv_cache.slug) == pin.precision]
        if not precisions:
            raise PlannerInputError(
                f"pinned precision {pin.precision[0]}/{pin.precision[1]} is not allowed (allowed: {allowed})",
                constraint="pin.precision",
                field="constraints.pin.precision",
            )
    if pin.tp is not None:
        if pin.tp not in tps:
            grid = ", ".join(str(t) for t in tps)
            raise PlannerInputError(
                f"pinned tp {pin.tp} is not a tensor-parallel degree the planner models ({grid})",
                constraint="pin.tp",
                field="constraints.pin.tp",
            )
        tps = [pin.tp]
    return gpus, precisions, tps, DECODE_BATCH_LIMITS if pin.batch_limit is None else (pin.batch_limit,)


def verify_disaggregated(plan: DisaggPlan, workload: Workload, slo: Slo, *, seed: int = 0) -> DisaggPlan:
    """Simulate a plan made with verify=False (adding replicas where it misses), e.g. once it has won against the
    aggregated plan: a losing topology's plan is not simulated, as an aggregated alternative is not."""
    in_node = plan.node_gpus is not None
    choice = _Choice(
        prefill=plan.prefill,
        decode=plan.decode,
        fraction=plan.ttft_prefill_fraction,
        node_link=plan.link if in_node else None,
        node_gpus=plan.node_gpus,
    )
    return _verified(
        choice, workload, slo, plan.scale_out_link, plan.constraints, verify=True, seed=seed, same_node=plan.same_node
    )


def _in_node_choice(
    settings: Sequence[_Setting],
    moments: Sequence[tuple[float, float]],
    workload: Workload,
    slo: Slo,
    scale_out: KvLink,
    q: float,
    ttft_s: float,
    constraints: PlanConstraints,
    batch_limits: Sequence[int] = DECODE_BATCH_LIMITS,
    ceiling_usd_per_hour: float = math.inf,
) -> _Choice | None:
    """The cheapest pair of pools on one GPU type whose GPUs all fit one node (GpuSpec.gpus_per_node, the GPUs
    sharing the scale-up link), the KV moving over that link (planner/disagg.py's intra_node_link). A GPU whose
    scale-up link is no faster than `scale_out` (PCIe cards) is left out: placing its pools together buys nothing.
    Small by construction: each pool has at most gpus_per_node − 1 GPUs, so a candidate's replica search stops there;
    a pair whose prefill pool and one decode replica already cost more than `ceiling_usd_per_hour` (the cheapest
    plan across nodes) or than the best pair so far is not searched. The request's limits hold as in the MILP: each
    pool's replica floors (min_replicas, N+1) are added before the pair must fit the node, and the pair must keep
    within max_gpus, the budget and the inventory."""
    best: tuple[float, _Choice] | None = None
    by_gpu: dict[str, list[int]] = {}
    for i, s in enumerate(settings):
        by_gpu.setdefault(s.gpu.slug, []).append(i)
    for members in by_gpu.values():
        gpu = settings[members[0]].gpu
        node, link = gpu.gpus_per_node, intra_node_link(gpu)
        if link.bytes_per_s_per_gpu <= gpu_scale_out_link(gpu, scale_out).bytes_per_s_per_gpu:
            continue
        occupancies: dict[tuple[int, int, int, KvLink], dict[int, DecodeOccupancy | None]] = {}
        decode_of: dict[tuple[int, int, int, float], PoolCandidate | None] = {}
        for fraction in TTFT_SPLITS:
            for i in members:
                ps = settings[i]
                if ps.tp >= node:
                    continue
                budget = fraction * ttft_s
                p = prefill_candidate(ps, workload, budget, q, moments[i], max_replicas=(node - 1) // ps.tp)
                if p is None:
                    continue
                p = add_replica_floors(p, constraints)
                for j in members:
                    ds = settings[j]
                    room = (node - p.gpus) // ds.tp  # decode replicas the node still holds
                    if ds.precision.kv_cache.slug != ps.precision.kv_cache.slug or room < 1:
                        continue
                    one_replica = p.cost_usd_per_hour + gpu.price_usd_per_hour_on_demand * ds.tp  # the least this pair costs
                    if PRUNE and (one_replica > ceiling_usd_per_hour or (best is not None and one_replica > best[0])):
                        continue
                    links = min(ps.tp, ds.tp)
                    key = (j, links, room, fraction)
                    if key not in decode_of:
                        decode_of[key] = _best_decode(
                            ds, workload, slo, ttft_s - budget, link, links, q, occupancies, batch_limits, max_replicas=room
                        )
                    d = decode_of[key]
                    if d is None:
                        continue
                    d = add_replica_floors(d, constraints)
                    if p.gpus + d.gpus > node or not _within_limits(p, d, constraints):
                        continue
                    cost = p.cost_usd_per_hour + d.cost_usd_per_hour
                    if best is None or cost < best[0]:
                        best = (cost, _Choice(prefill=p, decode=d, fraction=fraction, node_link=link, node_gpus=node))
    return None if best is None else best[1]


def _within_limits(prefill: PoolCandidate, decode: PoolCandidate, constraints: PlanConstraints) -> bool:
    """The pair keeps within max_gpus, the budget and every listed inventory (the MILP's limit rows, for one pair)."""
    pair = (prefill, decode)
    if constraints.max_gpus is not None and prefill.gpus + decode.gpus > constraints.max_gpus:
        return False
    if constraints.budget_usd_per_hour is not None and sum(c.cost_usd_per_hour for c in pair) > constraints.budget_usd_per_hour:
        return False
    return all(sum(c.gpus for c in pair if c.gpu == gpu) <= limit for gpu, limit in constraints.inventory.items())


def _link_why(choice: _Choice, same_node: bool, left_node: bool) -> str:
    """Why the KV crosses the link it does (the section's `transfer.link`)."""
    p, d = choice.prefill, choice.decode
    if choice.node_gpus is not None:
        return (
            f"both pools on {p.gpu}, {p.gpus} + {d.gpus} GPUs in one {choice.node_gpus}-GPU node (gpus_per_node): "
            "the KV cache moves over the node's scale-up link"
        )
    if p.gpu != d.gpu:
        return f"the pools are on different GPUs ({p.gpu}, {d.gpu}), so in different nodes: the scale-out network"
    node = p.gpus_per_node
    if p.gpus + d.gpus > node:
        after = " once verification added a replica" if left_node else ""
        return f"{p.gpus} + {d.gpus} {p.gpu} GPUs do not fit one {node}-GPU node{after}: the scale-out network"
    if not same_node:
        return "placement in one node was not offered: the scale-out network"
    return f"{p.gpu}'s scale-up link is no faster than the scale-out network, which the pools use"


def _best_decode(
    setting: _Setting,
    workload: Workload,
    slo: Slo,
    budget_s: float,
    link: KvLink,
    links: int,
    q: float,
    occupancies: dict[tuple[int, int, int, KvLink], dict[int, DecodeOccupancy | None]],
    batch_limits: Sequence[int] = DECODE_BATCH_LIMITS,
    max_replicas: int = MAX_POOL_REPLICAS,
) -> PoolCandidate | None:
    """The cheapest decode candidate of one setting over the batch limits (the largest limit among equals).
    Limits past the KV memory's slot count give the same slots, so only the first of them is tried."""
    kv = setting.kv_bytes_per_token
    transfer = (
        kv_transfer_s(prompt_tokens=workload.prompt_tokens.mean, kv_bytes_per_token=kv, link=link, gpus=links),
        kv_transfer_s(prompt_tokens=workload.prompt_tokens.quantile(q), kv_bytes_per_token=kv, link=link, gpus=links),
    )
    by_memory = math.floor(setting.kv_capacity_tokens / (workload.prompt_tokens.mean + workload.output_tokens.mean))
    limits = [b for b in batch_limits if b <= by_memory]
    limits += [b for b in batch_limits if b > by_memory][:1]
    options = [
        c
        for b in limits
        if (
            c := decode_candidate(
                setting,
                b,
                workload,
                slo,
                budget_s,
                transfer,
                q,
                occupancies.setdefault((id(setting), links, b, link), {}),  # the occupancy depends on the link
                max_replicas=max_replicas,
            )
        )
        is not None
    ]
    return min(options, key=lambda c: (c.cost_usd_per_hour, -(c.batch_limit or 0))) if options else None


def _pools(choice: _Choice) -> tuple[PrefillPool, DecodePool]:
    p, d = choice.prefill, choice.decode
    return (
        PrefillPool(step_model=p.step_model, replicas=p.serving_replicas, tp=p.tp),
        DecodePool(
            step_model=d.step_model,
            replicas=d.serving_replicas,
            batch_limit=d.batch_limit or 1,
            kv_capacity_tokens=d.kv_capacity_tokens,
            tp=d.tp,
        ),
    )


def _verified(
    choice: _Choice,
    workload: Workload,
    slo: Slo,
    scale_out: KvLink,
    constraints: PlanConstraints,
    *,
    verify: bool,
    seed: int,
    same_node: bool,
) -> DisaggPlan:
    """Simulate the plan; a miss adds a replica to the pool it points at (TPOT or E2E alone → decode; TTFT → the
    prefill pool unless its ρ < 0.5), at most MAX_VERIFY_ROUNDS times. With N+1 the pools are predicted and
    simulated with their spare lost (`serving_replicas`). Replicas added past a limit are an InfeasiblePlanError.
    Pools in one node that outgrow it move to the scale-out network (and are simulated over it)."""
    kv_per_token = choice.decode.kv_bytes_per_token
    left_node = False
    added = 0
    simulated: tuple[float, float, float] | None = None
    ttft_target = slo.ttft_s or math.inf
    tpot_target = slo.tpot_s or math.inf
    e2e_target = slo.e2e_s or math.inf
    for _ in range(MAX_VERIFY_ROUNDS + 1):
        if choice.node_gpus is not None and choice.prefill.gpus + choice.decode.gpus > choice.node_gpus:
            choice = _Choice(prefill=choice.prefill, decode=choice.decode, fraction=choice.fraction)  # out of the node
            left_node = True
        link = choice.node_link or scale_out
        prefill_pool, decode_pool = _pools(choice)
        if not verify:
            break
        simulated = simulate_disagg(
            prefill_pool,
            decode_pool,
            workload,
            link=link,
            kv_bytes_per_token=kv_per_token,
            prefill_token_budget=PREFILL_TOKEN_BUDGET,
            requests=VERIFY_REQUESTS,
            seed=seed,
        ).percentile(slo.percentile)
        ttft, tpot, e2e = simulated
        if ttft <= ttft_target and tpot <= tpot_target and e2e <= e2e_target:
            break
        if added == MAX_VERIFY_ROUNDS:
            raise InfeasiblePlanError(
                f"the simulated plan still misses its SLO after {added} added replicas "
                f"(TTFT {ttft:.3f} s, TPOT {tpot:.4f} s, E2E {e2e:.2f} s)",
                constraint="verification",
            )
        if tpot > tpot_target or ttft <= ttft_target or choice.prefill.rho < 0.5:  # TPOT or E2E alone: decode
            choice = replace(choice, decode=choice.decode.with_replicas(choice.decode.replicas + 1))
        else:
            choice = replace(choice, prefill=choice.prefill.with_replicas(choice.prefill.replicas + 1))
        added += 1
    if added:
        _check_added(choice, constraints, added)
    prefill_pool, decode_pool = _pools(choice)  # the loop ended at its top: `link` is the final pools' link
    prediction = predict_disagg(
        prefill_pool, decode_pool, workload, link=link, kv_bytes_per_token=kv_per_token, percentile=slo.percentile
    )
    return DisaggPlan(
        prefill=replace(choice.prefill, rho=prediction.prefill.rho),  # ρ of the final (serving) replicas
        decode=replace(choice.decode, rho=prediction.decode.rho),
        ttft_prefill_fraction=choice.fraction,
        prediction=prediction,
        simulated_s=simulated,
        verify_added_replicas=added,
        link=link,
        kv_bytes_per_token=kv_per_token,
        link_why=_link_why(choice, same_node, left_node),
        node_gpus=choice.node_gpus,
        scale_out_link=scale_out,
        same_node=same_node,
        constraints=constraints,
    )


def _check_added(choice: _Choice, constraints: PlanConstraints, added: int) -> None:
    """The limits again once the simulator added replicas: a plan past them is refused, not answered."""
    gpus = choice.prefill.gpus + choice.decode.gpus
    cost = _cost(choice)
    broken = []
    if constraints.max_gpus is not None and gpus > constraints.max_gpus:
        broken.append(("max_gpus", f"{gpus} GPUs against max_gpus {constraints.max_gpus}"))
    if constraints.budget_usd_per_hour is not None and cost > constraints.budget_usd_per_hour:
        broken.append(("budget", f"{cost:.2f} $/h against a budget of {constraints.budget_usd_per_hour:.2f} $/h"))
    for gpu, limit in sorted(constraints.inventory.items()):
        used = sum(c.gpus for c in (choice.prefill, choice.decode) if c.gpu == gpu)
        if used > limit:
            broken.append(("gpu_inventory", f"{used} {gpu} GPUs against an inventory of {limit}"))
    if broken:
        raise InfeasiblePlanError(
            f"the simulator needed {added} more replicas to meet the SLOs, and the pools then break "
            + "; ".join(why for _, why in broken),
            constraint=broken[0][0],
            families=sorted({family for family, _ in broken}),
        )
