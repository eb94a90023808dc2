"""The latency sampler: the operating point of a replica at one rate, the TTFT/TPOT/E2E at every
point of the sample, their percentiles, and the lower bounds the first slice of the sample proves
(steps 6 and 7 of planner/queueing.py's docstring).

What is the same for every sample point (the wait for a slot, the step in progress, the chunk
budget's wait) is computed once per rate in `_operating_point`; the per-point arithmetic is
planner/queueing_kernels.py's compiled loop. The underscored names are shared among the
planner/queueing_*.py modules only; `PercentileBounds` and `SloExcess` are public (re-exported by
planner/queueing.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import NamedTuple

import numpy as np
from scipy.special import ndtri

from planner import queueing_kernels
from planner.queueing_occupancy import _Occupancy, _occupancy
from planner.queueing_replica import _Replica
from planner.queueing_sample import _SCREEN_HEAD, _U, _Points
from planner.workload import Slo

#: Variance ratio of a one-service-time window average of M/G/∞ occupancy with deterministic
#: service (∫∫(1 − |t−s|/S) ds dt / S² = 2/3); the life-average occupancy is shrunk by its root.
_LIFE_AVERAGE_SHRINK = math.sqrt(2.0 / 3.0)


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
    interpolated: np.ndarray = low + (high - low) * (position - below)
    return interpolated


def _gamma_unit_quantile(z: np.ndarray, variance: np.ndarray | float) -> np.ndarray:
    """Quantile of a gamma variable of mean 1 and the given variance at the normal quantiles z (Wilson–Hilferty cube-root approximation)."""
    v = np.asarray(variance, dtype=float)
    g = np.maximum(
        1.0 - v / 9.0 + np.sqrt(v / 9.0) * z, 0.0
    )  # (G)^(1/3) ≈ normal with mean 1 − 1/(9a), sd 1/√(9a), 1/a = variance
    cube: np.ndarray = g * g * g  # the cube by products: NumPy's float power is ~25× slower, the result within an ulp
    return cube


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
    decode_tokens_mean = rep.output_mean / rep.sm.tokens_per_step  # E[o]/E: the steps a request's tokens take
    service_cv2 = rep.output_cv2 * (decode_tokens_mean / max(steps_op, 1.0)) ** 2  # variability of the step count
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
        burst_dispersion=float(queueing_kernels.prefill_cluster_dispersion(occ.feedback_prefill, rep.prompt_cv2)),
        below=_step_kinds(rep, occ, below),
        above=_step_kinds(rep, occ, below + 1),
        above_weight=above_weight,
    )
    if rep.chunk_tokens is None:
        # Without a budget the prefill is still one server: a prompt's work is the time its tokens add
        # to the step that carries them (compute-bound prefill time ∝ tokens), θ_pf = λ·E[S] of the time
        # in all. A prompt that arrives while prompts run or wait is served after that work: every
        # prompt queued goes into the next step, and the step lasts about as long as their work in sum.
        # So the wait is M/G/1's with S ∝ p, scaled so that λ·E[S] = θ_pf. Taking only the residual of
        # the step in progress put unchunked TTFT p99 of the corpus plans 12-32 % low where their
        # 16,384-token-budget twins were within 10 % (bench/plan_corpus.py).
        if lam <= 0.0 or occ.feedback_prefill <= 0.0:
            return point
        scale = occ.feedback_prefill / (lam * rep.prompt_sample_moments[0])  # seconds of prefill per prompt token
    else:
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
        budget_wait_cv2=max(second / max(conditional_mean, 1e-150) ** 2 - 1.0, 1e-6),  # 1e-150² stays a normal float
    )


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class _Latencies:
    """TTFT, TPOT and E2E (seconds) and the wait for a slot at each point of a slice of the sample."""

    ttft: np.ndarray
    tpot: np.ndarray
    e2e: np.ndarray
    wait: np.ndarray

    @classmethod
    def joined(cls, head: _Latencies, rest: _Latencies) -> _Latencies:
        """The latencies of two consecutive slices of the sample as one (the whole sample's, point for point)."""
        return cls(
            **{name: np.concatenate((getattr(head, name), getattr(rest, name))) for name in ("ttft", "tpot", "e2e", "wait")}
        )


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
    scalars[queueing_kernels.PREFILL_CACHED_READ] = rep.prefill_cached_read
    u_sip = pts.u_step_in_progress
    if op.budget_rho <= 0.0:
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
        rep.cached[part],
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
    if rep.sm.speculation is not None:
        np.divide(out.tpot, rep.sm.tokens_per_step, out=out.tpot)  # the kernel's TPOT is per verify step; each emits E tokens
    return out


#: Chunk-budget waits of an unchunked replica: none. (Writable like the chunked case's arrays, so
#: the compiled kernel sees one argument type, not two.)
_NO_BUDGET_WAIT = np.zeros(_U.shape[0])
_NOT_QUEUED = np.zeros(_U.shape[0], dtype=bool)


class SloExcess(NamedTuple):
    """How far predicted latencies are from an SLO's targets: the largest predicted/target − 1 over
    its targets (≤ 0: every target met, > 0: one missed), the metric that sets it and its value."""

    excess: float
    metric: str  # "ttft", "tpot" or "e2e"; "utilisation" when the load is unstable, "" when no target is bounded
    value_s: float  # the metric's predicted value (or lower bound), seconds


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

    def excess(self, slo: Slo) -> SloExcess:
        """A lower bound on max over the targets of `slo` of predicted/target − 1 (> 0: a target is
        proven missed), the metric that sets it and its bound; (−inf, "", 0) when none is bounded."""
        worst = SloExcess(-math.inf, "", 0.0)
        if slo.percentile == self.percentile:
            for metric in ("ttft", "tpot", "e2e"):
                target, bound = getattr(slo, f"{metric}_s"), getattr(self, f"{metric}_s")
                if target is not None and bound is not None and bound / target - 1.0 > worst.excess:
                    worst = SloExcess(bound / target - 1.0, metric, bound)
        return worst

    def prove_missed(self, slo: Slo) -> bool:
        """Whether these bounds alone show a target of `slo` missed."""
        return self.excess(slo).excess > 0


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
