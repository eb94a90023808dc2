"""The saturation bounds of planner/candidates.py (its module docstring derives them): an upper bound on the
queueing model's saturation rate of every (step model, slots, chunk budget) setting of a plan, in one NumPy pass,
from `StepModel`'s coefficients laid out as arrays. Checked against the queueing model itself
(tests/planner/test_planning_bounds.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

import numpy as np

from planner.queueing import _PROMPT_GRID_U, length_quantiles
from planner.queueing_replica import prompt_context_moments
from planner.step_model import COEFFICIENTS, StepModel
from planner.workload import LengthDistribution, Workload

if TYPE_CHECKING:
    from planner.candidates import Group


#: Relative margins that keep the bound above the queueing model's floating-point saturation: the
#: Poisson pmf it averages over is truncated ~8 standard deviations above its mean (its mean falls
#: short of c/E[o] by far less than 1e-6), and its tables are summed in another order.
_TRUNCATED_MEAN = 1.0 - 1e-6
ROUNDING = 1.0 + 1e-9


def bound_moments(workload: Workload) -> tuple[float, float, float, float]:
    """E[p], E[o], the mean decode context d and the mean prefill position π (queueing.py's formulas,
    a cached prefix's tokens counted in both; its KV read by the prefill is left out, which keeps the
    bound above the queueing model's saturation)."""
    p, o = workload.prompt_tokens, workload.output_tokens
    decode_context, position, _ = prompt_context_moments(p, o)
    return p.mean, o.mean, decode_context, position


@lru_cache(maxsize=256)
def _prompt_grid(prompt: LengthDistribution) -> np.ndarray:
    """The prompt quantiles the queueing model takes E[⌈p/budget⌉] over."""
    return length_quantiles(prompt, _PROMPT_GRID_U)


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class StepCoefficients:
    """`StepModel`'s coefficients as arrays, one entry per setting, so the settings of every group
    (each with its own step model) are bounded in one NumPy pass."""

    dense_weight_bytes: np.ndarray
    expert_weight_bytes: np.ndarray
    experts: np.ndarray
    experts_per_token: np.ndarray
    moe_layers: np.ndarray
    kv_bytes_per_token: np.ndarray
    flops_per_token: np.ndarray
    attention_flops_per_context_token: np.ndarray
    memory_bandwidth_bytes_per_s: np.ndarray
    compute_flops_per_s: np.ndarray
    comm_s_per_token: np.ndarray
    comm_latency_s: np.ndarray
    step_overhead_s: np.ndarray
    memory_compute_overlap: np.ndarray

    @classmethod
    def of(cls, step_models: Sequence[StepModel], which: np.ndarray) -> StepCoefficients:
        """The coefficients of `step_models[which[i]]` at entry i."""
        table = np.array([[float(getattr(sm, name)) for name in COEFFICIENTS] for sm in step_models])[which]
        return cls(**{name: table[:, j] for j, name in enumerate(COEFFICIENTS)})


def _step_s(sm: StepCoefficients, weight_tokens: np.ndarray, new: np.ndarray, kv: np.ndarray, attended: np.ndarray) -> np.ndarray:
    """`StepModel.step_s` element-wise, with the weight bytes read as for `weight_tokens` tokens (the
    bounds hold them at n = c: exact for a dense model, a lower bound for MoE, which reads more
    experts with more tokens). `new` > 0 everywhere, so the communication term always applies. A
    dense model has no experts: its routed-expert term is 0 (E = 0 is kept out of the k/E)."""
    moe = sm.experts > 0
    share = np.divide(sm.experts_per_token, sm.experts, out=np.zeros(moe.shape), where=moe)  # k/E
    touched = sm.experts * (1.0 - (1.0 - share) ** weight_tokens)  # E·(1−(1−k/E)^n)
    weights = sm.dense_weight_bytes + sm.moe_layers * touched * sm.expert_weight_bytes
    mem = (weights + kv * sm.kv_bytes_per_token) / sm.memory_bandwidth_bytes_per_s  # bytes / BW
    comp = (new * sm.flops_per_token + attended * sm.attention_flops_per_context_token) / sm.compute_flops_per_s  # FLOPs / F
    comm = new * sm.comm_s_per_token + sm.comm_latency_s
    step: np.ndarray = (
        np.maximum(mem, comp) + (1.0 - sm.memory_compute_overlap) * np.minimum(mem, comp) + comm + sm.step_overhead_s
    )
    return step


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class DraftCoefficients:
    """Each setting's speculation as arrays (planner/step_model.py `Speculation`): k + 1 tokens verified
    per decoder, E tokens emitted per step, and the draft's k passes (all 1, 1 and 0 without one)."""

    verify_tokens: np.ndarray
    tokens_per_step: np.ndarray
    passes: np.ndarray
    weight_bytes: np.ndarray
    kv_bytes_per_token: np.ndarray
    flops_per_token: np.ndarray
    attention_flops_per_context_token: np.ndarray

    @classmethod
    def of(cls, step_models: Sequence[StepModel], which: np.ndarray) -> DraftCoefficients:
        rows = [
            (1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0)
            if (s := sm.speculation) is None
            else (
                float(s.draft_tokens + 1),
                s.tokens_per_step,
                float(s.draft_tokens),
                s.draft_weight_bytes,
                s.draft_kv_bytes_per_token,
                s.draft_flops_per_token,
                s.draft_attention_flops_per_context_token,
            )
            for sm in step_models
        ]
        table = np.array(rows, dtype=float)[which]
        return cls(
            verify_tokens=table[:, 0],
            tokens_per_step=table[:, 1],
            passes=table[:, 2],
            weight_bytes=table[:, 3],
            kv_bytes_per_token=table[:, 4],
            flops_per_token=table[:, 5],
            attention_flops_per_context_token=table[:, 6],
        )


def _draft_s(sm: StepCoefficients, draft: DraftCoefficients, decoders: np.ndarray, kv: np.ndarray) -> np.ndarray:
    """`StepModel.draft_s` element-wise: k passes of combine(draft memory, draft compute); 0 without a draft."""
    mem = (draft.weight_bytes + kv * draft.kv_bytes_per_token) / sm.memory_bandwidth_bytes_per_s  # bytes / BW
    comp = (decoders * draft.flops_per_token + kv * draft.attention_flops_per_context_token) / sm.compute_flops_per_s
    passes: np.ndarray = draft.passes * (np.maximum(mem, comp) + (1.0 - sm.memory_compute_overlap) * np.minimum(mem, comp))
    return passes


def saturation_bounds(
    sm: StepCoefficients,
    slots: np.ndarray,
    chunk_tokens: np.ndarray,
    moments: tuple[float, float, float, float],
    prompt: LengthDistribution,
    draft: DraftCoefficients | None = None,
) -> np.ndarray:
    """The saturation bound of each (step model, slots, chunk budget) entry, chunk 0 meaning no
    chunking, before rounding (planner/candidates.py module docstring): every setting of a plan in one pass.

    A speculating setting (k + 1 = v tokens verified per decoder, E emitted per step) is bounded the
    same way on the queueing model's own speculative terms: a request holds its slot for
    1 + (E[o] − 1)/E steps (E[⌈p/(C − c·v)⌉] + (E[o] − 1)/E with chunking, the budget counting v
    tokens per decoder), and each step is the verify step t_step(c·v + x, c·d, v·c·d + c·v(v−1)/2 + x·π)
    plus the draft's k passes over the c decoders."""
    p_mean, o_mean, d, position = moments
    c = np.asarray(slots, dtype=float)
    chunk = np.asarray(chunk_tokens, dtype=float)
    kv = c * d
    chunked = chunk > 0
    speculating = draft is not None and bool(np.any(draft.passes > 0))
    v = draft.verify_tokens if draft is not None and speculating else np.ones_like(c)
    e = draft.tokens_per_step if draft is not None and speculating else np.ones_like(c)
    budget = np.where(chunked, np.maximum(1.0, chunk - c * v), np.inf)  # C − c·v prefill tokens beside c decodes
    grid = _prompt_grid(prompt)
    finite_budget = np.where(chunked, budget, 1.0)
    prefill_steps = np.where(chunked, np.mean(np.ceil(grid[None, :] / finite_budget[:, None]), axis=1), 0.0)
    steps = np.where(chunked, prefill_steps + o_mean - 1.0, o_mean)  # E[⌈p/(C−c)⌉] + E[o] − 1, or E[o] without chunking
    if speculating:
        decode_steps = (o_mean - 1.0) / e  # (E[o] − 1)/E verify steps after the first token
        steps = np.where(e > 1.0, np.where(chunked, prefill_steps + decode_steps, 1.0 + decode_steps), steps)
    arriving = c / steps * _TRUNCATED_MEAN * p_mean  # mean prefill tokens arriving per step at a full batch
    carried = np.where(chunked, arriving / (1.0 + arriving / finite_budget), arriving)  # ≤ the mean a step carries
    if speculating and draft is not None:
        verified = c * v + carried  # v tokens per decoder, plus the carried prefill
        own = v * kv + c * (v - 1.0) * v / 2.0  # (k+1)·c̄ + k(k+1)/2 attended per decoder
        step = _step_s(sm, c, verified, kv, own + carried * position) + _draft_s(sm, draft, c, kv)
        full = _step_s(sm, c * v + finite_budget, c * v + finite_budget, kv, own + finite_budget * position)
        full = full + _draft_s(sm, draft, c, kv)
    else:
        step = _step_s(sm, c, c + carried, kv, kv + carried * position)  # t_step with the weights held at n = c
        full = _step_s(sm, c + finite_budget, c + finite_budget, kv, kv + finite_budget * position)
    slot_limit = c / (steps * step)  # c slots for `steps` steps each, ≥ the mean-carry step
    budget_limit = np.where(chunked, finite_budget / (p_mean * full), np.inf)  # (C − c) tokens per full-chunk step
    bound: np.ndarray = np.minimum(slot_limit, budget_limit)
    return bound


def saturation_bound_rps(group: Group, slots: int, workload: Workload, chunk_tokens: int | None = None) -> float:
    """An upper bound on the queueing model's saturation rate of this setting (planner/candidates.py module docstring)."""
    which = np.zeros(1, dtype=np.intp)
    coefficients = StepCoefficients.of([group.step_model], which)
    draft = DraftCoefficients.of([group.step_model], which)
    bound = saturation_bounds(
        coefficients, np.array([slots]), np.array([chunk_tokens or 0]), bound_moments(workload), workload.prompt_tokens, draft
    )
    return float(bound[0]) * ROUNDING
