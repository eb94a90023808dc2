"""One pool's candidates for planner/plan_disagg.py: each setting (GPU, precision, tp; a decode setting also its batch
limit) sized to the fewest replicas that meet the SLO budget its pool is given, and the closed-form lower bounds on
those replicas (and so on the cheapest plan's cost) that the search prunes by.

A prefill candidate is the fewest replicas c with W_q(c) + S(p_q) ≤ budget (an M/G/c queue of whole prompts); a
decode candidate the fewest replicas r meeting TPOT, admission wait + KV transfer ≤ budget and, with an E2E
target, (o_q − 1)·t_step(n̄) ≤ e2e − ttft (planner/plan_disagg.py's module docstring states the method).

Pipeline stages. Where no in-node tp holds the model (Llama-3.1-405B in BF16 on H100), a setting may be tp × pp GPUs
(pp ∈ `pp_degrees`, planner/pipeline.py), as the single-pool search offers them. Its decode pool uses the pipeline's
folded step model (a decode step's sequences fill the pp micro-batches). Its prefill pool counts pp servers per replica:
the engine keeps pp micro-batches in flight (vLLM's virtual engines), so pp prompts are prefilled at once, each going
through the stages one after the other in `lone_prefill_s` (planner/pipeline.py `lone_prompt_step_model`): an
M/G/(c·pp) queue of whole prompts. Assumed: the pp prompts in flight do not wait for one another's stages (they are
staggered; at full load each stage is busy with one prompt at a time, the throughput of the folded model). The KV
cache of a replica is spread over its tp × pp GPUs (each stage holds its layers' share), so a transfer runs over
min(GPUs of a prefill replica, GPUs of a decode replica) links.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from planner.disagg import (
    DecodeOccupancy,
    DecodePool,
    KvLink,
    PrefillPool,
    decode_occupancy,
    decode_saturated,
    decode_slots,
    decode_step_s,
    decode_tpot_lower_bound_s,
    intra_node_link,
    kv_transfer_s,
    prefill_queue,
    prefill_s,
    prefill_service_moments,
)
from planner.errors import (
    ModelDoesNotFitError,
    PlannerInputError,
    UnstableLoadError,
    UnsupportedConfigurationError,
)
from planner.memory import kv_bytes_per_token, kv_capacity_tokens
from planner.performance import build_step_model
from planner.pipeline import lone_prompt_step_model
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
    #: Pipeline stages of a replica (tp × pp GPUs); a prefill replica serves pp prompts at once (module docstring).
    pp: int = 1

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    @property
    def gpus(self) -> int:
        return self.gpus_per_replica * self.replicas

    @property
    def serving_replicas(self) -> int:
        """The replicas left with the N+1 spare lost: what the prediction and the simulation size."""
        return self.replicas - self.spare_replicas

    def with_replicas(self, replicas: int) -> PoolCandidate:
        return replace(
            self,
            replicas=replicas,
            cost_usd_per_hour=self.price_usd_per_gpu_hour * self.gpus_per_replica * replicas,  # price × tp·pp × replicas
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolSetting:
    """One (GPU, precision, tp, pp) a pool may run, with its step models and KV memory: what a candidate is sized on."""

    gpu: GpuSpec
    precision: Precision
    tp: int
    step_model: StepModel
    kv_capacity_tokens: float
    kv_bytes_per_token: float
    pp: int = 1
    #: One prompt alone through the replica (`lone_prompt_step_model`; `step_model` itself at pp 1): the prefill
    #: pool's service time per prompt, pp of them in flight on a replica (module docstring).
    prefill_step_model: StepModel | None = None

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    @property
    def prefill_model(self) -> StepModel:
        return self.step_model if self.prefill_step_model is None else self.prefill_step_model


def pool_settings(
    gpus: Sequence[GpuSpec],
    model: ModelSpec,
    precisions: Sequence[Precision],
    tps: Sequence[int],
    pp_degrees: Sequence[int] = (1,),
) -> list[PoolSetting]:
    """Every (GPU, precision, tp) whose step model builds and whose memory holds some KV after the weights; and, for a
    (GPU, precision) where none of the in-node tps does, every (tp, pp) with pp > 1 in `pp_degrees` that does (a
    pipeline of in-node tp stages, as planner/candidates.py `enumerate_groups` offers them; the default (1,) none)."""
    out = []
    for gpu in gpus:
        for precision in precisions:
            found = [s for tp in tps if (s := _setting(gpu, model, precision, tp, 1)) is not None]
            if not any(s.tp <= gpu.gpus_per_node for s in found):
                in_node = [tp for tp in tps if tp <= gpu.gpus_per_node]
                found += [s for tp in in_node for pp in pp_degrees if pp > 1 and (s := _setting(gpu, model, precision, tp, pp))]
            out += found
    return out


def _setting(gpu: GpuSpec, model: ModelSpec, precision: Precision, tp: int, pp: int) -> PoolSetting | None:
    """The (GPU, precision, tp, pp) setting, or None when its layout is refused or no KV fits beside the weights."""
    try:
        sm = build_step_model(gpu, model, precision, tp, gpu.efficiency, pp=pp)
    except (UnsupportedConfigurationError, ModelDoesNotFitError, PlannerInputError):
        return None
    capacity = kv_capacity_tokens(gpu, model, precision, tp, gpu.efficiency, pp=pp)
    if capacity <= 0:
        return None
    return PoolSetting(
        gpu=gpu,
        precision=precision,
        tp=tp,
        pp=pp,
        step_model=sm,
        prefill_step_model=None if pp == 1 else lone_prompt_step_model(sm, pp),
        kv_capacity_tokens=float(capacity),
        kv_bytes_per_token=kv_bytes_per_token(model, precision.kv_cache),
    )


def _candidate(
    setting: PoolSetting, role: str, replicas: int, rho: float, binding: str, batch_limit: int | None
) -> PoolCandidate:
    price = setting.gpu.price_usd_per_hour_on_demand
    return PoolCandidate(
        role=role,
        gpu=setting.gpu.slug,
        weights=setting.precision.weights.slug,
        kv_cache=setting.precision.kv_cache.slug,
        tp=setting.tp,
        pp=setting.pp,
        replicas=replicas,
        batch_limit=batch_limit,
        chunk_tokens=PREFILL_TOKEN_BUDGET if role == "prefill" else None,
        cost_usd_per_hour=price * setting.gpus_per_replica * replicas,  # price × tp·pp × replicas
        rho=rho,
        binding=binding,
        step_model=setting.prefill_model if role == "prefill" else setting.step_model,
        kv_capacity_tokens=setting.kv_capacity_tokens,
        kv_bytes_per_token=setting.kv_bytes_per_token,
        price_usd_per_gpu_hour=price,
        gpus_per_node=setting.gpu.gpus_per_node,
    )


def prefill_candidate(
    setting: PoolSetting,
    workload: Workload,
    budget_s: float,
    q: float,
    moments: tuple[float, float] | None = None,
    *,
    max_replicas: int = MAX_POOL_REPLICAS,
) -> PoolCandidate | None:
    """The fewest replicas c with W_q(c·pp) + S(p_q) ≤ budget (pp prompts in flight on a replica of pp stages); None
    when no c ≤ max_replicas does. `moments`: the setting's prefill (E[S], c_s²), when the caller keeps them across budgets."""
    prompt_q = workload.prompt_tokens.quantile(q)
    if setting.kv_capacity_tokens < prompt_q:
        return None  # the replica's memory after its weights cannot hold a p99 prompt's KV while prefilling it
    service_q = prefill_s(setting.prefill_model, prompt_q)
    if service_q > budget_s:
        return None
    if moments is None:
        moments = prefill_service_moments(setting.prefill_model, workload.prompt_tokens)
    servers = max(1, math.floor(workload.arrival_rate_rps * moments[0]) + 1)  # ρ < 1 needs c·pp > λ·E[S]
    first = math.ceil(servers / setting.pp)
    binding = "utilisation" if first > 1 else "ttft"
    for c in range(first, max_replicas + 1):
        pool = PrefillPool(step_model=setting.prefill_model, replicas=c * setting.pp, tp=setting.gpus_per_replica)
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
    setting: PoolSetting,
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
        tp=setting.gpus_per_replica,  # the GPUs the replica's KV is spread over: its transfer links
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
                tp=setting.gpus_per_replica,
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
    setting: PoolSetting, workload: Workload, slo: Slo, q: float, moments: tuple[float, float] | None = None
) -> int | None:
    """The fewest prefill replicas `prefill_candidate` could answer at any TTFT split: c > λ·E[S] (the pool at ρ = 1,
    no queueing); None when no split's budget admits the setting (the p99 prompt's KV or prefill does not fit)."""
    if slo.ttft_s is None or setting.kv_capacity_tokens < workload.prompt_tokens.quantile(q):
        return None
    if prefill_s(setting.prefill_model, workload.prompt_tokens.quantile(q)) > max(TTFT_SPLITS) * slo.ttft_s:
        return None  # the largest prefill budget is shorter than one p99 prefill
    mean_s, _ = moments if moments is not None else prefill_service_moments(setting.prefill_model, workload.prompt_tokens)
    servers = max(1, math.floor(workload.arrival_rate_rps * mean_s) + 1)
    first = math.ceil(servers / setting.pp)  # prefill_candidate's first count
    return first if first <= MAX_POOL_REPLICAS else None


def decode_replicas_lower_bound(
    setting: PoolSetting, workload: Workload, slo: Slo, link: KvLink, q: float, *, node_link: KvLink | None = None
) -> int | None:
    """The fewest decode replicas `decode_candidate` could answer at any split and prefill tp, over the batch limits
    `best_decode_candidate` tries: per limit, the fewest r with the pool at ρ < 1 and no queueing (r ≥ λ·H_min/s,
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
    width = setting.gpus_per_replica  # the most links a transfer to this replica runs over
    transfer_q = min(kv_transfer_s(prompt_tokens=p_q, kv_bytes_per_token=kv, link=x, gpus=width) for x in links)
    if transfer_q > (1.0 - min(TTFT_SPLITS)) * slo.ttft_s:
        return None
    transfer_mean = min(kv_transfer_s(prompt_tokens=p_mean, kv_bytes_per_token=kv, link=x, gpus=width) for x in links)
    hold_min = transfer_mean + max(workload.output_tokens.mean - 1.0, 0.0) * step_one  # t_x + (ō − 1)·t_step(1)
    best: int | None = None
    for limit in decode_limits(by_memory):
        pool = DecodePool(
            step_model=setting.step_model,
            replicas=1,
            batch_limit=limit,
            kv_capacity_tokens=setting.kv_capacity_tokens,
            tp=width,
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


def decode_cost_floor(setting: PoolSetting, workload: Workload, slo: Slo, link: KvLink, q: float) -> float:
    """The least a decode candidate of this setting can cost over `link` (inf: it has none): price × tp·pp × its
    replica lower bound."""
    replicas = decode_replicas_lower_bound(setting, workload, slo, link, q)
    price = setting.gpu.price_usd_per_hour_on_demand
    return math.inf if replicas is None else price * setting.gpus_per_replica * replicas  # $/GPU-h × tp·pp × r


def decode_limits(by_memory: int) -> list[int]:
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
    pp_degrees: Sequence[int] = (1,),
) -> CostLowerBound:
    """`plan_disaggregated`'s cost is at least this (before verification, which only adds replicas): every pool it
    can answer has at least its setting's replica lower bound. Settings are taken cheapest GPU-hour first, so the
    prefill moments are computed only for settings that could still lower the bound."""
    q = slo.percentile / 100.0
    settings = sorted(
        pool_settings(gpus, model, precisions, tps, pp_degrees),
        key=lambda s: s.gpu.price_usd_per_hour_on_demand * s.gpus_per_replica,
    )
    # per KV format: both pools must hold the cache in one format (the MILP's transfer constraint)
    bounds: dict[str, tuple[float, float]] = {}
    for kv_format in dict.fromkeys(s.precision.kv_cache.slug for s in settings):
        prefill = decode = math.inf
        for s in (s for s in settings if s.precision.kv_cache.slug == kv_format):
            per_replica = s.gpu.price_usd_per_hour_on_demand * s.gpus_per_replica  # price × tp·pp
            if per_replica >= prefill and per_replica >= decode:
                break  # a replica of this or any later setting costs at least both bounds so far
            if per_replica < prefill and (c := prefill_replicas_lower_bound(s, workload, slo, q)) is not None:
                prefill = min(prefill, per_replica * c)
            # pools in one node may move the KV over its scale-up link (plan_disaggregated's `same_node`)
            node_link = intra_node_link(s.gpu) if same_node and s.gpus_per_replica < s.gpu.gpus_per_node else None
            if (
                per_replica < decode
                and (r := decode_replicas_lower_bound(s, workload, slo, link, q, node_link=node_link)) is not None
            ):
                decode = min(decode, per_replica * r)
        bounds[kv_format] = (prefill, decode)
    prefill, decode = min(bounds.values(), key=sum, default=(math.inf, math.inf))
    return CostLowerBound(prefill_usd_per_hour=prefill, decode_usd_per_hour=decode)


def best_decode_candidate(
    setting: PoolSetting,
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
