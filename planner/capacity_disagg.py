"""The capacity of given hardware run as separate prefill and decode pools: the largest request rate
G GPUs of one type sustain within the SLOs when P of them prefill and G − P decode.

A prefill pool of P GPUs and a decode pool of G − P GPUs sustain the rate λ when some configuration
of each pool (planner/plan_disagg.py's candidates: GPU, precision, tp, batch limit, the TTFT split)
meets its share of the SLOs at λ with the replicas those GPUs hold. plan_disagg sizes every
candidate with the fewest replicas meeting its budget, and with one GPU type at one price its MILP's
cheapest pair is the pair of fewest GPUs, n(λ) = min over pairs of gpus_prefill + gpus_decode. Since
a pool's replicas only ever help it (a larger M/G/c or decode pool waits less at the same λ):

    ∃ P:  prefill fits in P GPUs  and  decode fits in G − P GPUs   ⇔   n(λ) ≤ G

(⇐ take P = the cheapest pair's prefill GPUs), so the P search is the planner's own MILP, and the
capacity is

    Λ = sup { λ : n(λ) ≤ G }

found by doubling from 1 req/s to bracket it, then bisecting the bracket geometrically to
`RATE_TOLERANCE` (1 %, the aggregated capacity's own tolerance, planner/rate_search.py). n(λ) is
non-decreasing in λ (tests/planner/test_plan_disagg.py `test_more_load_never_costs_less`). The pools
answered are the cheapest pair at Λ; the G − n(Λ) GPUs left over cannot raise it past the bracket's
upper end (the pair there needs more than G).

The request's constraints go to plan_disaggregated as they are (`constraints`): an E2E target bounds
the decode candidates there, N+1 adds a priced spare replica to each pool and min_replicas floors
each pool's replicas, the gpu, precision, tp and batch_limit pins narrow the candidates. Each only
removes candidates or adds replicas, so n(λ) stays non-decreasing in λ and the search above holds;
the GPUs counted against G are the pools' with their spares. What plan_disagg refuses
(`pool_refusals`: a pinned replica count or chunk budget, instances, speculation) is refused here too.

What binds: each pool of the answer is held against its share of the SLOs at the bracket's upper
end, the first rate no pair within G sustains (prefill: its p99 wait plus a p99 prompt's prefill
within f·TTFT; decode: TPOT, its admission wait plus the transfer within (1 − f)·TTFT and, with an
E2E target, a p99 output's decode within E2E − TTFT), both stable (`pool_loads`), each with its
N+1 spare lost: the pool past its share binds, or both.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from planner.disagg import (
    DecodePool,
    DisaggPrediction,
    KvLink,
    PrefillPool,
    decode_occupancy,
    kv_transfer_s,
    prefill_queue,
    prefill_s,
)
from planner.errors import InfeasiblePlanError, PlannerInputError, UnstableLoadError, UnsupportedConfigurationError
from planner.plan_disagg import PREFILL_TOKEN_BUDGET, DisaggPlan, PoolCandidate, plan_disaggregated, pool_refusals
from planner.plan_records import PlanConstraints
from planner.planning import MAX_VERIFY_ADJUSTMENTS, VERIFY_CAPACITY_STEP, VERIFY_REQUESTS
from planner.simulator_disagg import simulate_disagg
from planner.specs import GpuSpec, ModelSpec, Precision
from planner.workload import Slo, Workload

#: Relative width of the final rate bracket (the aggregated capacity's μ is bracketed to 1 % too).
RATE_TOLERANCE = 0.01
#: The bracket search starts here and doubles or halves (a rate scale, not a result).
START_RATE_RPS = 1.0
#: Rates below this are "not even unloaded": one request an hour.
MIN_RATE_RPS = 1.0 / 3600.0
#: Doublings past which the rate is called unbounded (2^40 req/s: a planner bug, not an answer).
MAX_DOUBLINGS = 40


@dataclass(frozen=True, slots=True, kw_only=True)
class DisaggCapacity:
    """The largest rate the pools sustain, the pools (the cheapest pair at that rate) and what binds."""

    max_arrival_rate_rps: float
    #: The first rate found that no pair within the GPUs sustains (the bracket's upper end).
    unsustained_rate_rps: float
    gpus: int
    prefill: PoolCandidate
    decode: PoolCandidate
    ttft_prefill_fraction: float
    #: "prefill", "decode" or "both": the pool(s) past their share at `unsustained_rate_rps` (`pool_loads`).
    binding: str
    prediction: DisaggPrediction
    link: KvLink
    kv_bytes_per_token: float
    plans_evaluated: int
    #: The simulator's steps down from Λ (`verify_capacity`), the last the agreed rate; None unverified.
    verification: tuple[PoolsVerifyStep, ...] | None = None

    @property
    def agreed_rate_rps(self) -> float:
        """The simulator's agreed rate when verified, else Λ."""
        return self.verification[-1].arrival_rate_rps if self.verification else self.max_arrival_rate_rps

    @property
    def prefill_gpus(self) -> int:
        return self.prefill.gpus

    @property
    def decode_gpus(self) -> int:
        return self.decode.gpus

    @property
    def gpus_idle(self) -> int:
        return self.gpus - self.prefill.gpus - self.decode.gpus  # G − P − D


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolsVerifyStep:
    """One simulation of the pools (planner/simulator_disagg.py) at a whole-deployment rate."""

    arrival_rate_rps: float
    ttft_s: float
    tpot_s: float
    e2e_s: float
    misses: tuple[str, ...]
    meets_slo: bool
    requests_simulated: int


def _priced(gpu: GpuSpec) -> GpuSpec:
    """The pools' MILP minimises cost; with one GPU type a unit price makes that the fewest GPUs
    (an unpriced GPU would make every pair free and the choice arbitrary)."""
    return replace(gpu, price_usd_per_hour_on_demand=1.0)


def _holds(plan: DisaggPlan | None, gpus: int) -> bool:
    return plan is not None and plan.gpus <= gpus


def pool_loads(
    plan: DisaggPlan | DisaggCapacity, workload: Workload, slo: Slo, *, link: KvLink, kv_bytes_per_token: float
) -> tuple[float, float]:
    """How full each pool of `plan` is against its share of `slo` at `workload` (the TTFT split
    `plan.ttft_prefill_fraction`), by the model plan_disagg sizes them with (planner/disagg.py), each pool
    with its N+1 spare lost (`serving_replicas`): prefill (W_q + S(p_q)) / (f·TTFT); decode the largest of
    TPOT_q / TPOT, (W_admit,q + t_transfer(p_q)) / ((1 − f)·TTFT) and, with an E2E target,
    (o_q − 1)·t_step(n̄) / (E2E − TTFT) (planner/plan_disagg.py's E2E bound); infinite where the pool is
    unstable. Above 1: missed."""
    q = slo.percentile / 100.0
    p, d = plan.prefill, plan.decode
    ttft = slo.ttft_s if slo.ttft_s is not None else math.inf
    f = plan.ttft_prefill_fraction
    prompt_q = workload.prompt_tokens.quantile(q)
    try:
        pq = prefill_queue(PrefillPool(step_model=p.step_model, replicas=p.serving_replicas, tp=p.tp), workload, q)
        prefill = (pq.wait_q_s + prefill_s(p.step_model, prompt_q)) / (f * ttft)  # (W_q + S(p_q)) / (f · TTFT)
    except UnstableLoadError:
        prefill = math.inf
    links = min(p.tp, d.tp)
    transfer_mean = kv_transfer_s(
        prompt_tokens=workload.prompt_tokens.mean, kv_bytes_per_token=kv_bytes_per_token, link=link, gpus=links
    )
    transfer_q = kv_transfer_s(prompt_tokens=prompt_q, kv_bytes_per_token=kv_bytes_per_token, link=link, gpus=links)
    pool = DecodePool(
        step_model=d.step_model,
        replicas=d.serving_replicas,
        batch_limit=d.batch_limit or 1,
        kv_capacity_tokens=d.kv_capacity_tokens,
        tp=d.tp,
    )
    try:
        occ = decode_occupancy(pool, workload, transfer_mean, q)
        tpot = occ.step_q_s / slo.tpot_s if slo.tpot_s is not None else 0.0  # TPOT_q / TPOT
        admit = (occ.admission_wait_q_s + transfer_q) / ((1.0 - f) * ttft)  # (W_admit,q + t_transfer(p_q)) / ((1 − f) · TTFT)
        decode = max(tpot, admit, _e2e_load(occ.step_s, workload, slo, q))
    except UnstableLoadError:
        decode = math.inf
    return prefill, decode


def _e2e_load(step_s: float, workload: Workload, slo: Slo, q: float) -> float:
    """(o_q − 1)·t_step(n̄) / (E2E − TTFT): planner/plan_disagg.py's E2E bound on a decode pool as a load (0 without
    an E2E target; infinite when the TTFT target leaves the E2E target nothing)."""
    if slo.e2e_s is None:
        return 0.0
    steps_q = max(workload.output_tokens.quantile(q) - 1.0, 0.0)  # decode steps after a q-quantile output's first token
    left_s = slo.e2e_s - (slo.ttft_s or 0.0)  # E2E left after the TTFT target
    return steps_q * step_s / left_s if left_s > 0 else math.inf  # (o_q − 1)·t_step(n̄) / (E2E − TTFT)


def pool_misses(
    plan: DisaggPlan | DisaggCapacity, workload: Workload, slo: Slo, *, link: KvLink, kv_bytes_per_token: float
) -> tuple[str, ...]:
    """The pools of `plan` that do not sustain `workload` within their share of `slo` (`pool_loads` above 1)."""
    loads = pool_loads(plan, workload, slo, link=link, kv_bytes_per_token=kv_bytes_per_token)
    return tuple(role for role, load in zip(("prefill", "decode"), loads, strict=True) if load > 1.0)


def max_capacity_disaggregated(
    *,
    gpu: GpuSpec,
    gpus: int,
    model: ModelSpec,
    precisions: Sequence[Precision],
    tps: Sequence[int],
    workload: Workload,
    slo: Slo,
    link: KvLink,
    constraints: PlanConstraints | None = None,
) -> DisaggCapacity:
    """Λ of the module docstring within `constraints` (N+1, min_replicas and pins, as plan_disaggregated takes
    them). Raises InfeasiblePlanError when no pair of pools within `gpus` meets the SLOs even at one request an
    hour, PlannerInputError without a TTFT target or with fewer than two GPUs (two pools need one GPU each at
    least), UnsupportedConfigurationError for what plan_disaggregated refuses (`pool_refusals`)."""
    constraints = PlanConstraints() if constraints is None else constraints
    if refusals := pool_refusals(constraints):
        raise UnsupportedConfigurationError("separate prefill and decode pools do not take " + "; ".join(refusals))
    if gpus < 2:
        raise PlannerInputError(f"separate prefill and decode pools need at least 2 GPUs, got {gpus}", constraint="gpus")
    priced = _priced(gpu)
    usable = tuple(t for t in tps if t < gpus)  # each pool leaves at least one GPU to the other
    if not usable:
        raise PlannerInputError(f"no tensor-parallel degree leaves room for two pools on {gpus} GPUs", constraint="tp")
    pinned_tp = None if constraints.pin is None else constraints.pin.tp
    if pinned_tp is not None and pinned_tp not in usable:
        raise PlannerInputError(
            f"pinned tp {pinned_tp} is not a degree that leaves room for two pools on {gpus} GPUs "
            f"({', '.join(str(t) for t in usable)} do)",
            constraint="pin.tp",
        )
    evaluated = 0

    def cheapest(rate: float) -> DisaggPlan | None:
        nonlocal evaluated
        evaluated += 1
        try:
            return plan_disaggregated(
                gpus=[priced],
                model=model,
                precisions=precisions,
                tps=usable,
                workload=workload.at_rate(rate),
                slo=slo,
                link=link,
                verify=False,
                constraints=constraints,
            )
        except (InfeasiblePlanError, UnstableLoadError):
            return None

    low, high = START_RATE_RPS, START_RATE_RPS
    low_plan = cheapest(low)
    if _holds(low_plan, gpus):
        for _ in range(MAX_DOUBLINGS):
            high = 2.0 * low
            high_plan = cheapest(high)
            if not _holds(high_plan, gpus):
                break
            low, low_plan = high, high_plan
        else:
            raise InfeasiblePlanError(f"the pools' capacity search did not bracket the rate below {high:.3g} req/s (planner bug)")
    else:
        while not _holds(low_plan, gpus):
            high = low
            low = low / 2.0
            if low < MIN_RATE_RPS:
                raise InfeasiblePlanError(
                    f"no prefill and decode pools within {gpus} × {gpu.slug} meet the SLOs even at one request an hour",
                    constraint="gpus",
                )
            low_plan = cheapest(low)
    while high / low > 1.0 + RATE_TOLERANCE:
        middle = (low * high) ** 0.5  # geometric: the bracket's ratio halves in log
        middle_plan = cheapest(middle)
        if _holds(middle_plan, gpus):
            low, low_plan = middle, middle_plan
        else:
            high = middle
    assert low_plan is not None, "the bracket's lower end always holds a plan (_holds)"
    # the link the pools' planner chose for them (one node's scale-up link or `link`), as their prediction used
    loads = pool_loads(low_plan, workload.at_rate(high), slo, link=low_plan.link, kv_bytes_per_token=low_plan.kv_bytes_per_token)
    # both past their share: both bind; else the fuller one (it is the one past its share, or, should the
    # planner find no pair at the upper end although these pools hold, the one closer to it)
    binding = "both" if min(loads) > 1.0 else ("prefill" if loads[0] >= loads[1] else "decode")
    return DisaggCapacity(
        max_arrival_rate_rps=low,
        unsustained_rate_rps=high,
        gpus=gpus,
        prefill=low_plan.prefill,
        decode=low_plan.decode,
        ttft_prefill_fraction=low_plan.ttft_prefill_fraction,
        binding=binding,
        prediction=low_plan.prediction,
        link=low_plan.link,
        kv_bytes_per_token=low_plan.kv_bytes_per_token,
        plans_evaluated=evaluated,
    )


def verify_capacity(
    found: DisaggCapacity, workload: Workload, slo: Slo, *, requests: int = VERIFY_REQUESTS, seed: int = 0
) -> tuple[PoolsVerifyStep, ...]:
    """Simulate the pools at Λ; on a miss lower the rate by the aggregated capacity's step (÷ 1.10), at
    most MAX_VERIFY_ADJUSTMENTS times (planner/capacity.py `_verified`, the same policy). The last
    step is the agreed rate; InfeasiblePlanError when the simulator never agrees."""
    p, d = found.prefill, found.decode
    # with N+1 each pool is simulated with its spare lost, as plan_disagg verifies its plans
    prefill_pool = PrefillPool(step_model=p.step_model, replicas=p.serving_replicas, tp=p.tp)
    decode_pool = DecodePool(
        step_model=d.step_model,
        replicas=d.serving_replicas,
        batch_limit=d.batch_limit or 1,
        kv_capacity_tokens=d.kv_capacity_tokens,
        tp=d.tp,
    )
    targets = {"ttft": slo.ttft_s, "tpot": slo.tpot_s, "e2e": slo.e2e_s}
    steps: list[PoolsVerifyStep] = []
    for adjustment in range(MAX_VERIFY_ADJUSTMENTS + 1):
        rate = found.max_arrival_rate_rps / VERIFY_CAPACITY_STEP**adjustment
        simulated = simulate_disagg(
            prefill_pool,
            decode_pool,
            workload.at_rate(rate),
            link=found.link,
            kv_bytes_per_token=found.kv_bytes_per_token,
            prefill_token_budget=PREFILL_TOKEN_BUDGET,
            requests=requests,
            seed=seed,
        ).percentile(slo.percentile)
        at = dict(zip(("ttft", "tpot", "e2e"), simulated, strict=True))
        misses = tuple(m for m, target in targets.items() if target is not None and at[m] > target)
        steps.append(
            PoolsVerifyStep(
                arrival_rate_rps=rate,
                ttft_s=at["ttft"],
                tpot_s=at["tpot"],
                e2e_s=at["e2e"],
                misses=misses,
                meets_slo=not misses,
                requests_simulated=requests,
            )
        )
        if not misses:
            return tuple(steps)
    last = steps[-1]
    raise InfeasiblePlanError(
        f"the simulator finds the SLOs missed ({', '.join(last.misses)}) by the pools {p.replicas}P{d.replicas}D even at "
        f"{last.arrival_rate_rps:.4g} req/s, {len(steps) - 1} steps of 10 % below the queueing model's "
        f"{found.max_arrival_rate_rps:.4g} req/s",
        constraint="verification",
        tried_rates_rps=[s.arrival_rate_rps for s in steps],
    )
