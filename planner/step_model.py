"""The step-time formula of one continuous-batching iteration, with every coefficient explicit.

A `StepModel` is what the performance model produces for one (GPU, model, precision, tp,
efficiency) and what the queueing model and the simulator consume. A client can recompute
any step from its fields:

    t_step = combine(t_mem, t_compute) + t_comm + step_overhead_s + sequences · sequence_overhead_s
    t_mem     = (weight_bytes_read(n) + kv_tokens_read · kv_bytes_per_token) / memory_bandwidth_bytes_per_s
    t_compute = ((n + gemm_half_tokens) · flops_per_token + attended_tokens · attention_flops_per_context_token)
                / compute_flops_per_s                                (gemm_half_tokens only when n > 0)
    t_comm    = n · comm_s_per_token + comm_latency_s            (0 when n = 0)
    combine(a, b) = max(a, b) + (1 − memory_compute_overlap) · min(a, b)

where n is the number of new tokens the step processes (one per decoding sequence plus the
prefill tokens), kv_tokens_read the KV-cache tokens the step reads (sum of the contexts of
the sequences in the batch), and attended_tokens the sum over new tokens of the context each
attends to (a decode at context c attends to c; a prefill chunk of p tokens starting at
position s attends to p·s + p(p+1)/2).

Two operation-level terms (issue 14 §1), both 0 by default, which is the one-η roofline exactly:

- `gemm_half_tokens` M½: a GEMM of M tokens against a weight matrix runs at η(M) = η_peak · M / (M + M½)
  of the peak, so its time is 2·(M + M½)·params / (η_peak · peak): small-M GEMMs pay a fixed M½ tokens'
  worth of FLOPs (tile and wave quantisation, pipeline fill), large-M ones approach η_peak. With the
  memory term's max(), a small-M decode GEMM is still memory-bound. M½ and η_peak are fitted per GPU and
  datatype on published kernel timings (bench/kernel_measurements.json, bench/kernel_fit.py).
- `sequence_overhead_s` c_seq: seconds per sequence in the step, for the work every sequence costs
  whatever its length: sampling its next token, the scheduler's bookkeeping, and the attention
  kernel's per-sequence setup (one thread block per sequence and head: the AIConfigurator decode
  attention timings give ~25 ns per sequence per layer on H100/H200, about 2 µs per step for an
  80-layer model). `sequences` is the number of sequences in the step (decoding + being prefilled).

The vectorised step times (planner/candidates.py, planner/queueing_kernels.py, planner/queueing_replica.py,
planner/simulator*.py, planner/pipeline.py) do not carry these two terms yet: they index COEFFICIENTS,
which does not list them, so `build_step_model` leaves both at 0 (a caller sets them with `replace`), and a
step model with either non-zero is for `step_s` and the calibration only (docs/fidelity-performance.md,
"Operation-level terms").

MoE: weight_bytes_read(n) = dense_weight_bytes + moe_layers · E · (1 − (1 − k/E)^n) · expert_weight_bytes
(the expected number of distinct routed experts touched by n tokens, per MoE layer).

Speculative decoding (`speculation`, None without it): a draft proposes k tokens per decoding
sequence and the target verifies them in one step that processes k + 1 tokens per sequence:

    t_verify = step_s(d·(k+1) + p, kv, d·((k+1)·c̄ + k(k+1)/2) + attended_p) + t_draft
    t_draft  = k · combine((W_d + kv · kv_d) / BW, (d · f_d + kv · a_d) / F)

with d decoding sequences of mean context c̄ (kv = d·c̄) and p prefill tokens: the weights are read
once, each sequence's KV once (as in a decode step), while compute, the all-reduce traffic and the
attention grow with d·(k+1). The draft runs k forward passes over the batch (a draft model: its own
weights W_d, KV kv_d, FLOPs f_d and attention a_d per token; a draft head: the layers it adds).
Each step emits E = (1 − α^(k+1)) / (1 − α) tokens per sequence on average, α the per-token
acceptance rate (Leviathan, Kalman & Matias, "Fast Inference from Transformers via Speculative
Decoding", ICML 2023, eq. 1).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from planner.errors import PlannerInputError


@dataclass(frozen=True, slots=True, kw_only=True)
class Speculation:
    """A draft of `draft_tokens` tokens per step and its per-pass cost (one draft forward over the batch)."""

    method: str
    draft_tokens: int
    acceptance_rate: float
    draft_weight_bytes: float
    draft_kv_bytes_per_token: float = 0.0
    draft_flops_per_token: float
    draft_attention_flops_per_context_token: float = 0.0
    #: Memory the draft holds beyond the target's weights (a head shares the target's LM head but is
    #: read in full every pass; Medusa's k heads are all resident); its cache is draft_kv_bytes_per_token.
    resident_bytes: float = 0.0
    #: Where a default α comes from when the draft's method has none of its own (a separate draft model's
    #: published pair, planner/speculative.py `draft_model_acceptance`); None: the method's default or given.
    acceptance_source: str | None = None

    def __post_init__(self) -> None:
        if self.draft_tokens < 1:
            raise PlannerInputError(f"draft_tokens must be >= 1, got {self.draft_tokens}", field="draft_tokens")
        if not 0.0 <= self.acceptance_rate < 1.0:
            raise PlannerInputError(f"acceptance_rate must be in [0, 1), got {self.acceptance_rate}", field="acceptance_rate")
        for name in ("draft_weight_bytes", "draft_kv_bytes_per_token", "draft_flops_per_token", "resident_bytes"):
            if not getattr(self, name) >= 0.0:
                raise PlannerInputError(f"{name} must be >= 0", field=name)
        if not self.draft_attention_flops_per_context_token >= 0.0:
            raise PlannerInputError("draft_attention_flops_per_context_token must be >= 0")

    @property
    def tokens_per_step(self) -> float:
        """E = (1 − α^(k+1)) / (1 − α): the mean of the truncated geometric accepted length plus one."""
        alpha, k = self.acceptance_rate, self.draft_tokens
        return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)  # Σ_{j=0..k} α^j


#: Token counts: one step's (a float) or many steps' at once (an array, the simulator's decode runs).
Tokens = TypeVar("Tokens", float, np.ndarray)


@dataclass(frozen=True, slots=True, kw_only=True)
class StepModel:
    #: Bytes of weights read by every step whatever its tokens (all weights for a dense model;
    #: attention, embeddings and shared experts for an MoE model); pp × that for a pipeline of pp
    #: stages, read over pp × the bandwidth (planner/pipeline.py's fold).
    dense_weight_bytes: float
    #: Bytes of one routed expert in one MoE layer (0 for a dense model).
    expert_weight_bytes: float = 0.0
    experts: int = 0
    experts_per_token: int = 0
    moe_layers: int = 0
    kv_bytes_per_token: float
    flops_per_token: float
    attention_flops_per_context_token: float
    memory_bandwidth_bytes_per_s: float
    compute_flops_per_s: float
    comm_s_per_token: float = 0.0
    comm_latency_s: float = 0.0
    step_overhead_s: float = 0.0
    memory_compute_overlap: float = 1.0
    speculation: Speculation | None = None
    #: M½ of the GEMM efficiency curve η(M) = η_peak · M / (M + M½), in tokens (0: η flat in M).
    gemm_half_tokens: float = 0.0
    #: Seconds each sequence in the step adds (sampling, scheduling, per-sequence attention setup).
    sequence_overhead_s: float = 0.0

    def __post_init__(self) -> None:
        if self.memory_bandwidth_bytes_per_s <= 0 or self.compute_flops_per_s <= 0:
            raise PlannerInputError("step model bandwidth and FLOP/s must be positive")
        if self.dense_weight_bytes < 0 or self.kv_bytes_per_token <= 0 or self.flops_per_token <= 0:
            raise PlannerInputError("step model byte and FLOP coefficients must be positive")
        if self.expert_weight_bytes > 0 and not (0 < self.experts_per_token <= self.experts and self.moe_layers > 0):
            raise PlannerInputError("MoE step model needs experts >= experts_per_token >= 1 and moe_layers >= 1")
        if not (self.gemm_half_tokens >= 0.0 and self.sequence_overhead_s >= 0.0):
            raise PlannerInputError("gemm_half_tokens and sequence_overhead_s must be >= 0")

    @property
    def has_operation_terms(self) -> bool:
        """Whether M½ or c_seq is set: such a step model is for `step_s` and the calibration only (the
        vectorised step times do not carry the two terms yet; module docstring)."""
        return self.gemm_half_tokens > 0.0 or self.sequence_overhead_s > 0.0

    @property
    def is_moe(self) -> bool:
        return self.expert_weight_bytes > 0

    @property
    def weight_bytes(self) -> float:
        """What a step reads of the weights when every expert is touched: all weights of the replica, or pp × them
        for a pipeline of pp stages (each stage reads its own once per micro-batch; planner/pipeline.py)."""
        return self.dense_weight_bytes + self.moe_layers * self.experts * self.expert_weight_bytes  # dense + L·E·expert

    def weight_bytes_read(self, new_tokens: float) -> float:
        """Weight bytes one step reads when it processes `new_tokens` tokens."""
        if not self.is_moe:
            return self.dense_weight_bytes
        experts_touched = self.experts * (1.0 - (1.0 - self.experts_per_token / self.experts) ** new_tokens)  # E·(1−(1−k/E)^n)
        return float(self.dense_weight_bytes + self.moe_layers * experts_touched * self.expert_weight_bytes)

    def memory_s(self, new_tokens: float, kv_tokens_read: Tokens) -> Tokens:
        return (
            self.weight_bytes_read(new_tokens) + kv_tokens_read * self.kv_bytes_per_token
        ) / self.memory_bandwidth_bytes_per_s  # bytes / BW

    def compute_s(self, new_tokens: float, attended_tokens: Tokens) -> Tokens:
        gemm_tokens = new_tokens + self.gemm_half_tokens if new_tokens > 0 else new_tokens  # M + M½: η(M) = M / (M + M½)
        return (
            gemm_tokens * self.flops_per_token + attended_tokens * self.attention_flops_per_context_token
        ) / self.compute_flops_per_s  # FLOPs / F

    def comm_s(self, new_tokens: float) -> float:
        if new_tokens <= 0:
            return 0.0
        return new_tokens * self.comm_s_per_token + self.comm_latency_s  # bandwidth term + latency term

    def step_s(self, new_tokens: float, kv_tokens_read: float, attended_tokens: float, sequences: float = 0.0) -> float:
        """Duration of one step; scalar floats (fast path for the simulator). `sequences`: how many
        sequences the step holds, priced at `sequence_overhead_s` each (nothing when that is 0)."""
        mem = self.memory_s(new_tokens, kv_tokens_read)
        comp = self.compute_s(new_tokens, attended_tokens)
        hi, lo = (mem, comp) if mem >= comp else (comp, mem)
        return (
            hi
            + (1.0 - self.memory_compute_overlap) * lo
            + self.comm_s(new_tokens)
            + self.step_overhead_s
            + sequences * self.sequence_overhead_s  # c_seq per sequence
        )

    def cached_prefill_s(self, prompt_tokens: float, cached_tokens: float) -> float:
        """A step that prefills one prompt of `prompt_tokens` whose first `cached_tokens` are in the
        prefix cache (planner/prefix_cache.py): the GEMMs run over the n = p − c new tokens only, the
        KV of the c cached tokens is read, and each new token attends to them:
        `step_s(n, c, n·c + n(n+1)/2)` (the chunk-at-position-c formula of the module docstring)."""
        new = prompt_tokens - cached_tokens
        return self.step_s(new, cached_tokens, new * cached_tokens + new * (new + 1.0) / 2.0)

    @property
    def tokens_per_step(self) -> float:
        """Tokens one step emits per decoding sequence on average (1 without speculation)."""
        return 1.0 if self.speculation is None else self.speculation.tokens_per_step

    @property
    def verify_tokens(self) -> int:
        """Tokens each decoding sequence puts through the target per step: k + 1 (1 without speculation)."""
        return 1 if self.speculation is None else self.speculation.draft_tokens + 1

    def draft_s(self, decoders: float, kv_tokens_read: float) -> float:
        """The draft's k passes over `decoders` sequences reading `kv_tokens_read` KV tokens (0 without speculation)."""
        spec = self.speculation
        if spec is None or decoders <= 0:
            return 0.0
        mem = (spec.draft_weight_bytes + kv_tokens_read * spec.draft_kv_bytes_per_token) / self.memory_bandwidth_bytes_per_s
        comp = (
            decoders * spec.draft_flops_per_token + kv_tokens_read * spec.draft_attention_flops_per_context_token
        ) / self.compute_flops_per_s
        hi, lo = (mem, comp) if mem >= comp else (comp, mem)
        return spec.draft_tokens * (hi + (1.0 - self.memory_compute_overlap) * lo)  # k × combine(draft memory, draft compute)

    def verify_step_s(
        self,
        decoders: float,
        kv_tokens_read: float,
        *,
        prefill_tokens: float = 0.0,
        prefill_kv_tokens: float = 0.0,
        prefill_attended: float = 0.0,
    ) -> float:
        """One step of `decoders` sequences (reading `kv_tokens_read` KV tokens) verifying k + 1 tokens
        each, plus `prefill_tokens` prompt tokens (reading `prefill_kv_tokens` cached prompt tokens and
        attending to `prefill_attended` context tokens) and the draft's passes over the decoders; equals
        `step_s(decoders + p, kv + kv_p, kv + attended_p)` without speculation."""
        v = self.verify_tokens
        attended = v * kv_tokens_read + decoders * (v - 1) * v / 2.0 + prefill_attended  # (k+1)·c + k(k+1)/2 per sequence
        target = self.step_s(decoders * v + prefill_tokens, kv_tokens_read + prefill_kv_tokens, attended)
        return target + self.draft_s(decoders, kv_tokens_read)

    @property
    def break_even_flops_per_byte(self) -> float:
        """Arithmetic intensity at which compute time equals memory time: F / BW."""
        return self.compute_flops_per_s / self.memory_bandwidth_bytes_per_s


#: The operation-level terms (module docstring): not in COEFFICIENTS, and not in a plan's step-model section,
#: until the vectorised step times carry them.
OPERATION_TERMS: tuple[str, ...] = ("gemm_half_tokens", "sequence_overhead_s")

#: The step model's coefficients by name, in one fixed order: the vectorised step times index them
#: (planner/candidates.py's per-setting arrays, planner/queueing_kernels.py's coefficient vector).
COEFFICIENTS: tuple[str, ...] = (
    "dense_weight_bytes",
    "expert_weight_bytes",
    "experts",
    "experts_per_token",
    "moe_layers",
    "kv_bytes_per_token",
    "flops_per_token",
    "attention_flops_per_context_token",
    "memory_bandwidth_bytes_per_s",
    "compute_flops_per_s",
    "comm_s_per_token",
    "comm_latency_s",
    "step_overhead_s",
    "memory_compute_overlap",
)
