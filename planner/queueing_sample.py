"""The queueing model's fixed random sample: the scrambled Sobol points and the per-distribution
length samples drawn at them.

Every prediction evaluates its latency sums at the same 8,192 points (step 7 of planner/queueing.py's
docstring): deterministic, and common random numbers across rates, so a p99 never falls as the rate
rises. The points, their rate-independent transforms and the prompt/output lengths at them are
computed once here (the length samples once per distribution, cached and read-only) and shared by
every replica. The underscored names are shared among the planner/queueing_*.py modules only; the
public surface is planner/queueing.py.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri
from scipy.stats import qmc

from planner.errors import PlannerInputError
from planner.workload import FixedLength, HistogramLength, LengthDistribution, LognormalLength

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


# --- length distributions -------------------------------------------------------------------------


def length_quantiles(dist: LengthDistribution, u: np.ndarray) -> np.ndarray:
    """Inverse CDF of a length distribution at the uniforms `u`, integer tokens as the simulator samples them."""
    if isinstance(dist, FixedLength):
        return np.full(u.shape, float(dist.tokens))
    if isinstance(dist, LognormalLength):
        rounded: np.ndarray = np.maximum(1.0, np.rint(np.exp(dist.mu + dist.sigma * ndtri(u))))  # simulator rounds, min 1
        return rounded
    if isinstance(dist, HistogramLength):
        drawn: np.ndarray = np.asarray(dist.tokens, dtype=float)[_histogram_entries(dist, u)]
        return drawn
    raise PlannerInputError(f"unknown length distribution {type(dist).__name__}")


def _histogram_entries(dist: HistogramLength, u: np.ndarray) -> np.ndarray:
    """The index of the histogram entry its inverse CDF (entries ascending by tokens) takes at each uniform."""
    order = np.argsort(dist.tokens)
    cdf = np.cumsum(dist._p[order])
    entries: np.ndarray = order[np.minimum(np.searchsorted(cdf, u), len(order) - 1)]
    return entries


def cached_at(dist: LengthDistribution, u: np.ndarray) -> np.ndarray:
    """The cached tokens of the prompt `length_quantiles` draws at each uniform (zeros unless a histogram carries them)."""
    if isinstance(dist, HistogramLength) and dist.cached:
        found: np.ndarray = np.asarray(dist.cached, dtype=float)[_histogram_entries(dist, u)]
        return found
    return np.zeros(u.shape)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class _PromptSample:
    """The Sobol-sample arrays of a replica that depend only on the prompt-length distribution (read-only, shared)."""

    prompts: np.ndarray  # p at `_U_PROMPT` (the tokens prefilled)
    cached: np.ndarray  # c: the tokens each sampled prompt finds in a prefix cache (zeros without one)
    grid: np.ndarray  # p at the mid-quantiles `_PROMPT_GRID_U` (for E[⌈p/budget⌉])
    size_biased: np.ndarray  # p drawn ∝ p·f(p) at `_U_BUDGET`
    own_attended: np.ndarray  # p·c + p(p+1)/2 per sampled prompt (StepModel.cached_prefill_s's attention)
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
    cached = cached_at(p, _U_PROMPT)
    ordered = np.sort(prompts)
    size_biased = ordered[np.minimum(np.searchsorted(np.cumsum(ordered) / ordered.sum(), _U_BUDGET), len(ordered) - 1)]
    return _PromptSample(
        prompts=_read_only(prompts),
        cached=_read_only(cached),
        grid=_read_only(length_quantiles(p, _PROMPT_GRID_U)),
        size_biased=_read_only(size_biased),
        own_attended=_read_only(prompts * cached + prompts * (prompts + 1.0) / 2.0),  # n·c + n(n+1)/2
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
