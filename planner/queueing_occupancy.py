"""The occupancy of a replica at one rate: the negative-binomial distribution of the number running,
and the fixed point between it and the step time (steps 3 and 4 of planner/queueing.py's docstring).

Kept apart because it is the one root-finding part of a prediction: its bracket, tolerances and
failure modes (an unstable load, a fixed point that does not converge) are decided here; the
arithmetic of one evaluation is planner/queueing_kernels.py's. The underscored names are shared
among the planner/queueing_*.py modules only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq

from planner import queueing_kernels
from planner.errors import ConvergenceError, OccupancySaturatedError
from planner.queueing_replica import _Replica

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
        rep.prompt_cv2,
        rep.life_overlap,
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
