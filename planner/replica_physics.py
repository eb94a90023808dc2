"""What enumeration computes of a replica that no workload changes (its step model and KV capacity, and each
speculating variant's), remembered for the specs it was computed from: a request that enumerates several
times (planner/plan_prefix.py: once per cache size, each trial's prompt mixture changing only the drops,
slots and bounds) computes each once.

Keyed by the specs' identity (they hold dicts, so they do not hash) and the plain values beside them; an
entry holds its specs, so no identity it was keyed by is reused while it stands. Bounded, and emptied by
`cache_clear` (bench/plan_latency.py starts every plan cold).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from planner.memory import kv_capacity_tokens
from planner.performance import build_step_model
from planner.specs import GpuSpec, ModelSpec, Precision
from planner.speculative import (
    MethodName,
    draft_model_speculation,
    head_speculation,
    speculative_kv_capacity_tokens,
    speculative_step_model,
)
from planner.step_model import StepModel

T = TypeVar("T")

#: Entries before the memo is emptied: a request's groups and variants number in the hundreds
#: (153 groups and variants for Llama 3.1 8B on the reference catalog), so one request's fit many times.
MAX_ENTRIES = 4096


class IdentityMemo:
    """`value(specs, values, compute)`: `compute()` once per (identity of each spec, values)."""

    def __init__(self) -> None:
        self._entries: dict[tuple[Hashable, ...], tuple[tuple[Any, ...], Any]] = {}

    def value(self, specs: tuple[Any, ...], values: tuple[Hashable, ...], compute: Callable[[], T]) -> T:
        key = (*(id(spec) for spec in specs), *values)
        entry = self._entries.get(key)
        if entry is not None and all(held is spec for held, spec in zip(entry[0], specs, strict=True)):
            found: T = entry[1]
            return found
        result = compute()
        if len(self._entries) >= MAX_ENTRIES:
            self._entries.clear()
        self._entries[key] = (specs, result)
        return result

    def cache_clear(self) -> None:
        self._entries.clear()


#: (gpu, model, precision; tp, pp) → (step model, KV capacity tokens, one-sequence decode step) of a replica.
REPLICAS = IdentityMemo()
#: (gpu, model, precision, base step model, draft model; tp, method, k, α, source) → a speculating variant's
#: (step model, KV capacity tokens, one-sequence TPOT floor).
VARIANTS = IdentityMemo()


def replica_physics(gpu: GpuSpec, model: ModelSpec, precision: Precision, tp: int, pp: int) -> tuple[StepModel, int, float]:
    """A tp × pp replica's step model, KV capacity and one-sequence decode step (planner/candidates.py `_group`)."""
    sm = build_step_model(gpu, model, precision, tp, gpu.efficiency, pp=pp)
    return sm, kv_capacity_tokens(gpu, model, precision, tp, gpu.efficiency, pp=pp), sm.step_s(1, 1, 1)


def variant_physics(
    gpu: GpuSpec,
    model: ModelSpec,
    precision: Precision,
    tp: int,
    step_model: StepModel,
    k: int,
    method: MethodName,
    alpha: float,
    source: str | None,
    draft_model: ModelSpec | None,
) -> tuple[StepModel, int, float]:
    """The step model, KV capacity and one-sequence TPOT floor of a replica (`step_model`) verifying k drafted
    tokens of a head (`method`) or of `draft_model` at acceptance `alpha` (planner/candidates.py `speculative_groups`)."""
    spec = (
        draft_model_speculation(draft_model, precision, tp, draft_tokens=k, acceptance_rate=alpha, acceptance_source=source)
        if draft_model is not None
        else head_speculation(model, precision, tp, method=method, draft_tokens=k, acceptance_rate=alpha)
    )
    capacity = speculative_kv_capacity_tokens(gpu, model, precision, tp, gpu.efficiency, spec)
    sm = speculative_step_model(step_model, spec)
    return sm, capacity, sm.verify_step_s(1, 1) / sm.tokens_per_step  # one verify step emits E tokens
