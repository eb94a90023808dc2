"""The rate-independent part of one replica: slots, step-time tables on an occupancy grid, the
length samples it draws on, and its saturation rate (steps 1, 2 and 5 of planner/queueing.py's
docstring).

Built once per (step model, length mix, serving, KV capacity) and cached: the optimizer, the rate
searches and the ρ curve ask for one configuration at many rates, and everything here is the same
at each. The underscored names are shared among the planner/queueing_*.py modules only.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import numpy as np
from scipy.special import gammaln

from planner import queueing_kernels
from planner.errors import PlannerInputError
from planner.plan_result import SlotsLimitedBy
from planner.queueing_sample import _output_sample, _prompt_sample, _read_only
from planner.step_model import StepModel
from planner.workload import LengthDistribution, Serving, Workload, cached_moments

#: Points of the occupancy grid on which step times are evaluated (then interpolated): they are
#: smooth in n, and a fixed grid keeps a prediction's cost independent of the batch limit.
_OCCUPANCY_GRID_POINTS = 33


# --- vectorised step time -----------------------------------------------------------------------


def step_seconds(sm: StepModel, new_tokens: np.ndarray, kv_tokens_read: np.ndarray, attended_tokens: np.ndarray) -> np.ndarray:
    """`StepModel.step_s` element-wise over arrays (same formula, same coefficients)."""
    new = np.asarray(new_tokens, dtype=float)
    weights: np.ndarray | float = sm.dense_weight_bytes
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


def verify_seconds(
    sm: StepModel,
    decoders: np.ndarray,
    decode_kv: np.ndarray,
    prefill: np.ndarray,
    prefill_attended: np.ndarray,
    prefill_kv: np.ndarray | float = 0.0,
) -> np.ndarray:
    """`StepModel.verify_step_s` element-wise: decoders verify k + 1 tokens each, plus the draft's
    passes (`prefill_kv`: cached KV tokens the prefill reads)."""
    spec = sm.speculation
    if spec is None:
        return step_seconds(sm, decoders + prefill, decode_kv + prefill_kv, decode_kv + prefill_attended)
    v = sm.verify_tokens
    attended = v * decode_kv + decoders * (v - 1) * v / 2.0 + prefill_attended  # (k+1)·c + k(k+1)/2 per sequence
    target = step_seconds(sm, decoders * v + prefill, decode_kv + prefill_kv, attended)
    mem = (spec.draft_weight_bytes + decode_kv * spec.draft_kv_bytes_per_token) / sm.memory_bandwidth_bytes_per_s
    comp = (
        decoders * spec.draft_flops_per_token + decode_kv * spec.draft_attention_flops_per_context_token
    ) / sm.compute_flops_per_s
    draft = spec.draft_tokens * (np.maximum(mem, comp) + (1.0 - sm.memory_compute_overlap) * np.minimum(mem, comp))
    return np.asarray(target + np.where(decoders > 0, draft, 0.0))  # k × combine(draft memory, draft compute)


def prompt_context_moments(prompt: LengthDistribution, output: LengthDistribution) -> tuple[float, float, float]:
    """The decode context d, the prefill position π and the cached read per prefilled token r of a
    length mix whose prompts prefill p tokens after finding c in a prefix cache (c = 0 without one):

        d = E[p] + E[c] + E[o(o−1)/2]/E[o−1]   (a decode step reads the whole prompt, cached or not)
        π = E[p·c + p(p+1)/2] / E[p]            (a prefilled token attends to the cached tokens and those before it)
        r = E[c] / E[p]                          (the cached KV a prefill reads, per token prefilled)
    """
    cached_mean, cross = cached_moments(prompt)
    o_mean, o2 = output.mean, output.second_moment
    decode_context = (
        prompt.mean + cached_mean + (o2 - o_mean) / (2.0 * (o_mean - 1.0))
        if o_mean > 1.0 + 1e-9
        else prompt.mean + cached_mean + 1.0
    )  # E[p] + E[c] + E[o(o−1)/2]/E[o−1]
    position = (cross / prompt.mean) + (prompt.second_moment / prompt.mean + 1.0) / 2.0  # E[p·c]/E[p] + E[p(p+1)/2]/E[p]
    return decode_context, position, cached_mean / prompt.mean  # E[c]/E[p]


# --- the replica --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Replica:
    """Everything about a (step model, length mix, serving) that does not depend on the rate."""

    sm: StepModel
    slots: int
    slots_limited_by: SlotsLimitedBy
    chunk_tokens: int | None
    prompt_mean: float
    prompt_second_moment: float
    output_mean: float
    output_cv2: float
    decode_context_mean: float  # KV tokens read per decoding sequence, length-biased (cached prefix included)
    prefill_position_mean: float  # mean attended context per prefill token: E[p·c + p(p+1)/2]/E[p]
    prefill_cached_read: float  # cached KV tokens a prefill reads per token prefilled: E[c]/E[p] (0 without a cache)
    prompt_grid: np.ndarray  # mid-quantiles of p for ⌈p/budget⌉
    prompts: np.ndarray  # the Sobol sample of prompt lengths (tokens prefilled)
    cached: np.ndarray  # … and of the tokens each finds in a prefix cache (zeros without one)
    outputs: np.ndarray  # … and of output lengths
    size_biased_prompts: np.ndarray  # prompts drawn ∝ p·f(p) at `_U_BUDGET` (the prompt of a long step in progress)
    own_attended: np.ndarray  # p·c + p(p+1)/2: context a prompt's own prefill attends to
    decodes: np.ndarray  # o − 1 per sampled request
    has_tpot: np.ndarray  # o > 1 per sampled request
    tpot_requests: int  # how many sampled requests have a TPOT
    step_coefficients: np.ndarray  # the step model's coefficients in planner/queueing_kernels.py's order
    prompt_sample_moments: tuple[float, float, float]  # mean of p, p², p³ over the sampled prompts
    prompt_cv2: float
    #: E[min(L₁, L₂)]/E[L] over two requests' lives in steps: how much of a life two requests admitted
    #: together share (1 with fixed lengths), `life_overlap`'s answer
    life_overlap: float
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
        """Prefill tokens a step may carry beside n decodes (the chunk budget counts decodes, k + 1 per
        sequence when speculating)."""
        if self.chunk_tokens is None:
            return np.full(np.shape(n), np.inf)
        budget: np.ndarray = np.maximum(1.0, self.chunk_tokens - n * self.sm.verify_tokens)  # C − n·(k+1), at least one token
        return budget

    def step_mean(self, arrivals_per_step: np.ndarray | float) -> np.ndarray:
        """Mean step time on `grid`, k ~ Poisson(m) prompts arriving per step (m a scalar or one per grid row).

        Arrivals during one step add k·E[p] prefill tokens to the next, at most the budget C − n;
        the excess spills into extra full-budget steps (the tables are built in `_replica`).
        """
        if np.ndim(arrivals_per_step) == 0:
            m = max(float(arrivals_per_step), 1e-300)
            pmf = np.exp(self.k[0] * math.log(m) - m - self.log_k_factorial[0])  # Poisson(m) pmf, truncated at k_max
            mean: np.ndarray = (self.carry_s @ pmf) / (self.spill_steps @ pmf)  # the pmf's normalisation cancels
            return mean
        m = np.maximum(np.asarray(arrivals_per_step, dtype=float), 1e-300)[:, None]
        pmf = np.exp(self.k * np.log(m) - m - self.log_k_factorial)
        means: np.ndarray = np.einsum("ij,ij->i", pmf, self.carry_s) / np.einsum("ij,ij->i", pmf, self.spill_steps)
        return means

    def at(self, values: np.ndarray, n: np.ndarray | float) -> np.ndarray:
        """Interpolate a quantity tabulated on `grid` at occupancy n."""
        interpolated: np.ndarray = np.interp(n, self.grid, values)
        return interpolated


def life_overlap(lives: np.ndarray, *, presorted: bool = False) -> float:
    """E[min(L₁, L₂)] / E[L] for two independent lives drawn from the equally weighted sample `lives`:
    ∫Ḡ(t)²dt / ∫Ḡ(t)dt, the share of a life two requests admitted together spend in the batch side by
    side (the batch-arrival term of M^X/G/∞'s occupancy variance, Shanbhag, "On infinite server queues
    with batch arrivals", J. Appl. Prob. 3, 1966: Var N = λE[X]E[S] + λE[X(X−1)]∫Ḡ²). Sorted ascending,
    the i-th smallest of n is the minimum of a pair with probability (2(n − i) − 1)/n² (i from 0).
    `presorted`: `lives` is already ascending (`sorted_decodes` plus a constant), so not sorted again."""
    ordered = np.asarray(lives, dtype=float) if presorted else np.sort(np.asarray(lives, dtype=float))
    n = ordered.size
    mean = float(ordered.mean()) if n else 0.0
    if mean <= 0.0:
        return 1.0
    weights = (2.0 * (n - np.arange(n)) - 1.0) / float(n * n)
    return float(np.dot(weights, ordered)) / mean


@functools.lru_cache(maxsize=64)
def sorted_decodes(output: LengthDistribution, tokens_per_step: float | None) -> np.ndarray:
    """The output sample's decode steps (o − 1, or (o − 1)/E verify steps when speculating: E =
    `tokens_per_step`), ascending: depends on the output distribution only, so every prompt
    mixture's replica (a prefix plan's trials) reuses one sort of the 8,192 lengths. Adding a
    constant keeps the order and rounds each entry as it would unsorted, so `life_overlap` of the
    shifted lives is bit for bit the unsorted call's."""
    decodes = _output_sample(output).decodes
    if tokens_per_step is not None:
        decodes = decodes / tokens_per_step
    return _read_only(np.sort(decodes))


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
    decode_context, position, cached_read = prompt_context_moments(p, o)
    prompt_grid = prompt_sample.grid
    c = max(slots, 1)
    grid = np.linspace(0.0, float(c), min(c + 1, _OCCUPANCY_GRID_POINTS))
    decodes, step_outputs = output_sample.decodes, o_mean  # steps after the first token; 1 + those
    if sm.speculation is not None:
        # a request's decode is (o − 1)/E verify steps (docs/design.md, "Speculative decoding")
        step_outputs = 1.0 + (o_mean - 1.0) / sm.tokens_per_step
        decodes = _read_only(decodes / sm.tokens_per_step)
    if serving.chunk_tokens is None:
        cap = np.full(grid.shape, np.inf)
        steps_grid = np.full(grid.shape, step_outputs)
    else:
        cap = np.maximum(1.0, serving.chunk_tokens - grid * sm.verify_tokens)  # C − n·(k+1)
        steps_grid = np.mean(np.ceil(prompt_grid / cap[:, None]), axis=1) + step_outputs - 1.0  # E[⌈p/(C−n)⌉] + o − 1
    admissions_cap = c / float(steps_grid[-1])
    n_all = np.arange(c + 1, dtype=float)
    k = np.arange(int(admissions_cap + 8.0 * math.sqrt(admissions_cap) + 9.0), dtype=float)[None, :]
    tables = _step_tables(
        sm,
        serving,
        grid,
        cap,
        k,
        prompt_grid=prompt_grid,
        prompt_mean=p.mean,
        decode_context=decode_context,
        position=position,
        cached_read=cached_read,
    )
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
        prefill_cached_read=cached_read,
        prompt_grid=prompt_grid,
        prompts=prompts,
        cached=prompt_sample.cached,
        outputs=output_sample.outputs,
        size_biased_prompts=prompt_sample.size_biased,
        own_attended=prompt_sample.own_attended,
        decodes=decodes,
        has_tpot=output_sample.has_tpot,
        tpot_requests=output_sample.tpot_requests,
        step_coefficients=_read_only(queueing_kernels.step_model_coefficients(sm)),
        prompt_sample_moments=prompt_sample.moments,
        prompt_cv2=max(0.0, p.second_moment / p.mean**2 - 1.0),
        life_overlap=life_overlap(
            sorted_decodes(o, None if sm.speculation is None else sm.tokens_per_step)
            + float(steps_grid[0])
            - float(np.mean(decodes)),
            presorted=True,
        ),
        arrival_cv2=_router_arrival_cv2(workload, serving),
        grid=grid,
        steps_grid=steps_grid,
        k=k,
        log_k_factorial=gammaln(k + 1.0),
        carry_single_s=tables.carry_single_s,
        carry_s=tables.carry_s,
        spill_steps=tables.spill_steps,
        t_decode=tables.t_decode,
        t_full=tables.t_full,
        admissions_cap=admissions_cap,
        log_n_factorial=gammaln(n_all + 1.0),
        steps_at_n=np.interp(n_all, grid, steps_grid),
    )
    return replace(replica, saturation_rps=_saturation(replica) if slots >= 1 else 0.0)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class _StepTables:
    """Step durations on the occupancy grid (rows: n; columns: k prompts arriving during a step)."""

    carry_single_s: np.ndarray  # the one step carrying (up to the budget of) the k prompts' tokens
    carry_s: np.ndarray  # … plus the full-budget steps the rest spills into
    spill_steps: np.ndarray  # 1 + the extra full-budget steps the k prompts spill into
    t_decode: np.ndarray  # pure decode step at n
    t_full: np.ndarray  # full-budget chunk step at n (= t_decode without chunking)


def _step_tables(
    sm: StepModel,
    serving: Serving,
    grid: np.ndarray,
    cap: np.ndarray,
    k: np.ndarray,
    *,
    prompt_grid: np.ndarray,
    prompt_mean: float,
    decode_context: float,
    position: float,
    cached_read: float = 0.0,
) -> _StepTables:
    """Step 2 of planner/queueing.py's docstring on the grid: k arrivals add the sum of k prompts'
    tokens to the next step, at most the budget `cap` = C − n; the excess spills into full-budget
    steps. With a prefix cache each prefilled token also reads `cached_read` cached KV tokens
    (E[c]/E[p]) and attends to them (in `position`).

    The step time is a maximum of the memory and compute times (convex in the tokens), so the mean
    step carrying k prompts is the mean over their sum, not the step at k·E[p] (Jensen: with mixed
    prompt lengths the short ones ride a memory-bound step almost free and the long ones make it
    compute-bound; the step at the mean undercounts the stall). The sum of k prompts is taken at the
    prompt grid's mid-quantiles p_j as k·E[p] + √k·(p_j − p̄) (its mean and variance exact, clipped
    at 0), and each table entry is the mean over those points."""
    spread = prompt_grid - float(np.mean(prompt_grid))
    coefficients = queueing_kernels.step_model_coefficients(sm)
    t_carry, spill = queueing_kernels.carry_tables(
        coefficients, grid, cap, k[0], spread, prompt_mean, decode_context, position, cached_read
    )  # compiled: the (n, k, point) loop NumPy spelled as ~20 passes over a 33 × K × 32 array (≈ 1 ms a replica)
    if sm.speculation is None:
        t_decode = step_seconds(sm, grid, grid * decode_context, grid * decode_context)
    else:
        t_decode = verify_seconds(sm, grid, grid * decode_context, np.zeros(grid.shape), np.zeros(grid.shape))
    if serving.chunk_tokens is None:
        t_full = t_decode
    elif sm.speculation is None:
        t_full = step_seconds(sm, grid + cap, grid * decode_context + cap * cached_read, grid * decode_context + cap * position)
    else:
        t_full = verify_seconds(sm, grid, grid * decode_context, cap, cap * position, cap * cached_read)
    return _StepTables(
        carry_single_s=t_carry,
        carry_s=t_carry + spill * t_full[:, None],
        spill_steps=1.0 + spill,
        t_decode=t_decode,
        t_full=t_full,
    )


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
