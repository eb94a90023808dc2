"""A plain NumPy reading of the queueing model's compiled inner loops (planner/queueing_kernels.py),
written for clarity rather than speed: whole-array expressions, `np.searchsorted` and `np.interp`,
the Poisson walk over every point. tests/planner/test_queueing_kernels.py checks the kernels
against it; the formulas are planner/queueing.py's module docstring, steps 3 and 7.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import gammaln

from planner import queueing_occupancy
from planner.queueing_latency import _LIFE_AVERAGE_SHRINK, _Latencies, _OperatingPoint, _StepKinds
from planner.queueing_replica import _Replica, step_seconds
from planner.queueing_sample import _Points

POISSON_NORMAL_MEAN = 12.0


def poisson_quantile(u: np.ndarray, z: np.ndarray, mean: np.ndarray) -> np.ndarray:
    """Smallest k with P(K ≤ k) ≥ u: the CDF walked term by term below the switch, Cornish–Fisher above."""
    mean = np.broadcast_to(np.asarray(mean, dtype=float), u.shape)
    k = np.maximum(np.ceil(mean + np.sqrt(mean) * z + (z * z - 1.0) / 6.0 - 0.5), 0.0)
    small = mean <= POISSON_NORMAL_MEAN
    pmf = np.exp(-mean)
    cdf = pmf.copy()
    walked = np.zeros(u.shape)
    for j in range(1, int(3.0 * POISSON_NORMAL_MEAN) + 12):
        below = u > cdf
        walked = np.where(below, j, walked)
        pmf = pmf * mean / j
        cdf = cdf + pmf
    return np.where(small, walked, k)


def gamma_unit_quantile(z: np.ndarray, variance: np.ndarray | float) -> np.ndarray:
    return np.maximum(1.0 - np.asarray(variance) / 9.0 + np.sqrt(np.asarray(variance) / 9.0) * z, 0.0) ** 3


def step_in_progress(rep: _Replica, op: _OperatingPoint, kinds: _StepKinds, pts: _Points) -> np.ndarray:
    durations = kinds.durations
    kind = np.minimum(np.searchsorted(kinds.cdf, pts.u_step_in_progress), len(durations) - 1)
    in_progress = durations[kind]
    if rep.chunk_tokens is None:
        carrying = (kind >= 1) & (kind < len(durations) - 1)
        tokens = np.maximum(kind - 1.0, 0.0) * rep.prompt_mean + rep.size_biased_prompts[pts.part]
        n_row = op.occ.grid[kinds.row]
        biased = step_seconds(
            rep.sm,
            n_row + tokens,
            n_row * rep.decode_context_mean,
            n_row * rep.decode_context_mean + tokens * rep.prefill_position_mean,
        )
        in_progress = np.where(carrying, biased, in_progress)
    return in_progress


def sum_spread(count: np.ndarray, cv2: float, z: np.ndarray) -> np.ndarray:
    """queueing_kernels._sum_spread, array by array."""
    spread2 = np.log1p(cv2 / np.maximum(count, 1e-300)) if cv2 > 0 else np.zeros(count.shape)
    factor: np.ndarray = np.where(count > 0, np.exp(np.sqrt(spread2) * z - spread2 / 2.0), 1.0)
    return factor


def sample(rep: _Replica, op: _OperatingPoint, pts: _Points) -> _Latencies:
    """queueing_latency._sample's latencies, array by array."""
    lam, occ, occupancy, c = op.lam, op.occ, op.occupancy, rep.slots
    part = pts.part
    p_wait = occ.p_wait
    waits = pts.u_wait >= 1.0 - p_wait
    seen = np.where(waits, float(c), np.minimum(np.searchsorted(occ.cdf_below, pts.u_wait), c).astype(float))
    wait_s = np.where(waits, op.conditional_wait_s * (math.log(max(p_wait, 1e-300)) - np.log1p(-pts.u_wait)), 0.0)
    admitted = np.minimum(seen + 1.0, c)
    life = np.clip(1.0 + (1.0 - _LIFE_AVERAGE_SHRINK) * occupancy + _LIFE_AVERAGE_SHRINK * seen, 1.0, c)
    m0 = occ.flat_arrivals_per_step
    per_arrival_s = np.interp(life, occ.grid, op.per_arrival_s) if m0 > 0 else np.zeros(life.shape)
    prompts, decodes, own = rep.prompts[part], rep.decodes[part], rep.own_attended[part]
    life_decode_s = np.interp(life, occ.grid, occ.t_decode)
    expected = m0 * decodes * life_decode_s / float(np.interp(op.occupancy, occ.grid, occ.t_decode))
    burst = gamma_unit_quantile(pts.z_wait, (op.burst_dispersion - 1.0) / np.maximum(expected, 1e-12))
    arrivals = poisson_quantile(pts.u_life_arrivals, pts.z_life_arrivals, expected * burst)
    spread2 = np.log1p(rep.prompt_cv2 / np.maximum(arrivals, 1.0))
    interference = arrivals * per_arrival_s * np.exp(np.sqrt(spread2) * pts.z_interference - spread2 / 2.0)
    tpot = life_decode_s + interference / np.maximum(decodes, 1.0)
    w = op.above_weight
    in_progress = (1.0 - w) * step_in_progress(rep, op, op.below, pts) + w * step_in_progress(rep, op, op.above, pts)
    residual = np.where(seen > 0, pts.u_residual * in_progress, 0.0)
    others = admitted - 1.0
    kv = others * rep.decode_context_mean
    from scipy.special import ndtri

    u = pts.u_step_in_progress
    queued = u >= 1.0 - op.budget_rho
    tail = np.clip(1.0 - (1.0 - u) / max(op.budget_rho, 1e-300), 1e-9, 1.0 - 1e-9)
    budget_wait = np.where(queued, op.budget_wait_mean_s * gamma_unit_quantile(ndtri(tail), op.budget_wait_cv2), 0.0)
    # from the start of the step in progress to the start of the (last) step carrying the prompt's tokens
    window = np.where(seen > 0, in_progress - residual + np.maximum(budget_wait, residual), budget_wait)
    if rep.chunk_tokens is None:
        # a queued prompt's wait holds the work of those ahead of it: only those behind it join its step
        behind_only = np.where((seen > 0) & (budget_wait <= 0.0), window, np.maximum(budget_wait, residual))
        mates = poisson_quantile(pts.u_stepmates, pts.z_stepmates, lam * behind_only)
        mates_tokens = mates * rep.prompt_mean * sum_spread(mates, rep.prompt_cv2, pts.z_interference)
        prefill_s = step_seconds(rep.sm, others + prompts + mates_tokens, kv, kv + own + mates_tokens * rep.prefill_position_mean)
    else:
        cap = np.maximum(1.0, rep.chunk_tokens - admitted)
        chunks = np.ceil(prompts / cap)
        last = prompts - (chunks - 1.0) * cap
        full_attended = (own - last * (prompts - last) - last * (last + 1.0) / 2.0) / np.maximum(chunks - 1.0, 1.0)
        full_s = step_seconds(rep.sm, others + cap, kv, kv + full_attended)
        behind = window + (chunks - 1.0) * full_s
        mates = poisson_quantile(pts.u_stepmates, pts.z_stepmates, lam * behind)
        filled = np.minimum(cap - last, mates * rep.prompt_mean * sum_spread(mates, rep.prompt_cv2, pts.z_interference))
        prefill_s = (chunks - 1.0) * full_s + step_seconds(
            rep.sm,
            others + last + filled,
            kv + prompts - last,
            kv + last * (prompts - last) + last * (last + 1.0) / 2.0 + filled * rep.prefill_position_mean,
        )
    ttft = wait_s + np.maximum(budget_wait, residual) + prefill_s
    return _Latencies(ttft=ttft, tpot=tpot, e2e=ttft + decodes * tpot, wait=wait_s)


def occupancy_at(rep: _Replica, lam: float, rho: float, shape_mean: float) -> dict[str, object]:
    """queueing_occupancy._occupancy_at's distribution, array by array."""
    c = rep.slots
    mu = max(shape_mean, 1e-9)
    running = min(mu, float(c))
    grid = rep.grid
    steps = float(np.interp(running, grid, rep.steps_grid))
    m0 = min(running / steps, rep.admissions_cap) if lam > 0 else 0.0
    flat_mean = rep.step_mean(m0)
    low, high = max(running - 1.0, 0.0), min(running + 1.0, float(c))
    t_here, t_low, t_high = np.interp((running, low, high), grid, flat_mean)
    per_arrival_s = (t_here - float(np.interp(running, grid, rep.t_decode))) / m0 if m0 > 0 else 0.0
    theta_pf = min(lam * per_arrival_s, queueing_occupancy._MAX_FEEDBACK)
    theta_b = min(lam * steps * float(t_high - t_low) / max(high - low, 1e-9), queueing_occupancy._MAX_FEEDBACK)
    cluster = (1.0 + theta_pf**2 * rep.prompt_cv2) / (1.0 - theta_pf) ** 2
    dispersion = 1.0 + (cluster / (1.0 - theta_b) ** 2 - 1.0) * rep.life_overlap
    m_grid = np.minimum(m0 * np.maximum(0.0, 1.0 + (1.0 - theta_pf) * (grid / mu - 1.0)), rep.admissions_cap)
    t_mean = rep.step_mean(m_grid)
    n = np.arange(c + 1, dtype=float)
    if dispersion > 1.0 + 1e-9:
        q = 1.0 - 1.0 / dispersion
        r = mu / (dispersion - 1.0)
        log_w = gammaln(n + r) - (gammaln(r) + gammaln(n + 1.0)) + (r * math.log1p(-q) + n * math.log(q))
    else:
        log_w = n * math.log(mu) - mu - gammaln(n + 1.0)
    w = np.exp(log_w - log_w.max())
    tail = w[c] / (1.0 - rho)
    body = w[:c]
    total = body.sum() + tail
    departures = n / (rep.steps_at_n * np.interp(n, grid, t_mean))
    return {
        "dispersion": dispersion,
        "feedback_prefill": theta_pf,
        "feedback_batch": theta_b,
        "mean_running": (float(n[:c] @ body) + c * tail) / total,
        "p_wait": tail / total,
        "cdf_below": np.cumsum(body) / total,
        "t_mean": t_mean,
        "flat_t_mean": flat_mean,
        "arrivals_per_step": m_grid,
        "departure_rate_rps": (float(departures[:c] @ body) + float(departures[c]) * tail) / total,
        "flat_arrivals_per_step": m0,
    }
