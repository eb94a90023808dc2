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
   with `StepModel`'s formula (the same coefficients the simulator uses).
3. *Occupancy — why not plain Erlang C.* The slot pool is a c-server queue, but its servers are
   coupled: a step that carries a prompt stalls *every* running sequence, and a step gets slower
   as the batch grows. So a burst of arrivals lengthens every life in progress, which keeps more
   requests in the batch, which admits the next burst into a slower batch. Erlang C (independent
   servers at a fixed rate) gives the Poisson occupancy of M/G/∞ below c and badly underestimates
   how often the batch fills (measured: 0.2 % against the simulator's 8.7 % at ρ = 0.85 on
   Llama-3.1-8B/A100, batch 64). Linearising N = Poisson(λ·W(N)) with W growing by e per arrival
   during the life (θ_pf = λ·e, the prefill feedback) and by dT̄/dn per running sequence
   (θ_b = λ·steps·dT̄/dn) gives Var(N)/E[N] = D = 1 / ((1 − θ_b)(1 − θ_pf)²); the occupancy is a
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
   the prompt and the prompts that arrived during the same step; with chunking ⌈p/(C−n)⌉ budget
   steps after a wait for the budget, whose last step also carries the prompts that arrived
   behind this one, up to the budget). The budget wait is M/G/1's: busy with probability ρ_budget —
   exactly when the step in progress carries prefill, so the two share one uniform (drawn apart
   they counted one stall twice: +6–20 % on TTFT p99 with fixed prompts) — and, given busy, a gamma
   matched to the conditional wait's first two moments (Pollaczek–Khinchine and Takács), so
   fixed prompts get a near-uniform residual and long-tailed ones a heavier tail than an
   exponential's; a queued prompt waits out the later of the budget wait and the step in progress
   (the budget frees at a step boundary). Leaving out the prompts behind it put TTFT p99 of long-tailed prompts with a
   large budget 10–18 % low against the simulator. TPOT = decode step at the life-average
   occupancy (the arrival's view shrunk towards the mean by √(2/3), the variance ratio of a window
   average of M/G/∞ occupancy over one service time) + the prefill interference of the arrivals
   during the life, a gamma-mixed Poisson count with Var/mean 1/(1 − θ_pf)² whose burst level is
   comonotone with the occupancy found, spread over o − 1 tokens. E2E = TTFT + (o − 1)·TPOT.
   Percentiles of these sums are taken over a fixed, scrambled Sobol sample of 8,192 points (one
   dimension per random ingredient, the same points on every call): deterministic, common random
   numbers across rates (so p99 does not fall as the rate rises).
8. *Where it holds.* `Prediction.reliable` is False outside the region the fidelity study
   validated (Poisson arrivals per replica, ρ ≤ 0.85, P(wait) ≤ 0.1 %, D ≤ 1.6); `fidelity_note` says why, and the service runs
   the simulator there. docs/queueing-fidelity.md has the numbers.

Routers: random split thins the arrival stream (per-replica c_a² = c_a²/r + (r−1)/r, Poisson
stays Poisson); round-robin sends every r-th arrival to a replica, so c_a² = c_a²/r (smoother);
join-shortest-queue is treated like round-robin (it balances at least as well; conservative).

Unstable load (ρ ≥ 1) is an answer: `Prediction(unstable=True)` with the saturation rate and no
percentiles. The closed-form helpers in `planner/closed_forms.py` raise `UnstableLoadError`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace

import numpy as np
from scipy.optimize import brentq
from scipy.special import gammaln, ndtri
from scipy.stats import qmc

from planner import queueing_kernels
from planner.errors import ConvergenceError, InfeasiblePlanError, OccupancySaturatedError, PlannerInputError
from planner.step_model import StepModel
from planner.workload import FixedLength, HistogramLength, LengthDistribution, LognormalLength, Serving, Slo, Workload

#: Sobol sample size (2^13) for the percentiles of sums (≈ 82 points beyond the p99). Measured
#: against a 2^15-point sample: 2^12 points left TTFT p99 of long-tailed prompts up to 4 % off
#: (Mixtral-8x7B on 8 L40S, no chunking, ρ 0.5: −9.0 % against the simulator vs −5.1 % with 2^15);
#: 2^13 brings that to ≤ 1.8 % for ~40 % more CPU per prediction (docs/queueing-fidelity.md, speed).
_SAMPLE_LOG2 = 13
#: Seed of the scrambled Sobol points, fixed so every call sees the same sample.
_SAMPLE_SEED = 20_261_129
_DIMENSIONS = 9
_U = np.clip(qmc.Sobol(d=_DIMENSIONS, scramble=True, seed=_SAMPLE_SEED).random_base2(_SAMPLE_LOG2), 1e-9, 1 - 1e-9)
_U_WAIT, _U_PROMPT, _U_OUTPUT, _U_LIFE_ARRIVALS, _U_INTERFERENCE, _U_RESIDUAL, _U_STEPMATES, _U_BUDGET, _U_STEP_IN_PROGRESS = _U.T
#: Size of the sample's first slice, which `screen` evaluates before the rest: 1/8 of the points
#: (a scrambled Sobol prefix of 2^k points is itself balanced). A target is proven missed when more
#: of these points exceed it than the whole sample may hold above its percentile (83 for p99).
_SCREEN_POINTS = 1 << (_SAMPLE_LOG2 - 3)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class _Points:
    """One slice of the Sobol sample: its uniforms and their rate-independent transforms, computed
    once (the optimizer evaluates the sample thousands of times). Every per-point quantity of a
    prediction depends on its own point only, so the slices' results put together are the whole
    sample's, bit for bit."""

    part: slice
    u_wait: np.ndarray
    z_wait: np.ndarray
    log_wait_tail: np.ndarray  # log(1 − u): the exponential wait is −log((1 − u)/P(wait))
    z_life_arrivals: np.ndarray
    u_life_arrivals: np.ndarray
    z_interference: np.ndarray
    u_residual: np.ndarray
    u_stepmates: np.ndarray
    z_stepmates: np.ndarray
    u_step_in_progress: np.ndarray
    #: The wait and step-in-progress uniforms in ascending order (and where each goes back):
    #: `np.searchsorted` of a small table at sorted points walks the table once instead of
    #: bisecting it per point (~2× faster, the same indices).
    wait_sorted: np.ndarray
    wait_order: np.ndarray
    step_in_progress_sorted: np.ndarray
    step_in_progress_order: np.ndarray

    @property
    def size(self) -> int:
        return self.u_wait.size


def _points(part: slice) -> _Points:
    u_wait, u_life, u_interference, u_stepmates, u_sip = (
        np.ascontiguousarray(u[part]) for u in (_U_WAIT, _U_LIFE_ARRIVALS, _U_INTERFERENCE, _U_STEPMATES, _U_STEP_IN_PROGRESS)
    )
    wait_order, sip_order = np.argsort(u_wait), np.argsort(u_sip)
    return _Points(
        part=part,
        u_wait=u_wait,
        z_wait=ndtri(u_wait),
        log_wait_tail=np.log1p(-u_wait),
        u_life_arrivals=u_life,
        z_life_arrivals=ndtri(u_life),
        z_interference=ndtri(u_interference),
        u_residual=np.ascontiguousarray(_U_RESIDUAL[part]),
        u_stepmates=u_stepmates,
        z_stepmates=ndtri(u_stepmates),
        u_step_in_progress=u_sip,
        wait_sorted=u_wait[wait_order],
        wait_order=wait_order,
        step_in_progress_sorted=u_sip[sip_order],
        step_in_progress_order=sip_order,
    )


_ALL_POINTS = _points(slice(0, _U.shape[0]))
_SCREEN_HEAD, _SCREEN_REST = _points(slice(0, _SCREEN_POINTS)), _points(slice(_SCREEN_POINTS, _U.shape[0]))
#: Mid-quantile grid of prompt lengths for averaging ⌈p / budget⌉ inside the slot model.
_PROMPT_GRID_U = (np.arange(32) + 0.5) / 32
#: Variance ratio of a one-service-time window average of M/G/∞ occupancy with deterministic
#: service (∫∫(1 − |t−s|/S) ds dt / S² = 2/3); the life-average occupancy is shrunk by its root.
_LIFE_AVERAGE_SHRINK = math.sqrt(2.0 / 3.0)
#: Relative tolerance of the root finds (rates and occupancies); 1e-4 is far inside the model error.
_RTOL = 1e-4

FORMULA = (
    "negative-binomial occupancy (dispersion 1/((1-theta_b)(1-theta_pf)^2)) with Erlang-C-style queue beyond c slots; "
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
    slots_limited_by: str  # "batch_limit" or "kv_cache"
    mean_occupancy: float  # L (running sequences)
    littles_law: tuple[float, float, float]  # (L, λ, W) with L = λ·W
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


# --- vectorised step time -----------------------------------------------------------------------


def step_seconds(sm: StepModel, new_tokens: np.ndarray, kv_tokens_read: np.ndarray, attended_tokens: np.ndarray) -> np.ndarray:
    """`StepModel.step_s` element-wise over arrays (same formula, same coefficients)."""
    new = np.asarray(new_tokens, dtype=float)
    weights = sm.dense_weight_bytes
    if sm.is_moe:
        # E·(1−(1−k/E)^n), the power as exp(n·log(1−k/E)): NumPy's float power is ~3× slower than exp
        touched = sm.experts * -np.expm1(new * math.log1p(-sm.experts_per_token / sm.experts))
        weights = weights + sm.moe_layers * touched * sm.expert_weight_bytes
    mem = (weights + kv_tokens_read * sm.kv_bytes_per_token) / sm.memory_bandwidth_bytes_per_s  # bytes / BW
    comp = (
        new * sm.flops_per_token + attended_tokens * sm.attention_flops_per_context_token
    ) / sm.compute_flops_per_s  # FLOPs / F
    comm = np.where(new > 0, new * sm.comm_s_per_token + sm.comm_latency_s, 0.0)  # bandwidth + latency, none for an empty step
    return np.maximum(mem, comp) + (1.0 - sm.memory_compute_overlap) * np.minimum(mem, comp) + comm + sm.step_overhead_s


# --- length distributions -------------------------------------------------------------------------


def length_quantiles(dist: LengthDistribution, u: np.ndarray) -> np.ndarray:
    """Inverse CDF of a length distribution at the uniforms `u`, integer tokens as the simulator samples them."""
    if isinstance(dist, FixedLength):
        return np.full(u.shape, float(dist.tokens))
    if isinstance(dist, LognormalLength):
        return np.maximum(1.0, np.rint(np.exp(dist.mu + dist.sigma * ndtri(u))))  # simulator rounds, min 1
    if isinstance(dist, HistogramLength):
        order = np.argsort(dist.tokens)
        values = np.asarray(dist.tokens, dtype=float)[order]
        cdf = np.cumsum(dist._p[order])
        return values[np.minimum(np.searchsorted(cdf, u), len(values) - 1)]
    raise PlannerInputError(f"unknown length distribution {type(dist).__name__}")


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class _PromptSample:
    """The Sobol-sample arrays of a replica that depend only on the prompt-length distribution (read-only, shared)."""

    prompts: np.ndarray  # p at `_U_PROMPT`
    grid: np.ndarray  # p at the mid-quantiles `_PROMPT_GRID_U` (for E[⌈p/budget⌉])
    size_biased: np.ndarray  # p drawn ∝ p·f(p) at `_U_BUDGET`
    own_attended: np.ndarray  # p(p+1)/2 per sampled prompt
    moments: tuple[float, float, float]  # mean of p, p², p³ over the sample (the chunk budget's service moments)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class _OutputSample:
    """The Sobol-sample arrays of a replica that depend only on the output-length distribution (read-only, shared)."""

    outputs: np.ndarray  # o at `_U_OUTPUT`
    decodes: np.ndarray  # o − 1 per sampled request
    has_tpot: np.ndarray  # o > 1: the requests that have a TPOT
    tpot_requests: int  # how many sampled requests have one


def _read_only(values: np.ndarray) -> np.ndarray:
    values.setflags(write=False)  # shared by every replica of the distribution: nobody may write into it
    return values


#: Distinct length distributions kept: a plan uses one prompt and one output distribution for its
#: 20–100 configurations; the what-if sweeps and the fleet search vary them a few at a time.
_LENGTH_SAMPLE_CACHE_SIZE = 64


@functools.lru_cache(maxsize=_LENGTH_SAMPLE_CACHE_SIZE)
def _prompt_sample(p: LengthDistribution) -> _PromptSample:
    prompts = length_quantiles(p, _U_PROMPT)
    ordered = np.sort(prompts)
    size_biased = ordered[np.minimum(np.searchsorted(np.cumsum(ordered) / ordered.sum(), _U_BUDGET), len(ordered) - 1)]
    return _PromptSample(
        prompts=_read_only(prompts),
        grid=_read_only(length_quantiles(p, _PROMPT_GRID_U)),
        size_biased=_read_only(size_biased),
        own_attended=_read_only(prompts * (prompts + 1.0) / 2.0),
        moments=(float(np.mean(prompts)), float(np.mean(prompts * prompts)), float(np.mean(prompts * prompts * prompts))),
    )


@functools.lru_cache(maxsize=_LENGTH_SAMPLE_CACHE_SIZE)
def _output_sample(o: LengthDistribution) -> _OutputSample:
    outputs = length_quantiles(o, _U_OUTPUT)
    return _OutputSample(
        outputs=_read_only(outputs),
        decodes=_read_only(np.maximum(outputs - 1.0, 0.0)),
        has_tpot=_read_only(outputs > 1.0),
        tpot_requests=int(np.count_nonzero(outputs > 1.0)),
    )


# --- the replica --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Replica:
    """Everything about a (step model, length mix, serving) that does not depend on the rate."""

    sm: StepModel
    slots: int
    slots_limited_by: str
    chunk_tokens: int | None
    prompt_mean: float
    prompt_second_moment: float
    output_mean: float
    output_cv2: float
    decode_context_mean: float  # KV tokens read per decoding sequence, length-biased
    prefill_position_mean: float  # mean attended context per prefill token: E[p(p+1)/2]/E[p]
    prompt_grid: np.ndarray  # mid-quantiles of p for ⌈p/budget⌉
    prompts: np.ndarray  # the Sobol sample of prompt lengths
    outputs: np.ndarray  # … and of output lengths
    size_biased_prompts: np.ndarray  # prompts drawn ∝ p·f(p) at `_U_BUDGET` (the prompt of a long step in progress)
    own_attended: np.ndarray  # p(p+1)/2: context a prompt's own prefill attends to
    decodes: np.ndarray  # o − 1 per sampled request
    has_tpot: np.ndarray  # o > 1 per sampled request
    tpot_requests: int  # how many sampled requests have a TPOT
    step_coefficients: np.ndarray  # the step model's coefficients in planner/queueing_kernels.py's order
    prompt_sample_moments: tuple[float, float, float]  # mean of p, p², p³ over the sampled prompts
    prompt_cv2: float
    arrival_cv2: float
    #: Occupancy grid and the step-time tables on it (rows: n on the grid; columns: k prompts arriving).
    grid: np.ndarray
    steps_grid: np.ndarray
    k: np.ndarray
    log_k_factorial: np.ndarray
    carry_single_s: np.ndarray  # duration of the one step carrying (up to the budget of) the k prompts' tokens
    carry_s: np.ndarray  # … plus the full-budget steps the rest spills into
    spill_steps: np.ndarray  # 1 + the extra full-budget steps the k prompts spill into
    t_decode: np.ndarray  # pure decode step at n
    t_full: np.ndarray  # full-budget chunk step at n (= t_decode without chunking)
    admissions_cap: float  # a full batch's departures per step: the most prompts a step can admit
    #: Tables over every occupancy n = 0 … c (the fixed point sums over them on each evaluation).
    log_n_factorial: np.ndarray
    steps_at_n: np.ndarray
    saturation_rps: float = 0.0  # set by `_replica_cached` once the tables exist

    def budget(self, n: np.ndarray) -> np.ndarray:
        """Prefill tokens a step may carry beside n decodes (the chunk budget counts decodes)."""
        if self.chunk_tokens is None:
            return np.full(np.shape(n), np.inf)
        return np.maximum(1.0, self.chunk_tokens - n)  # C − n, at least one token

    def step_mean(self, arrivals_per_step: np.ndarray | float) -> np.ndarray:
        """Mean step time on `grid`, k ~ Poisson(m) prompts arriving per step (m a scalar or one per grid row).

        Arrivals during one step add k·E[p] prefill tokens to the next, at most the budget C − n;
        the excess spills into extra full-budget steps (the tables are built in `_replica`).
        """
        if np.ndim(arrivals_per_step) == 0:
            m = max(float(arrivals_per_step), 1e-300)
            pmf = np.exp(self.k[0] * math.log(m) - m - self.log_k_factorial[0])  # Poisson(m) pmf, truncated at k_max
            return (self.carry_s @ pmf) / (self.spill_steps @ pmf)  # the pmf's normalisation cancels
        m = np.maximum(np.asarray(arrivals_per_step, dtype=float), 1e-300)[:, None]
        pmf = np.exp(self.k * np.log(m) - m - self.log_k_factorial)
        return np.einsum("ij,ij->i", pmf, self.carry_s) / np.einsum("ij,ij->i", pmf, self.spill_steps)

    def at(self, values: np.ndarray, n: np.ndarray | float) -> np.ndarray:
        """Interpolate a quantity tabulated on `grid` at occupancy n."""
        return np.interp(n, self.grid, values)


def _router_arrival_cv2(workload: Workload, serving: Serving) -> float:
    r = serving.replicas
    ca2 = workload.arrival_cv**2
    if serving.router == "random":
        return ca2 / r + (r - 1) / r  # thinning a renewal stream with probability 1/r
    return ca2 / r  # every r-th arrival: a sum of r inter-arrival times (round-robin; JSQ treated alike)


def _replica(sm: StepModel, workload: Workload, serving: Serving, kv_capacity_tokens: float) -> _Replica:
    """The rate-independent part of a replica (cached: the optimizer and the ρ curve ask for one configuration many times)."""
    return _replica_cached(
        sm, workload.prompt_tokens, workload.output_tokens, workload.arrival_cv, serving, float(kv_capacity_tokens)
    )


@functools.lru_cache(maxsize=256)
def _replica_cached(
    sm: StepModel,
    prompt: LengthDistribution,
    output: LengthDistribution,
    arrival_cv: float,
    serving: Serving,
    kv_capacity_tokens: float,
) -> _Replica:
    workload = Workload(arrival_rate_rps=0.0, prompt_tokens=prompt, output_tokens=output, arrival_cv=arrival_cv)
    if not (kv_capacity_tokens > 0 and math.isfinite(kv_capacity_tokens)):
        raise PlannerInputError(f"KV capacity must be a positive number of tokens, got {kv_capacity_tokens}")
    p, o = workload.prompt_tokens, workload.output_tokens
    prompt_sample, output_sample = _prompt_sample(p), _output_sample(o)
    prompts = prompt_sample.prompts
    request_tokens = p.mean + o.mean
    kv_slots = int(kv_capacity_tokens // request_tokens)
    slots = min(serving.batch_limit, kv_slots)
    o_mean, o2 = o.mean, o.second_moment
    decode_context = (
        p.mean + (o2 - o_mean) / (2.0 * (o_mean - 1.0)) if o_mean > 1.0 + 1e-9 else p.mean + 1.0
    )  # E[p] + E[o(o−1)/2]/E[o−1]
    position = (p.second_moment / p.mean + 1.0) / 2.0  # E[p(p+1)/2] / E[p]
    prompt_grid = prompt_sample.grid
    c = max(slots, 1)
    grid = np.linspace(0.0, float(c), min(c + 1, _OCCUPANCY_GRID_POINTS))
    if serving.chunk_tokens is None:
        cap = np.full(grid.shape, np.inf)
        steps_grid = np.full(grid.shape, o_mean)
    else:
        cap = np.maximum(1.0, serving.chunk_tokens - grid)  # C − n
        steps_grid = np.mean(np.ceil(prompt_grid / cap[:, None]), axis=1) + o_mean - 1.0  # E[⌈p/(C−n)⌉] + o − 1
    admissions_cap = c / float(steps_grid[-1])
    n_all = np.arange(c + 1, dtype=float)
    k = np.arange(int(admissions_cap + 8.0 * math.sqrt(admissions_cap) + 9.0), dtype=float)[None, :]
    n = grid[:, None]
    decode_kv = n * decode_context
    arriving = k * p.mean
    carried = np.minimum(arriving, cap[:, None])
    spill = np.where(np.isfinite(cap[:, None]), np.maximum(arriving - cap[:, None], 0.0) / cap[:, None], 0.0)
    t_carry = step_seconds(sm, n + carried, decode_kv, decode_kv + carried * position)
    t_decode = step_seconds(sm, grid, grid * decode_context, grid * decode_context)
    if serving.chunk_tokens is None:
        t_full = t_decode
    else:
        t_full = step_seconds(sm, grid + cap, grid * decode_context, grid * decode_context + cap * position)
    replica = _Replica(
        sm=sm,
        slots=slots,
        slots_limited_by="batch_limit" if serving.batch_limit <= kv_slots else "kv_cache",
        chunk_tokens=serving.chunk_tokens,
        prompt_mean=p.mean,
        prompt_second_moment=p.second_moment,
        output_mean=o_mean,
        output_cv2=max(0.0, o2 / o_mean**2 - 1.0),
        decode_context_mean=decode_context,  # contexts length-biased by decode steps
        prefill_position_mean=position,
        prompt_grid=prompt_grid,
        prompts=prompts,
        outputs=output_sample.outputs,
        size_biased_prompts=prompt_sample.size_biased,
        own_attended=prompt_sample.own_attended,
        decodes=output_sample.decodes,
        has_tpot=output_sample.has_tpot,
        tpot_requests=output_sample.tpot_requests,
        step_coefficients=_read_only(queueing_kernels.step_model_coefficients(sm)),
        prompt_sample_moments=prompt_sample.moments,
        prompt_cv2=max(0.0, p.second_moment / p.mean**2 - 1.0),
        arrival_cv2=_router_arrival_cv2(workload, serving),
        grid=grid,
        steps_grid=steps_grid,
        k=k,
        log_k_factorial=gammaln(k + 1.0),
        carry_single_s=t_carry,
        carry_s=t_carry + spill * t_full[:, None],
        spill_steps=1.0 + spill,
        t_decode=t_decode,
        t_full=t_full,
        admissions_cap=admissions_cap,
        log_n_factorial=gammaln(n_all + 1.0),
        steps_at_n=np.interp(n_all, grid, steps_grid),
    )
    return replace(replica, saturation_rps=_saturation(replica) if slots >= 1 else 0.0)


def _saturation(rep: _Replica) -> float:
    c = float(rep.slots)
    steps = float(rep.steps_grid[-1])
    mean = rep.step_mean(rep.admissions_cap)  # full batch: c/steps admissions per step
    slot_limit = c / (steps * float(mean[-1]))  # c requests every steps·T̄(c) seconds
    if rep.chunk_tokens is None:
        return slot_limit
    budget_limit = float(rep.budget(np.array(c))) / (
        rep.prompt_mean * float(rep.t_full[-1])
    )  # (C − c) prefill tokens per full-chunk step
    return min(slot_limit, budget_limit)


def saturation_rps(step_model: StepModel, workload: Workload, serving: Serving, *, kv_capacity_tokens: float) -> float:
    """Largest sustainable per-replica arrival rate for the request mix (all slots busy)."""
    rep = _replica(step_model, workload, serving, kv_capacity_tokens)
    return rep.saturation_rps


#: Points of the occupancy grid on which step times are evaluated (then interpolated): they are
#: smooth in n, and a fixed grid keeps a prediction's cost independent of the batch limit.
_OCCUPANCY_GRID_POINTS = 33
#: Feedback fractions are capped below 1 so the dispersion stays finite just below saturation.
_MAX_FEEDBACK = 0.99


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class _Occupancy:
    """The occupancy distribution of a replica at one rate and the step times that go with it."""

    shape_mean: float  # μ: mean of the negative binomial before truncation at c
    dispersion: float  # D = Var/mean of the occupancy
    feedback_prefill: float  # θ_pf = λ·e: each arrival's prefill lengthens every running request's life by e
    feedback_batch: float  # θ_b = λ·steps·dT̄/dn: one more running sequence lengthens every step
    mean_running: float  # L = E[min(N, c)]
    p_wait: float
    cdf_below: np.ndarray  # P(N ≤ n), n = 0 … c−1 (arrivals see time averages)
    grid: np.ndarray
    t_mean: np.ndarray  # T̄(n) on the grid, with the arrival intensity that goes with occupancy n
    flat_t_mean: np.ndarray  # T̄(n) on the grid at the flat arrival intensity m0
    t_decode: np.ndarray
    t_full: np.ndarray
    arrivals_per_step: np.ndarray  # m(n) on the grid
    departure_rate_rps: float  # E[min(N, c) / (steps·T̄(N))], = λ at the solution
    flat_arrivals_per_step: float  # m0 = λ·T̄ at the mean occupancy


def _occupancy_at(rep: _Replica, lam: float, rho: float, shape_mean: float) -> _Occupancy:
    """Occupancy distribution for a negative binomial of mean `shape_mean` (the unknown of the fixed
    point); the arithmetic is planner/queueing_kernels.py's `occupancy_at`, step 3 of this module's
    docstring: dispersion D = 1/((1 − θ_b)(1 − θ_pf)²), a negative binomial below c slots, a
    geometric tail of ratio ρ beyond, and the step times that go with each occupancy."""
    rows = rep.grid.size
    flat_mean, arrivals, t_mean, cdf_below = np.empty(rows), np.empty(rows), np.empty(rows), np.empty(rep.slots)
    mu, dispersion, theta_pf, theta_b, mean_running, p_wait, departure_rate, m0 = queueing_kernels.occupancy_at(
        lam,
        rho,
        shape_mean,
        _MAX_FEEDBACK,
        rep.admissions_cap,
        rep.grid,
        rep.steps_grid,
        rep.t_decode,
        rep.k[0],
        rep.log_k_factorial[0],
        rep.carry_s,
        rep.spill_steps,
        rep.log_n_factorial,
        rep.steps_at_n,
        flat_mean,
        arrivals,
        t_mean,
        cdf_below,
    )
    return _Occupancy(
        shape_mean=mu,
        dispersion=dispersion,
        feedback_prefill=theta_pf,
        feedback_batch=theta_b,
        mean_running=mean_running,
        p_wait=p_wait,
        cdf_below=cdf_below,
        grid=rep.grid,
        t_mean=t_mean,
        flat_t_mean=flat_mean,
        t_decode=rep.t_decode,
        t_full=rep.t_full,
        arrivals_per_step=arrivals,
        departure_rate_rps=departure_rate,
        flat_arrivals_per_step=m0,
    )


#: The occupancy root is bracketed around Little's-law guess, [1.02, 1.2] × it, each end moved out
#: by 1.5× until the excess changes sign. Measured over the 2,189 predictions of the 24 bench plans
#: (bench/plan_latency.py): the guess is within 0.34–5.3× of the root (median 1.10), and brentq
#: takes 7.0 evaluations to a relative tolerance of 1e-7 where [0, 4c] took 10.9 (9.9 to 1e-4).
_BRACKET_LOW, _BRACKET_HIGH, _BRACKET_WIDEN = 1.02, 1.2, 1.5
#: Relative tolerance of the occupancy root. The wait probability P(N ≥ c) moves ~65× as much as μ
#: (measured on the same predictions), so 1e-4 on μ left it ±0.3 % of noise; 1e-7 costs 0.7 evaluations more.
_OCCUPANCY_RTOL = 1e-7
_GUESS_PASSES = 4
_SMALLEST_SHAPE_MEAN = 1e-9


def _occupancy_guess(rep: _Replica, lam: float) -> float:
    """Mean occupancy by Little's law with the flat step time, L = λ·steps·T̄(L), a few passes from a lone request's life."""
    c = float(rep.slots)
    guess = lam * float(rep.steps_grid[0] * rep.t_decode[0])
    for _ in range(_GUESS_PASSES):
        running = min(guess, c)
        steps = float(np.interp(running, rep.grid, rep.steps_grid))
        flat_mean = rep.step_mean(min(running / steps, rep.admissions_cap))
        guess = lam * steps * float(np.interp(running, rep.grid, flat_mean))  # L = λ·W, W = steps·T̄
    return guess


def _occupancy(rep: _Replica, lam: float, rho: float) -> _Occupancy:
    """Solve the occupancy–step-time fixed point: completions per second = λ.

    Little's law in rate form: E[min(N, c) / (steps·T̄(N))] = λ, where T̄(n) grows with n (KV read,
    compute) and N's distribution has mean μ. `brentq` on μ, bracketed around Little's-law guess
    within [0, 4c] (beyond 4c the truncated distribution is a full batch already). Were the excess
    to change sign more than once, the root taken would be the one in the first bracket found
    outward from the guess; scanned at 2,000 μ over [0, 4c] for the 17 configurations of
    bench/queueing_fidelity.py at ρ = 0.9, 0.95, 0.97 and 0.99, it changes sign once in every case.
    """
    if lam <= 0.0:
        return _occupancy_at(rep, 0.0, 0.0, 0.0)
    solved: dict[float, _Occupancy] = {}  # each μ evaluated once: the bracket's ends, then brentq's own

    def excess(mu: float) -> float:
        occupancy = solved.get(mu)
        if occupancy is None:
            occupancy = solved[mu] = _occupancy_at(rep, lam, rho, mu)
        return occupancy.departure_rate_rps - lam

    most = 4.0 * rep.slots
    guess = min(max(_occupancy_guess(rep, lam), _SMALLEST_SHAPE_MEAN), most)
    low, high = max(guess * _BRACKET_LOW, _SMALLEST_SHAPE_MEAN), min(guess * _BRACKET_HIGH, most)
    while low > _SMALLEST_SHAPE_MEAN and excess(low) > 0:  # completions too fast already: the root is lower
        high, low = low, max(low / _BRACKET_WIDEN, _SMALLEST_SHAPE_MEAN)
    while high < most and excess(high) < 0:  # too slow still: the root is higher
        low, high = high, min(high * _BRACKET_WIDEN, most)
    if high >= most and excess(high) < 0:
        raise OccupancySaturatedError(
            f"at λ = {lam:.6g}/s even a full batch ({rep.slots} sequences) completes fewer requests per second than "
            "arrive: the load is unstable on this configuration",
            arrival_rate_rps=lam,
            slots=rep.slots,
        )
    if low <= _SMALLEST_SHAPE_MEAN and excess(low) > 0:
        # completions outpace λ even at the smallest occupancy the shape resolves: the load is
        # vanishing on this replica (λ·W below that mean), and that occupancy is an upper bound on it
        return solved[low]
    try:
        mu = float(brentq(excess, low, high, xtol=1e-9 * rep.slots, rtol=_OCCUPANCY_RTOL, maxiter=200))
    except (ValueError, RuntimeError) as exc:
        raise ConvergenceError(
            f"occupancy/step-time fixed point did not converge on [0, {most}] at λ = {lam:.6g}/s: {exc}",
            arrival_rate_rps=lam,
            slots=rep.slots,
        ) from exc
    excess(mu)
    return solved[mu]


def _percentiles(samples: np.ndarray, percentiles: tuple[float, ...]) -> np.ndarray:
    """`np.percentile` (linear interpolation between order statistics) without its per-call overhead.

    Only the order statistics at and after each percentile's position are needed. They are found by
    successive single-pivot partitions of what lies above the previous one (NumPy's selection is
    vectorised for one pivot, not for several: measured 37 µs for one pivot, 104–127 µs to sort and
    160–185 µs for a 6-pivot partition of the model's 8,192-point samples); the next order statistic
    after a pivot is the minimum of the rest. The same order statistics, so the same values as sorting."""
    size = samples.size
    position = np.asarray(percentiles) / 100.0 * (size - 1)
    below = np.floor(position).astype(int)
    value_at: dict[int, float] = {}
    rest, offset = samples, 0
    for index in sorted(set(below.tolist())):
        rest = np.partition(rest, index - offset)
        value_at[index] = rest[index - offset]
        rest = rest[index - offset + 1 :]
        offset = index + 1
        value_at.setdefault(index + 1, rest.min() if rest.size else value_at[index])
    low = np.array([value_at[i] for i in below.tolist()])
    high = np.array([value_at[min(i + 1, size - 1)] for i in below.tolist()])
    return low + (high - low) * (position - below)


def _latency(samples: np.ndarray, percentile: float) -> Latency:
    p50, p90, p99, pq = _percentiles(samples, (50.0, 90.0, 99.0, percentile))
    return Latency(p50_s=float(p50), p90_s=float(p90), p99_s=float(p99), percentile=percentile, at_percentile_s=float(pq))


def _gamma_unit_quantile(z: np.ndarray, variance: np.ndarray | float) -> np.ndarray:
    """Quantile of a gamma variable of mean 1 and the given variance at the normal quantiles z (Wilson–Hilferty cube-root approximation)."""
    v = np.asarray(variance, dtype=float)
    g = np.maximum(
        1.0 - v / 9.0 + np.sqrt(v / 9.0) * z, 0.0
    )  # (G)^(1/3) ≈ normal with mean 1 − 1/(9a), sd 1/√(9a), 1/a = variance
    return g * g * g  # the cube by products: NumPy's float power is ~25× slower, the result within an ulp


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


#: Where the fidelity study (docs/queueing-fidelity.md, `bench/queueing_fidelity.py`) found every
#: analytic p99 within 10 % of the simulator (on an 8,000-request run; within 12 % on the committed
#: one): Poisson arrivals per replica, the batch rarely full (an arrival waits for a slot with
#: probability ≤ 0.1 %) and the occupancy not much burstier than Poisson (Var/mean ≤ 1.6).
#: Beyond either, batch-wide prefill stalls couple the requests (bursts that fill the batch, TPOT
#: tails from clustered prefills) more than this model captures: the service simulates instead.
RELIABLE_MAX_WAIT_PROBABILITY = 1e-3
RELIABLE_MAX_DISPERSION = 1.6
#: The issue's target applies up to this utilisation; above it the analytic p99s are never trusted.
RELIABLE_MAX_UTILISATION = 0.85


def _fidelity(rho: float, p_wait: float, dispersion: float, arrival_cv2: float) -> tuple[bool, str | None]:
    """Whether the prediction lies where the fidelity study found it within 10 %, and why not."""
    reasons = []
    if abs(arrival_cv2 - 1.0) > 1e-9:
        reasons.append(f"per-replica arrivals with c_a = {math.sqrt(arrival_cv2):.2f} (only Poisson arrivals were validated)")
    if rho > RELIABLE_MAX_UTILISATION:
        reasons.append(f"utilisation {rho:.2f} > {RELIABLE_MAX_UTILISATION}")
    if p_wait > RELIABLE_MAX_WAIT_PROBABILITY:
        reasons.append(f"the batch is full for {p_wait:.2%} of arrivals (> {RELIABLE_MAX_WAIT_PROBABILITY:.1%})")
    if dispersion > RELIABLE_MAX_DISPERSION:
        reasons.append(f"occupancy Var/mean {dispersion:.2f} > {RELIABLE_MAX_DISPERSION} (prefill stalls make the batch bursty)")
    if not reasons:
        return True, None
    return False, "outside the analytic model's validated region: " + "; ".join(reasons) + " — use the simulator"


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class _StepKinds:
    """The step in progress at arrival for one occupancy-grid row: the step types' durations and the
    CDF of the length-biased type (k prompts carried, or a spilled full-budget chunk step)."""

    row: int
    durations: np.ndarray
    cdf: np.ndarray


def _step_kinds(rep: _Replica, occ: _Occupancy, row: int) -> _StepKinds:
    m_row = float(occ.arrivals_per_step[row])
    k = rep.k[0]
    pmf = np.exp(k * math.log(max(m_row, 1e-300)) - m_row - rep.log_k_factorial[0])
    durations = np.concatenate((rep.carry_single_s[row], [rep.t_full[row]]))
    weights = np.concatenate((pmf, [float(np.dot(pmf, rep.spill_steps[row] - 1.0))])) * durations
    return _StepKinds(row=row, durations=durations, cdf=np.cumsum(weights) / weights.sum())


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class _OperatingPoint:
    """Everything about a replica at one rate that is the same for every sample point."""

    lam: float
    rho: float
    occ: _Occupancy
    occupancy: float  # L, the mean number running
    steps: float  # steps per request at L
    service_s: float  # W = L/λ
    conditional_wait_s: float  # mean wait for a slot, given one waits
    per_arrival_s: np.ndarray  # prefill interference per arrival during a life, on the occupancy grid
    burst_dispersion: float
    below: _StepKinds  # the step in progress: the grid rows around L and the weight of the upper one
    above: _StepKinds
    above_weight: float
    #: with chunked prefill: the budget's utilisation and, given that a prompt queues for it, its wait's mean and cv²
    budget_rho: float = 0.0
    budget_wait_mean_s: float = 0.0
    budget_wait_cv2: float = 0.0


def _operating_point(rep: _Replica, lam: float) -> _OperatingPoint | None:
    """The rate-level state at per-replica rate λ; None when λ is at or beyond what the replica sustains."""
    saturation = rep.saturation_rps
    if saturation <= 0.0 or lam >= saturation:
        return None
    rho = lam / saturation
    c = rep.slots
    occ = _occupancy(rep, lam, rho)
    occupancy = occ.mean_running
    steps_op = float(rep.at(rep.steps_grid, occupancy))
    if lam > 0:
        service_s = occupancy / lam  # Little: W = L/λ
    else:
        service_s = steps_op * float(occ.t_mean[0] if occ.grid[0] >= 1 else np.interp(1.0, occ.grid, occ.t_mean))
    service_cv2 = rep.output_cv2 * (rep.output_mean / max(steps_op, 1.0)) ** 2  # variability of the step count
    # Allen–Cunneen factor (c_a² + c_d²)/2. Departures from a full batch are the superposition of c
    # slots' renewal streams, which tends to Poisson as c grows: c_d² = 1 + (c_s² − 1)/c.
    departure_cv2 = 1.0 + (service_cv2 - 1.0) / c
    variability = (rep.arrival_cv2 + departure_cv2) / 2.0
    m0 = occ.flat_arrivals_per_step
    grid = occ.grid
    # The step in progress at arrival, length-biased over the step types at the mean occupancy. The
    # mean occupancy falls between two grid rows: the duration is interpolated between the two rows'
    # quantiles at the same uniform (taking the nearest row jumped as the occupancy crossed a
    # midpoint, and TTFT p99 fell by up to 1 % as the rate rose).
    below = int(np.clip(np.searchsorted(grid, occupancy, side="right") - 1, 0, len(grid) - 2))
    above_weight = float(np.clip((occupancy - grid[below]) / (grid[below + 1] - grid[below]), 0.0, 1.0))
    point = _OperatingPoint(
        lam=lam,
        rho=rho,
        occ=occ,
        occupancy=occupancy,
        steps=steps_op,
        service_s=service_s,
        conditional_wait_s=variability / (saturation - lam),  # exponential with rate (saturation − λ), scaled
        per_arrival_s=(occ.flat_t_mean - rep.t_decode) / m0 if m0 > 0 else np.zeros(grid.shape),
        burst_dispersion=1.0 / (1.0 - occ.feedback_prefill) ** 2,
        below=_step_kinds(rep, occ, below),
        above=_step_kinds(rep, occ, below + 1),
        above_weight=above_weight,
    )
    if rep.chunk_tokens is None:
        return point
    # Pollaczek–Khinchine wait for the chunk budget, a server of C − n prefill tokens per full
    # step: a prompt holds it p/(C−n) full steps, S = p·t_full/(C−n), so its moments are the
    # sampled prompts' moments scaled.
    scale = float(np.interp(occupancy, grid, occ.t_full)) / float(rep.budget(np.array(occupancy)))  # t_full / (C − n) at L
    budget_rho = lam * rep.prompt_sample_moments[0] * scale
    if budget_rho >= 1.0:
        return None
    budget_mean = (
        lam * rep.prompt_sample_moments[1] * scale**2 / (2.0 * (1.0 - budget_rho)) if budget_rho > 0 else 0.0
    )  # λ·E[S²] / 2(1−ρ)
    # Given that it queues, the wait is a gamma matched to the first two moments of M/G/1's
    # conditional wait (Takács: E[W²] = 2E[W]² + λE[S³]/3(1−ρ)): near-uniform for fixed prompts
    # (the residual of one prompt), heavier-tailed for long-tailed ones, exponential-like as ρ grows.
    conditional_mean = budget_mean / max(budget_rho, 1e-300)
    second = (2.0 * budget_mean**2 + lam * rep.prompt_sample_moments[2] * scale**3 / (3.0 * (1.0 - budget_rho))) / max(
        budget_rho, 1e-300
    )
    return replace(
        point,
        budget_rho=budget_rho,
        budget_wait_mean_s=conditional_mean,
        budget_wait_cv2=max(second / max(conditional_mean, 1e-300) ** 2 - 1.0, 1e-6),
    )


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class _Latencies:
    """TTFT, TPOT and E2E (seconds) and the wait for a slot at each point of a slice of the sample."""

    ttft: np.ndarray
    tpot: np.ndarray
    e2e: np.ndarray
    wait: np.ndarray


def _sample(rep: _Replica, op: _OperatingPoint, pts: _Points) -> _Latencies:
    """The latencies at the points of one slice of the sample, at operating point `op` (the
    per-point arithmetic is planner/queueing_kernels.py's compiled loop)."""
    occ, part = op.occ, pts.part
    scalars = np.empty(queueing_kernels.OPERATING_POINT_SIZE)
    scalars[queueing_kernels.SLOTS] = rep.slots
    scalars[queueing_kernels.P_WAIT] = occ.p_wait
    scalars[queueing_kernels.LOG_P_WAIT] = math.log(max(occ.p_wait, 1e-300))
    scalars[queueing_kernels.CONDITIONAL_WAIT] = op.conditional_wait_s
    scalars[queueing_kernels.OCCUPANCY] = op.occupancy
    scalars[queueing_kernels.M0] = occ.flat_arrivals_per_step
    scalars[queueing_kernels.BURST_VARIANCE_NUMERATOR] = op.burst_dispersion - 1.0
    scalars[queueing_kernels.PROMPT_CV2] = rep.prompt_cv2
    scalars[queueing_kernels.ABOVE_WEIGHT] = op.above_weight
    scalars[queueing_kernels.ROW_BELOW_N] = occ.grid[op.below.row]
    scalars[queueing_kernels.ROW_ABOVE_N] = occ.grid[op.above.row]
    scalars[queueing_kernels.CHUNK_TOKENS] = rep.chunk_tokens or 0
    scalars[queueing_kernels.PROMPT_MEAN] = rep.prompt_mean
    scalars[queueing_kernels.DECODE_CONTEXT] = rep.decode_context_mean
    scalars[queueing_kernels.PREFILL_POSITION] = rep.prefill_position_mean
    scalars[queueing_kernels.LAMBDA] = op.lam
    scalars[queueing_kernels.LIFE_SHRINK] = _LIFE_AVERAGE_SHRINK
    u_sip = pts.u_step_in_progress
    if rep.chunk_tokens is None:
        budget_wait, queued = _NO_BUDGET_WAIT[: pts.size], _NOT_QUEUED[: pts.size]
    else:
        # A prompt that queues for the chunk budget waits out the prompt in service instead of the
        # residual of the step in progress. The budget is busy exactly while the step in progress
        # carries prefill (the upper tail of the step-type uniform), so the two share a uniform:
        # drawn independently they would count one stall twice. Given that it queues, the wait is
        # the gamma `_operating_point` matched to M/G/1's conditional wait.
        budget_rho = op.budget_rho
        queued = u_sip >= 1.0 - budget_rho
        tail_u = np.clip(1.0 - (1.0 - u_sip[queued]) / max(budget_rho, 1e-300), 1e-9, 1.0 - 1e-9)
        budget_wait = np.zeros(u_sip.shape)
        budget_wait[queued] = op.budget_wait_mean_s * _gamma_unit_quantile(ndtri(tail_u), op.budget_wait_cv2)
    size = pts.size
    out = _Latencies(ttft=np.empty(size), tpot=np.empty(size), e2e=np.empty(size), wait=np.empty(size))
    queueing_kernels.sample_latencies(
        rep.step_coefficients,
        scalars,
        occ.grid,
        occ.cdf_below,
        occ.t_decode,
        op.per_arrival_s,
        op.below.durations,
        op.below.cdf,
        op.above.durations,
        op.above.cdf,
        pts.u_wait,
        pts.log_wait_tail,
        pts.z_wait,
        pts.u_life_arrivals,
        pts.z_life_arrivals,
        pts.z_interference,
        pts.u_residual,
        pts.u_stepmates,
        pts.z_stepmates,
        pts.wait_sorted,
        pts.wait_order,
        pts.step_in_progress_sorted,
        pts.step_in_progress_order,
        rep.prompts[part],
        rep.decodes[part],
        rep.own_attended[part],
        rep.size_biased_prompts[part],
        budget_wait,
        queued,
        out.ttft,
        out.tpot,
        out.e2e,
        out.wait,
    )
    return out


#: Chunk-budget waits of an unchunked replica: none. (Writable like the chunked case's arrays, so
#: the compiled kernel sees one argument type, not two.)
_NO_BUDGET_WAIT = np.zeros(_U.shape[0])
_NOT_QUEUED = np.zeros(_U.shape[0], dtype=bool)


def _prediction(rep: _Replica, op: _OperatingPoint, sample: _Latencies, percentile: float) -> Prediction:
    """The prediction from the whole sample's latencies at operating point `op`."""
    lam, rho, occ = op.lam, op.rho, op.occ
    reliable, note = _fidelity(rho, float(occ.p_wait), occ.dispersion, rep.arrival_cv2)
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
        littles_law=(op.occupancy, lam, op.service_s),
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


@dataclass(frozen=True, slots=True, kw_only=True)
class PercentileBounds:
    """Lower bounds on the predicted percentiles (seconds) from the first slice of the sample alone.

    The percentile of n values interpolates between the order statistics at ⌊q(n−1)⌋ and the next,
    so it is at least the (n − ⌊q(n−1)⌋)-th largest value of any subset of them; the slice's values
    are the whole sample's at its points. None where the slice holds too few values to bound it."""

    percentile: float
    ttft_s: float | None
    tpot_s: float | None
    e2e_s: float | None

    def excess(self, slo: Slo) -> tuple[float, str, float]:
        """A lower bound on max over the targets of `slo` of predicted/target − 1 (> 0: a target is
        proven missed), the metric that sets it and its bound; (−inf, "", 0) when none is bounded."""
        worst = (-math.inf, "", 0.0)
        if slo.percentile == self.percentile:
            for metric in ("ttft", "tpot", "e2e"):
                target, bound = getattr(slo, f"{metric}_s"), getattr(self, f"{metric}_s")
                if target is not None and bound is not None and bound / target - 1.0 > worst[0]:
                    worst = (bound / target - 1.0, metric, bound)
        return worst

    def prove_missed(self, slo: Slo) -> bool:
        """Whether these bounds alone show a target of `slo` missed."""
        return self.excess(slo)[0] > 0


def _percentile_bounds(rep: _Replica, head: _Latencies, percentile: float) -> PercentileBounds:
    q = percentile / 100.0
    bounds: dict[str, float | None] = {}
    for metric, values, n in (
        ("ttft", head.ttft, rep.prompts.size),
        ("e2e", head.e2e, rep.prompts.size),
        ("tpot", head.tpot[rep.has_tpot[_SCREEN_HEAD.part]], rep.tpot_requests),
    ):
        needed = n - math.floor(q * (n - 1))  # this many values at or above the percentile
        bounds[f"{metric}_s"] = (
            float(np.partition(values, values.size - needed)[values.size - needed]) if 0 < needed <= values.size else None
        )
    return PercentileBounds(percentile=percentile, **bounds)


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
    whole = _Latencies(
        **{name: np.concatenate((getattr(head, name), getattr(rest, name))) for name in ("ttft", "tpot", "e2e", "wait")}
    )
    return _prediction(rep, op, whole, slo.percentile)


def slo_excess(
    step_model: StepModel,
    workload: Workload,
    serving: Serving,
    slo: Slo,
    *,
    kv_capacity_tokens: float,
    screen_first: bool = False,
) -> tuple[float, str, float]:
    """max over the targets of `slo` of predicted/target − 1 at the workload's per-replica rate (≤ 0:
    every target met), the metric that sets it and its predicted value; (inf, "utilisation", inf)
    when unstable. The numbers `predict` gives, with only the percentiles the SLO names computed
    (a search that only compares with targets needs no p50/p90 and no queueing detail).

    With `screen_first`, a miss the first eighth of the sample proves (as `screen` does) answers
    a lower bound on the excess and on the predicted value instead."""
    rep = _replica(step_model, workload, serving, kv_capacity_tokens)
    op = _operating_point(rep, workload.arrival_rate_rps / serving.replicas)
    if op is None:
        return math.inf, "utilisation", math.inf
    if screen_first:
        head = _sample(rep, op, _SCREEN_HEAD)
        bounds = _percentile_bounds(rep, head, slo.percentile)
        if bounds.prove_missed(slo):
            return bounds.excess(slo)
        rest = _sample(rep, op, _SCREEN_REST)
        whole = _Latencies(
            **{name: np.concatenate((getattr(head, name), getattr(rest, name))) for name in ("ttft", "tpot", "e2e", "wait")}
        )
    else:
        whole = _sample(rep, op, _ALL_POINTS)
    worst = (-math.inf, "", 0.0)
    for metric, target in (("ttft", slo.ttft_s), ("tpot", slo.tpot_s), ("e2e", slo.e2e_s)):
        if target is None:
            continue
        if metric == "tpot":
            value = float(_percentiles(whole.tpot[rep.has_tpot], (slo.percentile,))[0]) if rep.tpot_requests else 0.0
        else:
            value = float(_percentiles(getattr(whole, metric), (slo.percentile,))[0])
        if value / target - 1.0 > worst[0]:
            worst = (value / target - 1.0, metric, value)
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
            f"p{pct:g} {binding.upper()} is {predicted * 1e3:.2f} ms even at vanishing load, above the "
            f"{target * 1e3:.2f} ms target: no rate meets it on this configuration",
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
