"""The cheapest disaggregated deployment: a prefill pool and a decode pool, each sized at the SLO budget it is given.

Each pool has its own candidates (GPU, precision, tp; the decode pool also its batch limit, the
prefill pool its token budget), so the pools may run on different GPUs. The TTFT target is split:
a fraction f goes to the prefill pool (its queue wait and the prefill of a p99 prompt), the rest to
the decode side (admission wait and the KV transfer); f is searched over `TTFT_SPLITS`. For each f,
each candidate's replica count is the fewest that meets its budget (and TPOT, for decode), and a
MILP over every split's candidates picks one candidate per pool, both of one split:

    minimise   Σ_(f,p) cost_fp · prefill[f,p] + Σ_(f,d,g) cost_fdg · decode[f,d,g]
    subject to Σ prefill = 1,  Σ decode = 1
               decode[f,d,g] ≤ Σ_{p: w_p = g, same KV format} prefill[f,p]   (same split; the transfer runs over min(w_p, w_d) links, w = tp·pp)
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

This module is the search and its verification; one pool's candidates and their lower bounds are
planner/plan_disagg_candidates.py, the MILP and the limits' diagnosis planner/plan_disagg_choice.py (their
public names are importable from here too).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from planner import plan_disagg_candidates
from planner.confidence import meets
from planner.disagg import (
    DecodeOccupancy,
    DecodePool,
    DisaggPrediction,
    KvLink,
    PrefillPool,
    gpu_scale_out_link,
    intra_node_link,
    predict_disagg,
    prefill_service_moments,
    scale_out_link,
)
from planner.errors import InfeasiblePlanError, PlannerInputError, UnsupportedConfigurationError
from planner.performance import build_step_model
from planner.pipeline import ParallelSection, replica_parallel_section
from planner.plan_disagg_candidates import (
    DECODE_BATCH_LIMITS,
    MAX_POOL_REPLICAS,
    PREFILL_TOKEN_BUDGET,
    TTFT_SPLITS,
    CostLowerBound,
    PoolCandidate,
    PoolSetting,
    best_decode_candidate,
    decode_candidate,
    decode_cost_floor,
    decode_replicas_lower_bound,
    disaggregated_cost_lower_bound,
    pool_settings,
    prefill_candidate,
    prefill_replicas_lower_bound,
)
from planner.plan_disagg_choice import (
    SOLVER_TIME_LIMIT_S,
    PoolChoice,
    Splits,
    add_budget_constraints,
    add_gpu_inventory_constraints,
    add_max_gpus_constraints,
    add_replica_floors,
    choose_pools,
)
from planner.plan_records import PlanConstraints
from planner.simulator_disagg import simulate_disagg
from planner.specs import GpuSpec, ModelSpec, Precision
from planner.workload import Slo, Workload

MAX_VERIFY_ROUNDS = 3
VERIFY_REQUESTS = 4000

__all__ = [
    "DECODE_BATCH_LIMITS",
    "MAX_POOL_REPLICAS",
    "MAX_VERIFY_ROUNDS",
    "PREFILL_TOKEN_BUDGET",
    "SOLVER_TIME_LIMIT_S",
    "TTFT_SPLITS",
    "VERIFY_REQUESTS",
    "CostLowerBound",
    "DisaggPlan",
    "PoolCandidate",
    "add_budget_constraints",
    "add_gpu_inventory_constraints",
    "add_max_gpus_constraints",
    "add_replica_floors",
    "decode_candidate",
    "decode_replicas_lower_bound",
    "disaggregated_cost_lower_bound",
    "plan_disaggregated",
    "pool_parallel_sections",
    "pool_refusals",
    "prefill_candidate",
    "prefill_replicas_lower_bound",
    "verify_disaggregated",
]


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
            out.append(
                "constraints.pin.pp: the prefill and decode pools take pipeline stages only where no node holds the "
                "model, never a pinned pp above 1"
            )
        if pin.ep is not None and pin.ep > 1:
            out.append("constraints.pin.ep: the prefill and decode pools are not searched expert-parallel")
    return out


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
    pp_degrees: Sequence[int] = (1,),
) -> DisaggPlan:
    """The cheapest (prefill pool, decode pool) meeting `slo` within `constraints` by the analytic model, verified
    by simulation. A constraint the pools cannot honour (`pool_refusals`) is refused, never ignored. `link` is the
    scale-out network between nodes; with `same_node`, pools of one GPU type whose GPUs fit one node may sit there
    and move the KV over the node's scale-up link instead (`_in_node_choice`), when that is cheaper or as cheap.
    `link` is the default scale-out network: a GPU with catalog figures (GpuSpec.scale_out_bytes_per_s) uses its own,
    and a pair of pools crosses the slower NIC of the two (planner/disagg.py scale_out_link). A decode candidate is
    sized over the slowest NIC among the prefill candidates of its tp (exact for one GPU type, conservative for a
    mixed pair: never sized over a faster link than it gets); the chosen pair's prediction and simulation use its own.
    `pp_degrees` (planner/pipeline.py PP_DEGREES from POST /v1/plans) offers pipeline settings where no in-node tp holds
    the model (planner/plan_disagg_candidates.py); a pinned pp 1 offers none."""
    constraints = PlanConstraints() if constraints is None else constraints
    if slo.ttft_s is None:
        raise PlannerInputError("a disaggregated plan needs a TTFT target to split between the pools", field="slo.ttft_s")
    if refusals := pool_refusals(constraints):
        raise UnsupportedConfigurationError("separate prefill and decode pools do not take " + "; ".join(refusals))
    gpus, precisions, tps, batch_limits = _pinned(constraints, gpus, precisions, tps)
    q = slo.percentile / 100.0
    if constraints.pin is not None and constraints.pin.pp == 1:
        pp_degrees = (1,)
    settings = pool_settings(gpus, model, precisions, tps, pp_degrees)
    splits: Splits = {}
    occupancies: dict[tuple[int, int, int, KvLink], dict[int, DecodeOccupancy | None]] = {}
    best_decode: dict[tuple[int, int, float, KvLink], PoolCandidate | None] = {}
    nic = {s.gpu.slug: gpu_scale_out_link(s.gpu, link) for s in settings}  # each GPU's own share of the network
    moments = [prefill_service_moments(s.prefill_model, workload.prompt_tokens) for s in settings]
    # a decode setting whose cheapest possible candidate (`decode_cost_floor`) costs no less than a candidate already
    # found for the same (prefill tp, KV format[, GPU]) in this split cannot be kept by `_undominated` (which keeps the first
    # of the cheapest), so it is not searched: the MILP sees exactly the candidates it would without this (plan_disagg_candidates.PRUNE)
    # (floored over the decode GPU's own NIC: no pair's link is faster, so no floor is too high)
    decode_floor = [
        decode_cost_floor(s, workload, slo, nic[s.gpu.slug], q) if plan_disagg_candidates.PRUNE else 0.0 for s in settings
    ]
    by_gpu = constraints.max_gpus is not None or bool(constraints.inventory)  # `choose_pools`'s grouping
    for fraction in TTFT_SPLITS:
        prefill = [
            c
            for s, m in zip(settings, moments, strict=True)
            if (c := prefill_candidate(s, workload, fraction * slo.ttft_s, q, m)) is not None
        ]
        prefill = [add_replica_floors(c, constraints) for c in prefill]
        decode: dict[tuple[int, int], PoolCandidate] = {}
        cheapest: dict[tuple[int, str, str], float] = {}  # per `_undominated` group: the cheapest decode so far
        for g in sorted({c.gpus_per_replica for c in prefill}):  # the GPUs a prefill replica's KV is spread over
            slowest = min((nic[c.gpu] for c in prefill if c.gpus_per_replica == g), key=lambda x: x.bytes_per_s_per_gpu)
            for i, s in enumerate(settings):
                group = (g, s.precision.kv_cache.slug, s.gpu.slug if by_gpu else "")
                if plan_disagg_candidates.PRUNE and decode_floor[i] >= cheapest.get(group, math.inf):
                    continue
                links = min(g, s.gpus_per_replica)  # prefill widths at or above the decode width cost the same transfer
                own = nic[s.gpu.slug]
                pair = own if own.bytes_per_s_per_gpu <= slowest.bytes_per_s_per_gpu else slowest  # the slower NIC
                key = (i, links, fraction, pair)
                if key not in best_decode:
                    best_decode[key] = best_decode_candidate(
                        s, workload, slo, (1.0 - fraction) * slo.ttft_s, pair, links, q, occupancies, batch_limits
                    )
                if (chosen := best_decode[key]) is not None:
                    decode[(i, g)] = floored = add_replica_floors(chosen, constraints)
                    cheapest[group] = min(cheapest.get(group, math.inf), floored.cost_usd_per_hour)
        splits[fraction] = (prefill, decode)
    try:
        best = choose_pools(splits, constraints)
        limits_error = None
    except InfeasiblePlanError as error:  # pairs across nodes exist but break a limit: one node's pairs may not
        best, limits_error = None, error
    ceiling = best.cost_usd_per_hour if best is not None and plan_disagg_candidates.PRUNE else math.inf
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
    choice = PoolChoice(
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
    settings: Sequence[PoolSetting],
    moments: Sequence[tuple[float, float]],
    workload: Workload,
    slo: Slo,
    scale_out: KvLink,
    q: float,
    ttft_s: float,
    constraints: PlanConstraints,
    batch_limits: Sequence[int] = DECODE_BATCH_LIMITS,
    ceiling_usd_per_hour: float = math.inf,
) -> PoolChoice | None:
    """The cheapest pair of pools on one GPU type whose GPUs all fit one node (GpuSpec.gpus_per_node, the GPUs
    sharing the scale-up link), the KV moving over that link (planner/disagg.py's intra_node_link). A GPU whose
    scale-up link is no faster than `scale_out` (PCIe cards) is left out: placing its pools together buys nothing.
    Small by construction: each pool has at most gpus_per_node − 1 GPUs, so a candidate's replica search stops there;
    a pair whose prefill pool and one decode replica already cost more than `ceiling_usd_per_hour` (the cheapest
    plan across nodes) or than the best pair so far is not searched. The request's limits hold as in the MILP: each
    pool's replica floors (min_replicas, N+1) are added before the pair must fit the node, and the pair must keep
    within max_gpus, the budget and the inventory."""
    best: tuple[float, PoolChoice] | None = None
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
                if ps.gpus_per_replica >= node:
                    continue
                budget = fraction * ttft_s
                p = prefill_candidate(ps, workload, budget, q, moments[i], max_replicas=(node - 1) // ps.gpus_per_replica)
                if p is None:
                    continue
                p = add_replica_floors(p, constraints)
                for j in members:
                    ds = settings[j]
                    room = (node - p.gpus) // ds.gpus_per_replica  # decode replicas the node still holds
                    if ds.precision.kv_cache.slug != ps.precision.kv_cache.slug or room < 1:
                        continue
                    one_replica = p.cost_usd_per_hour + gpu.price_usd_per_hour_on_demand * ds.gpus_per_replica  # the least
                    if plan_disagg_candidates.PRUNE and (
                        one_replica > ceiling_usd_per_hour or (best is not None and one_replica > best[0])
                    ):
                        continue
                    links = min(ps.gpus_per_replica, ds.gpus_per_replica)
                    key = (j, links, room, fraction)
                    if key not in decode_of:
                        decode_of[key] = best_decode_candidate(
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
                        best = (cost, PoolChoice(prefill=p, decode=d, fraction=fraction, node_link=link, node_gpus=node))
    return None if best is None else best[1]


def _within_limits(prefill: PoolCandidate, decode: PoolCandidate, constraints: PlanConstraints) -> bool:
    """The pair keeps within max_gpus, the budget and every listed inventory (the MILP's limit rows, for one pair)."""
    pair = (prefill, decode)
    if constraints.max_gpus is not None and prefill.gpus + decode.gpus > constraints.max_gpus:
        return False
    if constraints.budget_usd_per_hour is not None and sum(c.cost_usd_per_hour for c in pair) > constraints.budget_usd_per_hour:
        return False
    return all(sum(c.gpus for c in pair if c.gpu == gpu) <= limit for gpu, limit in constraints.inventory.items())


def _link_why(choice: PoolChoice, same_node: bool, left_node: bool) -> str:
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


def _pools(choice: PoolChoice) -> tuple[PrefillPool, DecodePool]:
    p, d = choice.prefill, choice.decode
    return (
        # a replica of pp stages prefills pp prompts at once (planner/plan_disagg_candidates.py); `tp` is the links count
        PrefillPool(step_model=p.step_model, replicas=p.serving_replicas * p.pp, tp=p.gpus_per_replica),
        DecodePool(
            step_model=d.step_model,
            replicas=d.serving_replicas,
            batch_limit=d.batch_limit or 1,
            kv_capacity_tokens=d.kv_capacity_tokens,
            tp=d.gpus_per_replica,
        ),
    )


def _verified(
    choice: PoolChoice,
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
            choice = PoolChoice(prefill=choice.prefill, decode=choice.decode, fraction=choice.fraction)  # out of the node
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


def _check_added(choice: PoolChoice, constraints: PlanConstraints, added: int) -> None:
    """The limits again once the simulator added replicas: a plan past them is refused, not answered."""
    gpus = choice.prefill.gpus + choice.decode.gpus
    cost = choice.cost_usd_per_hour
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


def pool_parallel_sections(
    plan: DisaggPlan,
    *,
    gpus: Sequence[GpuSpec],
    model: ModelSpec,
    precisions: Sequence[Precision],
    workload: Workload,
) -> tuple[ParallelSection | None, ParallelSection | None]:
    """The (prefill, decode) pools' parallel sections (planner/pipeline.py `replica_parallel_section`; None for a pool
    at pp 1), as an aggregated plan's justification shows its replica's: each built on the pool's folded step model
    (the prefill pool prices a prompt with the lone-prompt model, whose time the section's `lone_prefill_s` is). The
    decode pool's step is at its mean batch per replica (the prediction's fixed point); a prefill pool batches no
    decodes, so its step is one sequence's."""

    def section(pool: PoolCandidate, batch: float) -> ParallelSection | None:
        if pool.pp == 1:
            return None  # separate pools take no expert parallelism (pool_refusals)
        gpu = next(g for g in gpus if g.slug == pool.gpu)
        precision = next(p for p in precisions if p.weights.slug == pool.weights and p.kv_cache.slug == pool.kv_cache)
        sm = build_step_model(gpu, model, precision, pool.tp, gpu.efficiency, pp=pool.pp)
        return replica_parallel_section(
            gpu, model, precision.weights, sm, tp=pool.tp, pp=pool.pp, ep=1, batch=batch, workload=workload
        )

    return section(plan.prefill, 1.0), section(plan.decode, plan.prediction.decode.mean_batch)
