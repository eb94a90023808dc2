"""The queueing model's inner loops (planner/queueing.py), compiled with Numba: the per-point
arithmetic of the Sobol sample (`sample_latencies`: each point's TTFT, TPOT, E2E and slot wait in
one pass) and one evaluation of the occupancy–step-time fixed point (`occupancy_at`).

Every sample quantity depends on its own point and on the rate-level state only, so a loop that
finishes one point before the next replaces ~150 NumPy passes over 8,192-point arrays and their
temporaries, and the exact Poisson inversion stops per point instead of walking the whole sample
as long as its slowest point needs. The fixed point is evaluated 7 times per prediction on arrays
of 33 and c + 1 entries, where NumPy's per-call overhead was most of the cost. The formulas are
queueing.py's, term by term; its module docstring says what they model. Sums run in another order
and transcendentals come from the compiled math library, so results agree with NumPy's to ulps.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from planner.step_model import COEFFICIENTS, StepModel

#: Index of each step-model coefficient in the `sm` array (`step_model_coefficients`: the order of
#: planner/step_model.py's COEFFICIENTS); then 1/bandwidth and 1/FLOP/s, so a step time multiplies
#: where it would divide (several step times per sample point); then the speculation's k + 1, k and
#: draft coefficients (1, 0, 0, … without speculation: `_verify_s` is then never called).
(
    DENSE,
    EXPERT,
    EXPERTS,
    PER_TOKEN,
    MOE_LAYERS,
    KV_BYTES,
    FLOPS,
    ATTENTION,
    BANDWIDTH,
    COMPUTE,
    COMM_PER_TOKEN,
    COMM_LATENCY,
    OVERHEAD,
    OVERLAP,
    SECONDS_PER_BYTE,
    SECONDS_PER_FLOP,
    VERIFY_TOKENS,
    DRAFT_TOKENS,
    DRAFT_WEIGHT,
    DRAFT_KV_BYTES,
    DRAFT_FLOPS,
    DRAFT_ATTENTION,
) = range(22)

#: Index of each rate-level scalar in the `op` array (`queueing._sample` fills it).
(
    SLOTS,
    P_WAIT,
    LOG_P_WAIT,
    CONDITIONAL_WAIT,
    OCCUPANCY,
    M0,
    BURST_VARIANCE_NUMERATOR,
    PROMPT_CV2,
    ABOVE_WEIGHT,
    ROW_BELOW_N,
    ROW_ABOVE_N,
    CHUNK_TOKENS,
    PROMPT_MEAN,
    DECODE_CONTEXT,
    PREFILL_POSITION,
    LAMBDA,
    LIFE_SHRINK,
    PREFILL_CACHED_READ,
) = range(18)
OPERATING_POINT_SIZE = 18

#: Above this mean the Poisson quantile uses the Cornish–Fisher expansion; below it the exact CDF
#: walk, at most this many terms (queueing.py's `_POISSON_NORMAL_MEAN` and walk length).
POISSON_NORMAL_MEAN = 12.0
POISSON_WALK = int(3.0 * POISSON_NORMAL_MEAN) + 11
#: 1/j for the walk's pmf_j = pmf_{j−1}·m·(1/j): a multiplication instead of a division in a loop
#: whose every step waits on the last (measured: the kernel 3.4 → 2.3 ms on 8,192 points). It
#: rounds differently from m/j by an ulp, which moves a count only where u sits within an ulp of
#: a CDF step.
_RECIPROCALS = np.concatenate((np.zeros(1), 1.0 / np.arange(1.0, POISSON_WALK + 1.0)))


def step_model_coefficients(sm: StepModel) -> np.ndarray:
    """A `StepModel`'s coefficients in the kernel's order."""
    values = [float(getattr(sm, name)) for name in COEFFICIENTS]
    spec = sm.speculation
    draft = (
        [0.0] * 5
        if spec is None
        else [
            float(spec.draft_tokens),
            spec.draft_weight_bytes,
            spec.draft_kv_bytes_per_token,
            spec.draft_flops_per_token,
            spec.draft_attention_flops_per_context_token,
        ]
    )
    return np.array(
        [*values, 1.0 / sm.memory_bandwidth_bytes_per_s, 1.0 / sm.compute_flops_per_s, float(sm.verify_tokens), *draft]
    )


@njit(cache=True, nogil=True)
def _step_s(sm: np.ndarray, new: float, kv: float, attended: float) -> float:
    """`StepModel.step_s` for one step (the same formula and coefficients)."""
    weights = sm[DENSE]
    if sm[EXPERT] > 0.0:
        touched = sm[EXPERTS] * -math.expm1(new * math.log1p(-sm[PER_TOKEN] / sm[EXPERTS]))  # E·(1−(1−k/E)^n)
        weights = weights + sm[MOE_LAYERS] * touched * sm[EXPERT]
    mem = (weights + kv * sm[KV_BYTES]) * sm[SECONDS_PER_BYTE]  # bytes / BW
    comp = (new * sm[FLOPS] + attended * sm[ATTENTION]) * sm[SECONDS_PER_FLOP]  # FLOPs / F
    comm = new * sm[COMM_PER_TOKEN] + sm[COMM_LATENCY] if new > 0.0 else 0.0
    step: float = max(mem, comp) + (1.0 - sm[OVERLAP]) * min(mem, comp) + comm + sm[OVERHEAD]  # sm is float64
    return step


@njit(cache=True, nogil=True)
def _verify_s(sm: np.ndarray, decoders: float, kv: float, prefill: float, prefill_kv: float, prefill_attended: float) -> float:
    """`StepModel.verify_step_s`: `decoders` sequences verify k + 1 tokens each, plus the prefill and the draft."""
    v = sm[VERIFY_TOKENS]
    attended = v * kv + decoders * (v - 1.0) * v / 2.0 + prefill_attended  # (k+1)·c + k(k+1)/2 per sequence
    target = _step_s(sm, decoders * v + prefill, kv + prefill_kv, attended)
    if decoders <= 0.0:
        return target
    mem = (sm[DRAFT_WEIGHT] + kv * sm[DRAFT_KV_BYTES]) * sm[SECONDS_PER_BYTE]
    comp = (decoders * sm[DRAFT_FLOPS] + kv * sm[DRAFT_ATTENTION]) * sm[SECONDS_PER_FLOP]
    draft: float = sm[DRAFT_TOKENS] * (max(mem, comp) + (1.0 - sm[OVERLAP]) * min(mem, comp))  # k × combine
    return target + draft


@njit(cache=True, nogil=True)
def _interp(x: float, xp: np.ndarray, fp: np.ndarray) -> float:
    """`np.interp` at one point (constant beyond the ends)."""
    if x <= xp[0]:
        first: float = fp[0]  # fp is float64 (an element reads as Any to mypy)
        return first
    last = xp.size - 1
    if x >= xp[last]:
        final: float = fp[last]
        return final
    low, high = 0, last
    while high - low > 1:
        middle = (low + high) // 2
        if xp[middle] <= x:
            low = middle
        else:
            high = middle
    slope = (fp[low + 1] - fp[low]) / (xp[low + 1] - xp[low])
    between: float = slope * (x - xp[low]) + fp[low]
    return between


@njit(cache=True, nogil=True)
def _interp_grid(x: float, grid: np.ndarray, fp: np.ndarray) -> float:
    """`_interp` on an evenly spaced grid (the occupancy grid is `np.linspace(0, c, G)`): the cell
    found by division, then moved by one if rounding put x outside it, so the same cell and the
    same value as the search; no data-dependent branches to mispredict."""
    last = grid.size - 1
    if x <= grid[0]:
        first: float = fp[0]  # fp is float64 (an element reads as Any to mypy)
        return first
    if x >= grid[last]:
        final: float = fp[last]
        return final
    low = min(int((x - grid[0]) / (grid[last] - grid[0]) * last), last - 1)
    if grid[low] > x:
        low -= 1
    elif grid[low + 1] <= x:
        low += 1
    slope = (fp[low + 1] - fp[low]) / (grid[low + 1] - grid[low])
    between: float = slope * (x - grid[low]) + fp[low]
    return between


@njit(cache=True, nogil=True)
def _counts_below(table: np.ndarray, sorted_u: np.ndarray, order: np.ndarray, out: np.ndarray) -> None:
    """`out[order[t]] = np.searchsorted(table, sorted_u[t])`: one merge of the ascending uniforms
    with the ascending table (a binary search per point costs a mispredicted branch per level)."""
    below = 0
    for t in range(sorted_u.size):
        u = sorted_u[t]
        while below < table.size and table[below] < u:
            below += 1
        out[order[t]] = below


@njit(cache=True, nogil=True)
def _poisson_quantile(u: float, z: float, mean: float) -> float:
    """Smallest k with P(K ≤ k) ≥ u, K ~ Poisson(mean): the exact CDF walk for small means, else
    Cornish–Fisher with continuity correction (z = Φ⁻¹(u))."""
    if mean > POISSON_NORMAL_MEAN:
        return max(math.ceil(mean + math.sqrt(mean) * z + (z * z - 1.0) / 6.0 - 0.5), 0.0)
    pmf = math.exp(-mean)
    cdf = pmf
    k = 0
    for j in range(1, POISSON_WALK + 1):
        if not u > cdf:
            break
        k = j
        pmf = pmf * mean * _RECIPROCALS[j]
        cdf = cdf + pmf
    return float(k)


@njit(cache=True, nogil=True)
def _gamma_unit_quantile(z: float, variance: float) -> float:
    """Wilson–Hilferty quantile of a gamma of mean 1 and the given variance at the normal quantile z."""
    g = max(1.0 - variance / 9.0 + math.sqrt(variance / 9.0) * z, 0.0)
    return g * g * g


@njit(cache=True, nogil=True)
def _sum_spread(count: float, cv2: float, z: float) -> float:
    """The sum of `count` prompts over count·E[p]: a lognormal factor of mean 1 and variance cv²/count
    (the sum's own, Fenton–Wilkinson moment match), at the normal quantile z."""
    if count <= 0.0 or cv2 <= 0.0:
        return 1.0
    spread2 = math.log1p(cv2 / count)
    return math.exp(math.sqrt(spread2) * z - spread2 / 2.0)


@njit(cache=True, nogil=True)
def _step_in_progress(
    sm: np.ndarray, op: np.ndarray, durations: np.ndarray, below: int, n_row: float, size_biased: float
) -> float:
    """The step in progress at arrival for one grid row, its type the one whose length-biased CDF
    the point's uniform falls in (`below` entries of the CDF under it); a step carrying prompts
    (unchunked) is as long as its size-biased prompt makes it (reading its cached prefix, if any)."""
    kind = min(below, durations.size - 1)
    if op[CHUNK_TOKENS] <= 0.0 and 1 <= kind < durations.size - 1:
        tokens = (kind - 1.0) * op[PROMPT_MEAN] + size_biased
        context = n_row * op[DECODE_CONTEXT]
        cached_kv = tokens * op[PREFILL_CACHED_READ]
        if sm[DRAFT_TOKENS] > 0.0:
            return _verify_s(sm, n_row, context, tokens, cached_kv, tokens * op[PREFILL_POSITION])
        return _step_s(sm, n_row + tokens, context + cached_kv, context + tokens * op[PREFILL_POSITION])
    duration: float = durations[kind]  # durations is float64 (an element reads as Any to mypy)
    return duration


# Over 80 lines (the house limit) by its signature: Numba takes each array as its own argument
# (no dataclasses), and the per-point loop is one pass on purpose (see the module docstring).
@njit(cache=True, nogil=True)
def sample_latencies(
    sm: np.ndarray,
    op: np.ndarray,
    grid: np.ndarray,
    cdf_below: np.ndarray,
    t_decode: np.ndarray,
    per_arrival: np.ndarray,
    below_durations: np.ndarray,
    below_cdf: np.ndarray,
    above_durations: np.ndarray,
    above_cdf: np.ndarray,
    u_wait: np.ndarray,
    log_wait_tail: np.ndarray,
    z_wait: np.ndarray,
    u_life: np.ndarray,
    z_life: np.ndarray,
    z_interference: np.ndarray,
    u_residual: np.ndarray,
    u_stepmates: np.ndarray,
    z_stepmates: np.ndarray,
    wait_sorted: np.ndarray,
    wait_order: np.ndarray,
    step_in_progress_sorted: np.ndarray,
    step_in_progress_order: np.ndarray,
    prompts: np.ndarray,
    cached: np.ndarray,
    decodes: np.ndarray,
    own_attended: np.ndarray,
    size_biased: np.ndarray,
    budget_wait: np.ndarray,
    queued: np.ndarray,
    ttft: np.ndarray,
    tpot: np.ndarray,
    e2e: np.ndarray,
    wait: np.ndarray,
) -> None:
    """TTFT, TPOT, E2E and the slot wait (seconds) at each point, written into the last four arrays."""
    size = u_wait.size
    occupancy_seen = np.empty(size, dtype=np.int64)  # how many occupancies n have P(N ≤ n) < u
    kind_below, kind_above = np.empty(size, dtype=np.int64), np.empty(size, dtype=np.int64)
    _counts_below(cdf_below, wait_sorted, wait_order, occupancy_seen)
    _counts_below(below_cdf, step_in_progress_sorted, step_in_progress_order, kind_below)
    _counts_below(above_cdf, step_in_progress_sorted, step_in_progress_order, kind_above)
    c = op[SLOTS]
    p_wait = op[P_WAIT]
    shrink = op[LIFE_SHRINK]
    chunked = op[CHUNK_TOKENS] > 0.0
    speculating = sm[DRAFT_TOKENS] > 0.0
    lam, p_mean, dcm, ppm = op[LAMBDA], op[PROMPT_MEAN], op[DECODE_CONTEXT], op[PREFILL_POSITION]
    pcr = op[PREFILL_CACHED_READ]
    weight = op[ABOVE_WEIGHT]
    decode_at_mean = _interp_grid(op[OCCUPANCY], grid, t_decode)
    for i in range(size):
        # the slot: wait when the batch is full (probability P(wait)), else the occupancy seen
        if u_wait[i] >= 1.0 - p_wait:
            seen = c
            wait_s = op[CONDITIONAL_WAIT] * (op[LOG_P_WAIT] - log_wait_tail[i])  # −log((1 − u)/P(wait))
        else:
            seen = float(min(occupancy_seen[i], int(c)))
            wait_s = 0.0
        admitted = min(seen + 1.0, c)
        life = min(max(1.0 + (1.0 - shrink) * op[OCCUPANCY] + shrink * seen, 1.0), c)

        # TPOT: the decode step at the life-average occupancy + the prefill interference of the
        # arrivals during the life (a gamma-mixed Poisson count, a lognormal size per arrival)
        decode_steps = decodes[i]
        life_decode_s = _interp_grid(life, grid, t_decode)
        # the arrivals during the life are Poisson in time, so they scale with the life's own duration:
        # a fuller batch's slower decode steps let in proportionally more prompts, which slow it further
        expected = op[M0] * decode_steps * life_decode_s / decode_at_mean
        burst = _gamma_unit_quantile(z_wait[i], op[BURST_VARIANCE_NUMERATOR] / max(expected, 1e-12))
        arrivals = _poisson_quantile(u_life[i], z_life[i], expected * burst)
        spread2 = math.log1p(op[PROMPT_CV2] / max(arrivals, 1.0))
        per_arrival_s = _interp_grid(life, grid, per_arrival) if op[M0] > 0.0 else 0.0
        interference = arrivals * per_arrival_s * math.exp(math.sqrt(spread2) * z_interference[i] - spread2 / 2.0)
        tpot_i = life_decode_s + interference / max(decode_steps, 1.0)

        # TTFT: the wait + the residual of the step in progress + the prefill
        in_progress = (1.0 - weight) * _step_in_progress(
            sm, op, below_durations, kind_below[i], op[ROW_BELOW_N], size_biased[i]
        ) + weight * _step_in_progress(sm, op, above_durations, kind_above[i], op[ROW_ABOVE_N], size_biased[i])
        residual = u_residual[i] * in_progress if seen > 0.0 else 0.0
        decode_others = admitted - 1.0
        decode_kv = decode_others * dcm
        p = prompts[i]
        cp = cached[i]  # the prompt's tokens in a prefix cache: read and attended to, not prefilled
        if not chunked:
            # a queued prompt waits out the later of the prefill server's wait and the step in progress;
            # its step carries every prompt that arrived from the start of the step in progress until it starts
            bw = budget_wait[i]
            delay_unchunked = max(bw, residual)
            # (a queued prompt's wait already holds the work of the prompts ahead of it: only those behind it join)
            window = (in_progress - residual + delay_unchunked) if seen > 0.0 and bw <= 0.0 else delay_unchunked
            mates = _poisson_quantile(u_stepmates[i], z_stepmates[i], lam * window)
            mates_tokens = mates * p_mean * _sum_spread(mates, op[PROMPT_CV2], z_interference[i])
            mates_kv = cp + mates_tokens * pcr  # the cached KV the step's prefills read
            if speculating:
                prefill_s = _verify_s(
                    sm, decode_others, decode_kv, p + mates_tokens, mates_kv, own_attended[i] + mates_tokens * ppm
                )
            else:
                prefill_s = _step_s(
                    sm,
                    decode_others + p + mates_tokens,
                    decode_kv + mates_kv,
                    decode_kv + own_attended[i] + mates_tokens * ppm,
                )
            delay = delay_unchunked
        else:
            bw = budget_wait[i]
            delay_chunked = max(bw, residual)  # a queued prompt waits out the later of the budget wait and the step in progress
            cap = max(1.0, op[CHUNK_TOKENS] - admitted * sm[VERIFY_TOKENS])  # C − n·(k+1)
            chunks = math.ceil(p / cap)
            last = p - (chunks - 1.0) * cap
            last_attended = last * (p - last + cp) + last * (last + 1.0) / 2.0  # at position c + p − last
            full_attended = (own_attended[i] - last_attended) / max(chunks - 1.0, 1.0)
            if speculating:
                full_s = _verify_s(sm, decode_others, decode_kv, cap, cp, full_attended)
            else:
                full_s = _step_s(sm, decode_others + cap, decode_kv + cp, decode_kv + full_attended)
            # the prompts that share its last step, up to the budget: every one that arrived from the start
            # of the step in progress (those before it are admitted at the same step start) until that last
            # step starts — while it waits and while its earlier chunks run. Taking only those behind it
            # put TTFT p99 of the corpus plans with a 16,384-token budget 10-25 % low (bench/plan_corpus.py).
            # Their prompt tokens are a sum of `mates` prompts (`_sum_spread`, at the interference's normal
            # quantile: a TTFT and a TPOT draw of one point, so E2E sees them comonotone, a conservative tie).
            window = (in_progress - residual + delay_chunked) if seen > 0.0 else bw
            behind_s = window + (chunks - 1.0) * full_s
            mates = _poisson_quantile(u_stepmates[i], z_stepmates[i], lam * behind_s)
            filled = min(cap - last, mates * p_mean * _sum_spread(mates, op[PROMPT_CV2], z_interference[i]))
            if speculating:
                last_s = _verify_s(
                    sm,
                    decode_others,
                    decode_kv,
                    last + filled,
                    p - last + cp + filled * pcr,
                    last_attended + filled * ppm,
                )
            else:
                last_s = _step_s(
                    sm,
                    decode_others + last + filled,
                    decode_kv + p - last + cp + filled * pcr,
                    decode_kv + last_attended + filled * ppm,
                )
            prefill_s = (chunks - 1.0) * full_s + last_s
            delay = delay_chunked
        ttft[i] = wait_s + delay + prefill_s
        tpot[i] = tpot_i
        e2e[i] = ttft[i] + decode_steps * tpot_i
        wait[i] = wait_s


@njit(cache=True, nogil=True)
def _poisson_step_mean(
    m: float, row: int, k: np.ndarray, log_k_factorial: np.ndarray, carry_s: np.ndarray, spill_steps: np.ndarray
) -> float:
    """Mean step time of grid row `row` with Poisson(m) prompts arriving per step (`_Replica.step_mean`)."""
    m = max(m, 1e-300)
    log_m = math.log(m)
    carried = 0.0
    steps = 0.0
    for j in range(k.size):
        pmf = math.exp(k[j] * log_m - m - log_k_factorial[j])  # the pmf's normalisation cancels
        carried += pmf * carry_s[row, j]
        steps += pmf * spill_steps[row, j]
    return carried / steps


@njit(cache=True, nogil=True)
def prefill_cluster_dispersion(theta: float, size_cv2: float) -> float:
    """Var/mean of the arrivals a prefill stall keeps in the batch: the index of dispersion of a
    Poisson cluster process whose clusters are Galton–Watson trees (Daley & Vere-Jones, An
    Introduction to the Theory of Point Processes I, 2003, §6.3: Var/mean = E[Z²]/E[Z] for cluster
    size Z). An arrival's stall S holds every running request back by S, so it keeps Poisson(λS)
    more arrivals in the batch: offspring mean θ = λE[S], variance θ + θ²·cv²(S). With
    E[Z] = 1/(1−θ) and Var(Z) = Var(offspring)/(1−θ)³ this is (1 + θ²·cv²(S))/(1−θ)²: the
    linearised 1/(1−θ)² when every stall is the same length, more when prompt lengths (and so the
    stalls, prefill time ∝ prompt tokens) vary."""
    return (1.0 + theta * theta * size_cv2) / ((1.0 - theta) * (1.0 - theta))


@njit(cache=True, nogil=True)
def occupancy_dispersion(theta_pf: float, theta_b: float, size_cv2: float, overlap: float) -> float:
    """Var/mean of the number running: 1 + (D_cluster/(1 − θ_b)² − 1)·overlap.

    The prefill stalls group the arrivals into clusters (`prefill_cluster_dispersion`); a fuller
    batch makes every step slower by dT̄/dn, which keeps θ_b = λ·steps·dT̄/dn more requests per extra
    running one, so a fluctuation of the occupancy is amplified by 1/(1 − θ_b) and its variance by
    the square. What is beyond Poisson (D − 1) comes from requests held in the batch together, and
    counts as far as their lives overlap (`overlap` = E[min(L₁, L₂)]/E[L], M^X/G/∞'s batch term).
    Chosen against the simulator over the 49 corpus plans of bench/plan_corpus.py at ρ ≤ 0.85 among
    derived forms (none with a fitted constant): mean |log error| of the dispersion 0.09 against
    0.14 for the earlier 1/((1 − θ_b)(1 − θ_pf)²) (docs/queueing-fidelity.md)."""
    excess = prefill_cluster_dispersion(theta_pf, size_cv2) / ((1.0 - theta_b) * (1.0 - theta_b)) - 1.0
    return 1.0 + excess * overlap


# Over 80 lines (the house limit) by its 18-argument signature, and it answers a plain 8-tuple:
# Numba takes arrays one by one and returns tuples, not dataclasses; `queueing_occupancy._occupancy_at`
# names the eight numbers in an `_Occupancy` at once.
@njit(cache=True, nogil=True)
def occupancy_at(
    lam: float,
    rho: float,
    shape_mean: float,
    max_feedback: float,
    prompt_cv2: float,
    overlap: float,
    admissions_cap: float,
    grid: np.ndarray,
    steps_grid: np.ndarray,
    t_decode: np.ndarray,
    k: np.ndarray,
    log_k_factorial: np.ndarray,
    carry_s: np.ndarray,
    spill_steps: np.ndarray,
    log_n_factorial: np.ndarray,
    steps_at_n: np.ndarray,
    flat_mean: np.ndarray,
    arrivals_per_step: np.ndarray,
    t_mean: np.ndarray,
    cdf_below: np.ndarray,
) -> tuple[float, float, float, float, float, float, float, float]:
    """The occupancy distribution for a negative binomial of mean `shape_mean` (planner/queueing_occupancy.py's
    `_occupancy_at`): fills the last four arrays and returns (μ, dispersion, θ_pf, θ_b, mean
    running L, P(wait), departure rate, arrivals per step m0)."""
    c = log_n_factorial.size - 1
    rows = grid.size
    mu = max(shape_mean, 1e-9)
    running = min(mu, float(c))
    steps = _interp_grid(running, grid, steps_grid)
    m0 = min(running / steps, admissions_cap) if lam > 0 else 0.0  # arrivals per step: λ·T̄ = L/steps by Little's law
    for row in range(rows):
        flat_mean[row] = _poisson_step_mean(m0, row, k, log_k_factorial, carry_s, spill_steps)
    low, high = max(running - 1.0, 0.0), min(running + 1.0, float(c))
    t_here, t_low, t_high = (
        _interp_grid(running, grid, flat_mean),
        _interp_grid(low, grid, flat_mean),
        _interp_grid(high, grid, flat_mean),
    )
    per_arrival_s = (t_here - _interp_grid(running, grid, t_decode)) / m0 if m0 > 0 else 0.0
    slope = (t_high - t_low) / max(high - low, 1e-9)
    theta_pf = min(lam * per_arrival_s, max_feedback)
    theta_b = min(lam * steps * slope, max_feedback)
    dispersion = occupancy_dispersion(theta_pf, theta_b, prompt_cv2, overlap)  # Var/mean of the occupancy
    # A fuller batch means a recent burst of arrivals (capped by the admissions a step can see).
    for row in range(rows):
        arrivals_per_step[row] = min(m0 * max(0.0, 1.0 + (1.0 - theta_pf) * (grid[row] / mu - 1.0)), admissions_cap)
        t_mean[row] = _poisson_step_mean(arrivals_per_step[row], row, k, log_k_factorial, carry_s, spill_steps)
    # NB(r, q) log-pmf (Poisson when the dispersion is 1), then weights relative to the largest
    negative_binomial = dispersion > 1.0 + 1e-9
    if negative_binomial:
        q = 1.0 - 1.0 / dispersion
        r = mu / (dispersion - 1.0)
        base, log_q = r * math.log1p(-q) - math.lgamma(r), math.log(q)
    else:
        log_mu = math.log(mu)
    largest = -math.inf
    log_w = np.empty(c + 1)
    for n in range(c + 1):
        if negative_binomial:
            log_w[n] = math.lgamma(n + r) - log_n_factorial[n] + base + n * log_q
        else:
            log_w[n] = n * log_mu - mu - log_n_factorial[n]
        largest = max(largest, log_w[n])
    body = 0.0
    running_sum = 0.0
    departures_sum = 0.0
    for n in range(c):
        w = math.exp(log_w[n] - largest)
        body += w
        cdf_below[n] = body
        running_sum += n * w
        departures_sum += n / (steps_at_n[n] * _interp_grid(float(n), grid, t_mean)) * w  # completions per second in state n
    tail = math.exp(log_w[c] - largest) / (
        1.0 - rho
    )  # n ≥ c: the queue beyond a full batch drains at the saturation rate, ratio ρ
    total = body + tail
    for n in range(c):
        cdf_below[n] /= total
    departures_full = c / (steps_at_n[c] * _interp_grid(float(c), grid, t_mean))
    mean_running = (running_sum + c * tail) / total
    departure_rate = (departures_sum + departures_full * tail) / total
    return mu, dispersion, theta_pf, theta_b, mean_running, tail / total, departure_rate, m0


@njit(cache=True, nogil=True)
def carry_tables(
    sm: np.ndarray,
    grid: np.ndarray,
    cap: np.ndarray,
    k: np.ndarray,
    spread: np.ndarray,
    prompt_mean: float,
    decode_context: float,
    position: float,
    cached_read: float,
) -> tuple[np.ndarray, np.ndarray]:
    """`queueing_replica.step_tables`' carry step and spill on the occupancy grid (rows: n; columns:
    k prompts arriving), each the mean over the prompt grid's points: k arrivals bring
    max(k·E[p] + √k·spread, 0) tokens, the step carries at most `cap` (∞ without chunking) and the
    rest spills into cap-sized steps. A step with n decoders is `_verify_s` (which is `_step_s`
    without speculation: k + 1 = 1 and no draft), term by term the NumPy tables' formula; sums run
    point by point, so entries agree with NumPy's to ulps."""
    rows, columns, points = grid.size, k.size, spread.size
    t_carry = np.empty((rows, columns))
    spill = np.empty((rows, columns))
    for i in range(rows):
        n, c = grid[i], cap[i]
        decode_kv = n * decode_context
        chunked = math.isfinite(c)
        for j in range(columns):
            base, root = k[j] * prompt_mean, math.sqrt(k[j])
            step_sum = 0.0
            spill_sum = 0.0
            for q in range(points):
                arriving = max(base + root * spread[q], 0.0)
                carried = min(arriving, c)
                if chunked:
                    spill_sum += max(arriving - c, 0.0) / c
                step_sum += _verify_s(sm, n, decode_kv, carried, carried * cached_read, carried * position)
            t_carry[i, j] = step_sum / points
            spill[i, j] = spill_sum / points
    return t_carry, spill
