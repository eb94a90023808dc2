"""Issue 14 §1/§3 step-model variants for the end-to-end check (`python -m bench.engine_profiles --variant …`).

The planner has the terms, tested, but the shipped step model does not use them yet; a variant swaps them in
for one bench run, so the refit and its in-sample / LOSO / LOMO errors can be compared with the shipped form:

- **collectives** — the tensor-parallel all-reduce of every stage layer priced by message size
  (planner/parallel.py `all_reduce_line`: the line through the fitted one-shot / ring `all_reduce_s` over the
  step sizes) in place of the ring line with the catalog α; pipeline hops and the expert-parallel all-to-all
  are unchanged.
- **moe** — the routed experts' FLOPs at their grouped-GEMM rate r(i) (planner/performance.py
  `flops_per_token`), in place of 2 · params_active.
- **collectives+moe** — both.

Each is exactly the one-line substitution that wiring it into planner/pipeline.py `parallel_terms` (the
all-reduce's α and per-token time) or planner/performance.py `build_step_model` (`flops_per_token`) would make.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import bench.fidelity
import planner.performance
from planner.parallel import all_reduce_line, tp_link
from planner.pipeline import ParallelTerms, stage_layers
from planner.specs import Efficiency, GpuSpec, ModelSpec, Precision
from planner.step_model import StepModel

VARIANTS = ("shipped", "collectives", "moe", "collectives+moe")


def _with_collectives(original: Callable[..., ParallelTerms]) -> Callable[..., ParallelTerms]:
    def parallel_terms(gpu: GpuSpec, model: ModelSpec, tp: int, pp: int, ep: int, activation_bytes: float) -> ParallelTerms:
        terms = original(gpu, model, tp, pp, ep, activation_bytes)
        if tp <= 1 or ep > 1:
            return terms
        all_reduces = 2 * stage_layers(model, pp)  # two per stage layer, as parallel_terms counts them
        latency, per_token = all_reduce_line(tp_link(gpu, tp), tp, model.hidden_size * activation_bytes)
        return dataclasses.replace(
            terms, tp_comm_s_per_token=all_reduces * per_token, tp_comm_latency_s=pp * all_reduces * latency
        )

    return parallel_terms


def _with_moe(original: Callable[..., StepModel]) -> Callable[..., StepModel]:
    def build_step_model(
        gpu: GpuSpec, model: ModelSpec, precision: Precision, tp: int, efficiency: Efficiency, *, pp: int = 1, ep: int = 1
    ) -> StepModel:
        step = original(gpu, model, precision, tp, efficiency, pp=pp, ep=ep)
        flops = planner.performance.flops_per_token(gpu, model, precision.weights.compute_dtype, tp, ep)
        return dataclasses.replace(step, flops_per_token=flops)

    return build_step_model


@contextmanager
def step_variant(name: str) -> Iterator[None]:
    """Swap the variant's terms into the step model for the duration (module docstring); "shipped" changes nothing."""
    if name not in VARIANTS:
        raise ValueError(f"unknown step variant {name!r}; one of {', '.join(VARIANTS)}")
    saved: list[tuple[Any, str, Any]] = []

    def swap(module: Any, attribute: str, value: Any) -> None:
        saved.append((module, attribute, getattr(module, attribute)))
        setattr(module, attribute, value)

    try:
        if "collectives" in name:
            swap(planner.performance, "parallel_terms", _with_collectives(planner.performance.parallel_terms))
        if "moe" in name:
            wrapped = _with_moe(planner.performance.build_step_model)
            swap(planner.performance, "build_step_model", wrapped)
            swap(bench.fidelity, "build_step_model", wrapped)
        yield
    finally:
        for module, attribute, value in reversed(saved):
            setattr(module, attribute, value)
