"""Analytic model of one continuous-batching replica: occupancy, saturation, waiting and latency percentiles.

It predicts p50/p99 (any percentile) of TTFT, TPOT and E2E for the serving semantics of
docs/design.md ("Reference serving semantics") in a few milliseconds of NumPy, so the optimizer can
call `max_rps_at_slo` for many candidates (timings in docs/queueing-fidelity.md). The discrete-event simulator
(`planner/simulator.py`) is its check; `docs/queueing-fidelity.md` holds the comparison.

How the model is built
----------------------
1. *Slots.* A replica runs at most ``c = min(batch_limit, ⌊KV capacity / E[prompt + output]⌋)``
   sequences (a request reserves KV for prompt + output at admission). Each admitted request
   holds its slot for ``steps = prefill steps + output − 1`` steps: the step that finishes the
   prompt emits the first token, then one decode step per further token.
2. *Step time.* A step with ``n`` running sequences decodes ``n`` tokens and reads their KV
   (mean context length-biased over decode steps: E[p] + E[o(o−1)/2]/E[o−1]); it also prefills the
   prompts that arrived during the previous step. Arrivals per step are Poisson with mean
   ``m = λ·T̄``; without chunking ``k`` arrivals add ``k·E[p]`` prefill tokens to one step;
   with a chunk budget ``C`` a step carries at most ``C − n`` prefill tokens and the excess
   spills into further full-budget steps. ``T̄(n)`` is the mean over that mixture, evaluated
   with `StepModel`'s formula (the same coefficients the simulator uses). A speculative step
   model verifies k + 1 tokens per decoding sequence (`StepModel.verify_step_s`, the budget
   counting them) and a request's decode takes (o − 1)/E such steps, its TPOT the step over E:
   every sequence is taken to advance E tokens a step (docs/design.md, "Speculative decoding").
3. *Occupancy — why not plain Erlang C.* The slot pool is a c-server queue, but its servers are
   coupled: a step that carries a prompt stalls *every* running sequence, and a step gets slower
   as the batch grows. So a burst of arrivals lengthens every life in progress, which keeps more
   requests in the batch, which admits the next burst into a slower batch. Erlang C (independent
   servers at a fixed rate) gives the Poisson occupancy of M/G/∞ below c and badly underestimates
   how often the batch fills (measured: 0.2 % against the simulator's 8.7 % at ρ = 0.85 on
   Llama-3.1-8B/A100, batch 64). Each arrival's prefill stall S holds every running request back,
   keeping Poisson(λS) more arrivals in the batch (θ_pf = λ·E[S], the prefill feedback): the arrivals
   form Galton–Watson clusters whose counts have Var/mean D_cluster = (1 + θ_pf²·cv²(S))/(1 − θ_pf)²
   (cv²(S) = the prompts' cv², prefill time ∝ tokens); one more running sequence lengthens every step
   by dT̄/dn (θ_b = λ·steps·dT̄/dn), which amplifies a fluctuation by 1/(1 − θ_b); and the excess over
   Poisson counts as far as the lives of requests held together overlap, κ = E[min(L₁, L₂)]/E[L]
   (M^X/G/∞). So D = Var(N)/E[N] = 1 + (D_cluster/(1 − θ_b)² − 1)·κ (planner/queueing_kernels.py
   `occupancy_dispersion`, chosen against the simulator over bench/plan_corpus.py's plans); the occupancy is a
   negative binomial with that dispersion below c (Poisson when D = 1), and beyond c the queue of
   a full batch drains at the saturation rate (geometric tail with ratio ρ, as in Erlang C). The
   step time at occupancy n uses the arrival intensity of the burst that goes with it.
4. *Little's law and the fixed point.* Occupancy and step time depend on each other. The
   distribution's mean μ is the unknown: completions per second E[min(N, c)/(steps·T̄(N))] = λ,
   solved by `scipy.optimize.brentq` within [0, 4c] (a root exists iff ρ < 1), bracketed around
   Little's-law guess L = λ·steps·T̄(L) with the flat step time. Then L = E[min(N, c)],
   W = L/λ (time in service): L = λ·W holds by construction and is what the detail reports.
5. *Saturation.* The largest sustainable rate fills every slot: ``c / (steps·T̄(c))`` (the
   prefill work per request amortised over the full batch's steps, c/steps admissions per step);
   with chunking also the prefill budget ``(C − c) / (E[p]·t_full_chunk_step)``. ρ = λ / saturation.
6. *Waiting for a slot.* An arrival waits iff it finds N ≥ c (Poisson arrivals see time averages);
   the wait is exponential with mean (c_a² + c_d²)/2 / (saturation − λ) — Erlang C's conditional
   wait with Allen–Cunneen's variability factor, where departures from a full batch are the
   superposition of c slots' renewal streams, c_d² = 1 + (c_s² − 1)/c (Poisson as c grows).
7. *Latency percentiles.* TTFT = slot wait + the residual of the step in progress (length-biased
   over step types at the mean occupancy, interpolated between the two occupancy-grid rows around it
   at a common uniform; a prompt-carrying step's prompt size-biased) + the prefill (one step carrying
   the prompt and the prompts that arrived during the same step, their tokens a sum of prompts; with
   chunking ⌈p/(C−n)⌉ budget steps after a wait for the budget, whose last step also carries the
   prompts that arrived from the start of the step in progress until it starts, up to the budget).
   The mean step carrying k prompts is averaged over the sum of k prompt lengths (the step time is
   convex in the tokens; at k·E[p] it undercounts the stall of mixed lengths). The budget wait is M/G/1's: busy with probability ρ_budget —
   exactly when the step in progress carries prefill, so the two share one uniform (drawn apart
   they counted one stall twice: +6–20 % on TTFT p99 with fixed prompts) — and, given busy, a gamma
   matched to the conditional wait's first two moments (Pollaczek–Khinchine and Takács), so
   fixed prompts get a near-uniform residual and long-tailed ones a heavier tail than an
   exponential's; a queued prompt waits out the later of the budget wait and the step in progress
   (the budget frees at a step boundary). Without a budget the prefill is the same kind of
   server (a prompt's work is the time it adds to its step, λ·E[S] = θ_pf), but a queued prompt goes
   into the next step with those ahead of it, so its step-mates are only the prompts behind it
   (without that wait, unchunked TTFT p99 of the corpus plans was 12–32 % low where their
   16,384-token-budget twins were within 10 %). With a budget, leaving out the prompts behind it put TTFT p99 of long-tailed prompts with a
   large budget 10–18 % low against the simulator. TPOT = decode step at the life-average
   occupancy (the arrival's view shrunk towards the mean by √(2/3), the variance ratio of a window
   average of M/G/∞ occupancy over one service time) + the prefill interference of the arrivals
   during the life, a gamma-mixed Poisson count with Var/mean 1/(1 − θ_pf)² whose burst level is
   comonotone with the occupancy found, spread over o − 1 tokens. The count's mean scales with the
   life's own decode step (arrivals are Poisson in *time*, so a life in a fuller, slower batch lets in
   proportionally more prompts, which slow it further: an occupancy fluctuation reaches TPOT amplified
   by about 1/(1 − θ_pf), as in a busy period started by the decode work). Taking the count at the
   mean step for every life put TPOT p99 of the corpus plans a median 11.6 % low (bench/plan_corpus.py). E2E = TTFT + (o − 1)·TPOT.
   Percentiles of these sums are taken over a fixed, scrambled Sobol sample of 8,192 points (one
   dimension per random ingredient, the same points on every call): deterministic, common random
   numbers across rates (so p99 does not fall as the rate rises).
8. *Where it holds.* `Prediction.reliable` is False outside the region the fidelity study
   validated (Poisson arrivals per replica, ρ ≤ 0.85, P(wait) ≤ 0.1 %, D_cluster/(1 − θ_b)² ≤ 1.6); `fidelity_note` says why, and the service runs
   the simulator there. docs/queueing-fidelity.md has the numbers.

Routers: random split thins the arrival stream (per-replica c_a² = c_a²/r + (r−1)/r, Poisson
stays Poisson); round-robin sends every r-th arrival to a replica, so c_a² = c_a²/r (smoother);
join-shortest-queue is treated like round-robin (it balances at least as well; conservative).

Unstable load (ρ ≥ 1) is an answer: `Prediction(unstable=True)` with the saturation rate and no
percentiles. The closed-form helpers in `planner/closed_forms.py` raise `UnstableLoadError`.

The model is split by responsibility: planner/queueing_sample.py (the fixed Sobol sample and the
length samples), planner/queueing_replica.py (the rate-independent replica: slots, step-time
tables, saturation), planner/queueing_occupancy.py (the occupancy fixed point),
planner/queueing_latency.py (the operating point, the latency sampler, percentile bounds) and
planner/queueing_kernels.py (their compiled inner loops). This module is the public surface:
`predict`, `screen`, `slo_excess`, `rho_curve`, `max_rps_at_slo`, `saturation_rps` and the records
they answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import numpy as np
from scipy.optimize import brentq

from planner import queueing_kernels
from planner.errors import ConvergenceError, InfeasiblePlanError, PlannerInputError
from planner.plan_result import SlotsLimitedBy
from planner.queueing_latency import (
    PercentileBounds,
    SloExcess,
    _Latencies,
    _operating_point,
    _OperatingPoint,
    _percentile_bounds,
    _percentiles,
    _sample,
)
from planner.queueing_replica import _Replica, _replica, step_seconds
from planner.queueing_sample import _ALL_POINTS, _PROMPT_GRID_U, _SCREEN_HEAD, _SCREEN_REST, length_quantiles
from planner.step_model import StepModel
from planner.units import MS_PER_S
from planner.workload import FixedLength, Serving, Slo, Workload

__all__ = [
    "CURVE_UTILISATIONS",
    "FORMULA",
    "RELIABLE_MAX_PROMPT_CV2",
    "RELIABLE_MAX_SPLIT_FRACTION",
    "RELIABLE_MAX_UTILISATION",
    "RELIABLE_MAX_WAIT_PROBABILITY",
    "_PROMPT_GRID_U",  # planner/candidates.py's prompt grid: the same mid-quantiles as the slot model's
    "Latency",
    "LittlesLawTerms",
    "PercentileBounds",
    "Prediction",
    "QueueingDetail",
    "RhoPoint",
    "SloExcess",
    "length_quantiles",
    "max_rps_at_slo",
    "predict",
    "rho_curve",
    "saturation_rps",
    "screen",
    "slo_excess",
    "step_seconds",
    "warm_up",
]

#: Relative tolerance of the root finds (rates and occupancies); 1e-4 is far inside the model error.
_RTOL = 1e-4

FORMULA = (
    "negative-binomial occupancy (dispersion 1+((1+theta_pf^2*cv^2)/(1-theta_pf)^2/(1-theta_b)^2-1)*overlap) "
    "with Erlang-C-style queue beyond c slots; "
    "wait exponential with mean (ca^2+cd^2)/2/(saturation-lambda) (Allen-Cunneen); "
    "fixed point E[min(N,c)/(steps*T(N))] = lambda, L = lambda*W (Little's law)"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Latency:
    """Percentiles of one latency metric, seconds."""

    p50_s: float
    p90_s: float
    p99_s: float
    percentile: float
    at_percentile_s: float


@dataclass(frozen=True, slots=True, kw_only=True)
class RhoPoint:
    """One point of the ρ-vs-latency curve (latencies at the prediction's percentile; None when unstable)."""

    utilisation: float
    arrival_rate_rps: float
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None


class LittlesLawTerms(NamedTuple):
    """Little's law's three numbers for one replica, L = λ·W (a tuple, so it unpacks as (L, λ, W))."""

    occupancy: float  # L: mean number of requests holding a slot
    arrival_rate_rps: float  # λ per replica
    service_s: float  # W: mean time a request holds its slot


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueingDetail:
    """The numbers behind a prediction, for the plan's justification."""

    arrival_rate_rps: float  # λ per replica
    arrival_cv: float  # per replica, after the router
    service_s: float  # W: mean time a request holds its slot (admission → last token)
    steps_per_request: float
    mean_step_s: float
    utilisation: float  # ρ = λ / saturation
    saturation_rps: float
    slots: int  # c
    slots_limited_by: SlotsLimitedBy
    mean_occupancy: float  # L (running sequences)
    littles_law: LittlesLawTerms  # (L, λ, W) with L = λ·W
    wait_probability: float
    mean_wait_s: float
    wait_at_percentile_s: float
    occupancy_dispersion: float  # Var/mean of the number running (1 = Poisson)
    prefill_feedback: float  # θ_pf: fraction of time the batch spends on prefill beyond its decode steps
    formula: str = FORMULA
    rho_curve: tuple[RhoPoint, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Prediction:
    """Predicted latencies of one replica at one per-replica rate.

    `reliable` is False where the fidelity study (docs/queueing-fidelity.md) found the analytic
    p99s off by more than 10 % against the simulator; `fidelity_note` says why, and the service
    runs the simulator instead.
    """

    arrival_rate_rps: float
    utilisation: float
    saturation_rps: float
    unstable: bool
    percentile: float
    ttft: Latency | None
    tpot: Latency | None
    e2e: Latency | None
    throughput_rps: float
    output_tokens_per_s: float
    reliable: bool
    fidelity_note: str | None
    queueing: QueueingDetail | None = field(default=None)


def saturation_rps(step_model: StepModel, workload: Workload, serving: Serving, *, kv_capacity_tokens: float) -> float:
    """Largest sustainable per-replica arrival rate for the request mix (all slots busy)."""
    rep = _replica(step_model, workload, serving, kv_capacity_tokens)
    return rep.saturation_rps


def _latency(samples: np.ndarray, percentile: float) -> Latency:
    p50, p90, p99, pq = _percentiles(samples, (50.0, 90.0, 99.0, percentile))
    return Latency(p50_s=float(p50), p90_s=float(p90), p99_s=float(p99), percentile=percentile, at_percentile_s=float(pq))


def _unstable(rep: _Replica, lam: float, saturation: float, percentile: float) -> Prediction:
    return Prediction(
        arrival_rate_rps=lam,
        utilisation=lam / saturation if saturation > 0 else math.inf,
        saturation_rps=saturation,
        unstable=True,
        percentile=percentile,
        ttft=None,
        tpot=None,
        e2e=None,
        throughput_rps=saturation,
        output_tokens_per_s=saturation * rep.output_mean,
        reliable=True,
        fidelity_note=None,
    )


#: Where the analytic p99s were found within 10 % of the simulator (docs/queueing-fidelity.md: the
#: plans the planner makes, bench/plan_corpus.py, and the grid of bench/queueing_fidelity.py):
#: Poisson arrivals per replica, ρ ≤ 0.85, the batch rarely full (an arrival waits for a slot with
#: probability ≤ 0.1 %), prompts that fit one step (with a chunk budget, at most 1 % of prompts are
#: split over several steps at the mean occupancy) and prompt lengths whose cv² is at most 1.5.
#: Outside: a split prompt's TTFT depends on how the chunks of several prompts interleave (the corpus
#: plans with a 2,048-token budget and 1,000–6,000-token prompts were 12–18 % low), and a mix with a few
#: prompts many times the mean (cv² 2.7 in the corpus) sets TPOT p99 of short lives by whether one of
#: them lands, which the lognormal sum of the stalls misses (16–28 % low); the service simulates there.
RELIABLE_MAX_WAIT_PROBABILITY = 1e-3
RELIABLE_MAX_SPLIT_FRACTION = 0.01
RELIABLE_MAX_PROMPT_CV2 = 1.5
#: The issue's target applies up to this utilisation; above it the analytic p99s are never trusted.
RELIABLE_MAX_UTILISATION = 0.85


def _burstiness(theta_pf: float, theta_b: float, prompt_cv2: float) -> float:
    """The occupancy's Var/mean before the lives' overlap discounts it, D_cluster/(1 − θ_b)² (reported
    in the fidelity notes; the reliable region no longer bounds it: the corpus plans were within 10 %
    up to 8.4)."""
    return float(queueing_kernels.prefill_cluster_dispersion(theta_pf, prompt_cv2)) / (1.0 - theta_b) ** 2


def _split_fraction(rep: _Replica, occupancy: float) -> float:
    """The share of prompts longer than one step's chunk budget at `occupancy` running (0 without a budget)."""
    if rep.chunk_tokens is None:
        return 0.0
    budget = float(rep.budget(np.array(occupancy)))
    return float(np.count_nonzero(rep.prompts > budget)) / rep.prompts.size


def _fidelity(rho: float, p_wait: float, split_fraction: float, prompt_cv2: float, arrival_cv2: float) -> tuple[bool, str | None]:
    """Whether the prediction lies where the fidelity study found it within 10 %, and why not."""
    reasons = []
    if abs(arrival_cv2 - 1.0) > 1e-9:
        reasons.append(f"per-replica arrivals with c_a = {math.sqrt(arrival_cv2):.2f} (only Poisson arrivals were validated)")
    if rho > RELIABLE_MAX_UTILISATION:
        reasons.append(f"utilisation {rho:.2f} > {RELIABLE_MAX_UTILISATION}")
    if p_wait > RELIABLE_MAX_WAIT_PROBABILITY:
        reasons.append(f"the batch is full for {p_wait:.2%} of arrivals (> {RELIABLE_MAX_WAIT_PROBABILITY:.1%})")
    if split_fraction > RELIABLE_MAX_SPLIT_FRACTION:
        reasons.append(
            f"{split_fraction:.0%} of prompts are split over several chunked steps (> {RELIABLE_MAX_SPLIT_FRACTION:.0%})"
        )
    if prompt_cv2 > RELIABLE_MAX_PROMPT_CV2:
        reasons.append(f"prompt lengths with cv² {prompt_cv2:.2f} > {RELIABLE_MAX_PROMPT_CV2} (a few very long prompts)")
    if not reasons:
        return True, None
    return False, "outside the analytic model's validated region: " + "; ".join(reasons) + " — use the simulator"


def _prediction(rep: _Replica, op: _OperatingPoint, sample: _Latencies, percentile: float) -> Prediction:
    """The prediction from the whole sample's latencies at operating point `op`."""
    lam, rho, occ = op.lam, op.rho, op.occ
    reliable, note = _fidelity(rho, float(occ.p_wait), _split_fraction(rep, op.occupancy), rep.prompt_cv2, rep.arrival_cv2)
    has_tpot = rep.has_tpot
    detail = QueueingDetail(
        arrival_rate_rps=lam,
        arrival_cv=math.sqrt(rep.arrival_cv2),
        service_s=op.service_s,
        steps_per_request=op.steps,
        mean_step_s=op.service_s / op.steps,
        utilisation=rho,
        saturation_rps=rep.saturation_rps,
        slots=rep.slots,
        slots_limited_by=rep.slots_limited_by,
        mean_occupancy=op.occupancy,
        littles_law=LittlesLawTerms(occupancy=op.occupancy, arrival_rate_rps=lam, service_s=op.service_s),
        wait_probability=float(occ.p_wait),
        mean_wait_s=float(occ.p_wait * op.conditional_wait_s),
        wait_at_percentile_s=float(_percentiles(sample.wait, (percentile,))[0]),
        occupancy_dispersion=occ.dispersion,
        prefill_feedback=occ.feedback_prefill,
    )
    return Prediction(
        arrival_rate_rps=lam,
        utilisation=rho,
        saturation_rps=rep.saturation_rps,
        unstable=False,
        percentile=percentile,
        ttft=_latency(sample.ttft, percentile),
        tpot=_latency(sample.tpot[has_tpot], percentile) if rep.tpot_requests else None,
        e2e=_latency(sample.e2e, percentile),
        throughput_rps=lam,
        output_tokens_per_s=lam * rep.output_mean,
        reliable=reliable,
        fidelity_note=note,
        queueing=detail,
    )


def _predict(rep: _Replica, lam: float, percentile: float) -> Prediction:
    op = _operating_point(rep, lam)
    if op is None:
        return _unstable(rep, lam, min(rep.saturation_rps, lam), percentile)
    return _prediction(rep, op, _sample(rep, op, _ALL_POINTS), percentile)


def screen(
    step_model: StepModel, workload: Workload, serving: Serving, slo: Slo, *, kv_capacity_tokens: float
) -> Prediction | PercentileBounds:
    """`predict` at `slo.percentile`, unless the first eighth of the sample already proves a target
    of `slo` missed: then the lower bounds on the percentiles that prove it.

    Exact, not a heuristic: bounds only where `predict` gives a percentile above a target, and
    otherwise the very prediction `predict` makes. A search that only needs "does this rate miss?"
    saves ~7/8 of the per-point arithmetic on rates that miss by a clear margin."""
    rep = _replica(step_model, workload, serving, kv_capacity_tokens)
    lam = workload.arrival_rate_rps / serving.replicas
    op = _operating_point(rep, lam)
    if op is None:
        return _unstable(rep, lam, min(rep.saturation_rps, lam), slo.percentile)
    head = _sample(rep, op, _SCREEN_HEAD)
    bounds = _percentile_bounds(rep, head, slo.percentile)
    if bounds.prove_missed(slo):
        return bounds
    rest = _sample(rep, op, _SCREEN_REST)
    whole = _Latencies.joined(head, rest)
    return _prediction(rep, op, whole, slo.percentile)


def slo_excess(
    step_model: StepModel,
    workload: Workload,
    serving: Serving,
    slo: Slo,
    *,
    kv_capacity_tokens: float,
    screen_first: bool = False,
) -> SloExcess:
    """max over the targets of `slo` of predicted/target − 1 at the workload's per-replica rate (≤ 0:
    every target met), the metric that sets it and its predicted value; (inf, "utilisation", inf)
    when unstable. The numbers `predict` gives, with only the percentiles the SLO names computed
    (a search that only compares with targets needs no p50/p90 and no queueing detail).

    With `screen_first`, a miss the first eighth of the sample proves (as `screen` does) answers
    a lower bound on the excess and on the predicted value instead."""
    rep = _replica(step_model, workload, serving, kv_capacity_tokens)
    op = _operating_point(rep, workload.arrival_rate_rps / serving.replicas)
    if op is None:
        return SloExcess(math.inf, "utilisation", math.inf)
    if screen_first:
        head = _sample(rep, op, _SCREEN_HEAD)
        bounds = _percentile_bounds(rep, head, slo.percentile)
        if bounds.prove_missed(slo):
            return bounds.excess(slo)
        rest = _sample(rep, op, _SCREEN_REST)
        whole = _Latencies.joined(head, rest)
    else:
        whole = _sample(rep, op, _ALL_POINTS)
    worst = SloExcess(-math.inf, "", 0.0)
    for metric, target in (("ttft", slo.ttft_s), ("tpot", slo.tpot_s), ("e2e", slo.e2e_s)):
        if target is None:
            continue
        if metric == "tpot":
            value = float(_percentiles(whole.tpot[rep.has_tpot], (slo.percentile,))[0]) if rep.tpot_requests else 0.0
        else:
            value = float(_percentiles(getattr(whole, metric), (slo.percentile,))[0])
        if value / target - 1.0 > worst.excess:
            worst = SloExcess(value / target - 1.0, metric, value)
    return worst


def warm_up() -> None:
    """Predict once on a small made-up configuration, unchunked and chunked, so the compiled kernels
    (planner/queueing_kernels.py) are loaded from Numba's cache, or compiled, before a request needs
    them: ~0.5 s from the cache, several seconds the first time on a machine. A process that plans
    (the service, the fleet table workers' fork server) calls it once at start."""
    sm = StepModel(
        dense_weight_bytes=1e9,
        kv_bytes_per_token=1e5,
        flops_per_token=2e9,
        attention_flops_per_context_token=1e5,
        memory_bandwidth_bytes_per_s=1e12,
        compute_flops_per_s=1e14,
    )
    workload = Workload(arrival_rate_rps=1.0, prompt_tokens=FixedLength(tokens=100), output_tokens=FixedLength(tokens=20))
    for chunk in (None, 256):
        serving = Serving(batch_limit=8, chunk_tokens=chunk)
        rate = 0.5 * saturation_rps(sm, workload, serving, kv_capacity_tokens=1e5)
        predict(sm, workload.at_rate(rate), serving, kv_capacity_tokens=1e5)
        screen(sm, workload.at_rate(rate), serving, Slo(ttft_s=1e-9), kv_capacity_tokens=1e5)


def predict(
    step_model: StepModel,
    workload: Workload,
    serving: Serving,
    *,
    kv_capacity_tokens: float,
    percentile: float = 99.0,
    curve: bool = False,
) -> Prediction:
    """Latency percentiles of one replica at the per-replica rate `workload.arrival_rate_rps / serving.replicas`.

    With `curve=True` the queueing detail carries the ρ-vs-latency curve around the operating point.
    """
    if not 0.0 < percentile < 100.0:
        raise PlannerInputError(f"percentile must be in (0, 100), got {percentile}")
    rep = _replica(step_model, workload, serving, kv_capacity_tokens)
    lam = workload.arrival_rate_rps / serving.replicas
    prediction = _predict(rep, lam, percentile)
    if curve and prediction.queueing is not None:
        points = _rho_curve(rep, prediction.saturation_rps, percentile, prediction.utilisation)
        prediction = replace(prediction, queueing=replace(prediction.queueing, rho_curve=points))
    return prediction


#: Utilisations at which the ρ-vs-latency curve is drawn (plus the operating point).
CURVE_UTILISATIONS: tuple[float, ...] = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.85, 0.9, 0.95, 0.98)


def _rho_curve(rep: _Replica, saturation: float, percentile: float, at: float | None) -> tuple[RhoPoint, ...]:
    rhos = sorted(set(CURVE_UTILISATIONS) | ({round(at, 6)} if at is not None and 0 < at < 1 else set()))
    points = []
    for rho in rhos:
        p = _predict(rep, rho * saturation, percentile)
        points.append(
            RhoPoint(
                utilisation=rho,
                arrival_rate_rps=rho * saturation,
                ttft_s=p.ttft.at_percentile_s if p.ttft else None,
                tpot_s=p.tpot.at_percentile_s if p.tpot else None,
                e2e_s=p.e2e.at_percentile_s if p.e2e else None,
            )
        )
    return tuple(points)


def rho_curve(
    step_model: StepModel,
    workload: Workload,
    serving: Serving,
    *,
    kv_capacity_tokens: float,
    percentile: float = 99.0,
) -> tuple[RhoPoint, ...]:
    """Latency at `percentile` against utilisation, at `CURVE_UTILISATIONS` and the workload's own ρ."""
    rep = _replica(step_model, workload, serving, kv_capacity_tokens)
    saturation = rep.saturation_rps
    if saturation <= 0:
        return ()
    lam = workload.arrival_rate_rps / serving.replicas
    return _rho_curve(rep, saturation, percentile, lam / saturation)


# --- the largest rate meeting the SLOs ------------------------------------------------------------


def _slo_excess(prediction: Prediction, slo: Slo) -> tuple[float, str]:
    """max over the SLO's targets of predicted/target − 1 (≤ 0 means every target is met)."""
    if prediction.unstable:
        return math.inf, "utilisation"
    worst, name = -math.inf, ""
    for metric, target in (("ttft", slo.ttft_s), ("tpot", slo.tpot_s), ("e2e", slo.e2e_s)):
        if target is None:
            continue
        latency: Latency | None = getattr(prediction, metric)
        value = 0.0 if latency is None else latency.at_percentile_s
        excess = value / target - 1.0
        if excess > worst:
            worst, name = excess, metric
    return worst, name


#: The rate at which "vanishing load" is probed, as a fraction of saturation.
_VANISHING_UTILISATION = 1e-6


def max_rps_at_slo(
    step_model: StepModel,
    workload: Workload,
    serving: Serving,
    slo: Slo,
    *,
    kv_capacity_tokens: float,
) -> float:
    """The largest per-replica arrival rate whose predicted latencies meet every target of `slo` at its percentile.

    Found by `brentq` on (0, saturation). If the SLOs hold right up to saturation (a TPOT-only
    target that the full batch still meets), the answer is the saturation rate itself; choosing a
    utilisation below it is the optimizer's business.

    Raises `InfeasiblePlanError` (extensions: `constraint`, `predicted_s`, `target_s`) when the
    SLO fails even at vanishing load — e.g. a TPOT target below the batch-1 decode step — so the
    optimizer can drop the candidate with the reason.
    """
    rep = _replica(step_model, workload, serving, kv_capacity_tokens)
    if rep.slots < 1:
        raise InfeasiblePlanError(
            "the KV cache cannot hold one request's prompt + output",
            constraint="kv_cache",
            kv_capacity_tokens=kv_capacity_tokens,
            request_tokens=rep.prompt_mean + rep.output_mean,
        )
    saturation = rep.saturation_rps
    pct = slo.percentile

    def excess(lam: float) -> float:
        return _slo_excess(_predict(rep, lam, pct), slo)[0]

    low = saturation * _VANISHING_UTILISATION
    at_low = _predict(rep, low, pct)
    low_excess, binding = _slo_excess(at_low, slo)
    if low_excess > 0:
        latency: Latency | None = getattr(at_low, binding)
        predicted = latency.at_percentile_s if latency is not None else math.nan
        target = getattr(slo, f"{binding}_s")
        raise InfeasiblePlanError(
            f"p{pct:g} {binding.upper()} is {predicted * MS_PER_S:.2f} ms even at vanishing load, above the "
            f"{target * MS_PER_S:.2f} ms target: no rate meets it on this configuration",
            constraint=binding,
            predicted_s=predicted,
            target_s=target,
        )
    high = saturation * (1.0 - 1e-9)
    if excess(high) <= 0:
        return high
    xtol = saturation * _RTOL
    try:
        rate = float(brentq(excess, low, high, xtol=xtol, rtol=_RTOL, maxiter=100))
    except (ValueError, RuntimeError) as exc:
        raise ConvergenceError(
            f"max_rps_at_slo root-find failed on ({low:.6g}, {high:.6g}) rps: {exc}", saturation_rps=saturation
        ) from exc
    # brentq lands within xtol of the sign change, on either side: step back onto the side that meets.
    for _ in range(8):
        if excess(rate) <= 0:
            return rate
        rate = max(low, rate - xtol)
    raise ConvergenceError(f"max_rps_at_slo: no met rate found just below {rate:.6g} rps", saturation_rps=saturation)
