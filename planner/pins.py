"""Pinned decisions: a plan request may fix any of the choices the search otherwise makes.

A pin restricts the search to its value and nothing else: `gpu` keeps one of the allowed GPU types,
`precision` one of the allowed precision pairs, `tp`, `batch_limit` and `chunk_tokens` shrink the
grids to one value (a pinned `chunk_tokens` of None is "no chunking"), and `replicas` fixes the
replica count (the plan is infeasible when that many cannot meet the SLOs within the limits).
The pinned plan is then the cheapest plan among those with the pinned values, found by the same
search, MILP and simulator as a free plan — so pinning a free plan's own choices returns that plan.

`pp` fixes the pipeline stages (planner/pipeline.py PP_DEGREES; pp 1 rules pipelines out, a larger pp
is searched even where one node holds the model). `engine` prices the plan on that engine's profiles
(planner/engines.py): it is the request's `engine` narrowed to one, applied where the specs are resolved
(api/plan_service.py).
`ep` fixes the expert parallelism of an MoE model (planner/expert_parallel.py): 1 keeps the experts
tensor-split, a larger ep keeps only the data-parallel-attention replicas of tp = ep GPUs (so it must
equal a pinned tp, divide the model's experts and run without pipeline stages).
Pins that contradict each other or the request's other constraints are refused with the field named.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from planner.engines import ENGINES
from planner.errors import PlannerInputError
from planner.expert_parallel import expert_parallel_degrees
from planner.pipeline import PP_DEGREES

if TYPE_CHECKING:
    from planner.planning import PlanningInputs, PlanningRequest


def _refuse(member: str, message: str) -> PlannerInputError:
    return PlannerInputError(message, constraint=f"pin.{member}", field=f"constraints.pin.{member}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Pin:
    """The decisions a request fixed; None leaves a decision to the search.

    `chunk_pinned` says whether `chunk_tokens` is pinned, since None is itself a value to pin (no
    chunked prefill). `precision` is (weights slug, KV-cache slug)."""

    gpu: str | None = None
    tp: int | None = None
    pp: int | None = None
    ep: int | None = None
    replicas: int | None = None
    batch_limit: int | None = None
    chunk_tokens: int | None = None
    chunk_pinned: bool = False
    precision: tuple[str, str] | None = None
    engine: str | None = None
    #: Draft tokens per step when the plan speculates (planner/speculative.py); None searches 2 and 5.
    draft_tokens: int | None = None
    #: The draft head's per-token acceptance rate α, as measured for this traffic; None takes the
    #: method's default (planner/speculative.py METHOD_DEFAULTS).
    acceptance_rate: float | None = None
    #: A catalog model to draft with instead of a head (planner/speculative.py `draft_model_speculation`);
    #: without `acceptance_rate` its α is the published pair's (planner/speculative.py `draft_model_acceptance`).
    draft_model: str | None = None

    def __post_init__(self) -> None:
        if self.pp is not None and self.pp not in PP_DEGREES:
            raise _refuse(
                "pp",
                f"a pinned pp must be one of the pipeline degrees the planner models ({', '.join(map(str, PP_DEGREES))}), got {self.pp}",
            )
        if self.engine is not None and self.engine not in ENGINES:
            raise _refuse("engine", f"engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if self.ep is not None and self.ep > 1 and self.tp is not None and self.ep != self.tp:
            raise _refuse("ep", f"a pinned ep must be 1 or the pinned tp ({self.tp}), got {self.ep}")
        if self.ep is not None and self.ep > 1 and self.pp is not None and self.pp > 1:
            raise _refuse("ep", f"expert parallelism is planned without pipeline stages: pinned ep {self.ep} with pp {self.pp}")
        for member in ("tp", "ep", "replicas", "batch_limit", "draft_tokens"):
            value = getattr(self, member)
            if value is not None and value < 1:
                raise _refuse(member, f"a pinned {member} must be >= 1, got {value}")
        if self.acceptance_rate is not None and not 0.0 < self.acceptance_rate < 1.0:
            raise _refuse("acceptance_rate", f"a pinned acceptance_rate must be in (0, 1), got {self.acceptance_rate}")
        if self.chunk_tokens is not None and not self.chunk_pinned:
            object.__setattr__(self, "chunk_pinned", True)
        if self.chunk_tokens is not None and self.batch_limit is not None and self.chunk_tokens <= self.batch_limit:
            raise _refuse(
                "chunk_tokens",
                f"the pinned chunk_tokens ({self.chunk_tokens}) must exceed the pinned batch_limit ({self.batch_limit}): "
                "a chunk budget carries the batch's decodes and at least one prefill token",
            )


def _check_limits(pin: Pin, request: PlanningRequest) -> None:
    """Pinned replicas against the request's other limits: refused when no plan could honour both."""
    constraints = request.constraints
    replicas = pin.replicas
    if replicas is None:
        return
    if replicas < constraints.min_replicas:
        raise _refuse("replicas", f"pinned replicas {replicas} is below constraints.min_replicas {constraints.min_replicas}")
    if constraints.n_plus_one and replicas < 2:
        raise _refuse("replicas", "constraints.n_plus_one needs at least 2 replicas (one may be lost); pinned replicas is 1")
    tp = (pin.tp or 1) * (pin.pp or 1)  # GPUs per replica, at least
    if constraints.max_gpus is not None and replicas * tp > constraints.max_gpus:
        raise _refuse(
            "replicas",
            f"pinned replicas {replicas} need at least {replicas * tp} GPUs, above constraints.max_gpus {constraints.max_gpus}",
        )
    stock = constraints.inventory.get(pin.gpu) if pin.gpu is not None else None
    if stock is not None and replicas * tp > stock:
        raise _refuse(
            "replicas",
            f"pinned replicas {replicas} need at least {replicas * tp} {pin.gpu} GPUs, above constraints.inventory.{pin.gpu} {stock}",
        )


def _check_expert_parallel(ep: int, request: PlanningRequest, inputs: PlanningInputs) -> None:
    """A pinned ep > 1 needs an MoE model whose experts it divides, and a tp = ep the planner models."""
    model = inputs.model
    if model.moe is None:
        raise _refuse("ep", f"a pinned ep above 1 needs an MoE model; {model.slug} is dense (pin ep 1 or leave it out)")
    if ep not in expert_parallel_degrees(model, ep):
        raise _refuse("ep", f"a pinned ep must divide {model.slug}'s {model.moe.experts} experts, got {ep}")
    if ep not in request.tp_degrees:
        grid = ", ".join(str(t) for t in request.tp_degrees)
        raise _refuse("ep", f"a pinned ep runs on tp = ep GPUs: {ep} is not a tensor-parallel degree the planner models ({grid})")


def apply_pins(request: PlanningRequest, inputs: PlanningInputs) -> tuple[PlanningRequest, PlanningInputs]:
    """The request and inputs narrowed to the pinned values (the replica pin stays in the
    constraints, where the search and the MILP read it). PlannerInputError, naming the member,
    for a pin outside what the request allows or contradicting its limits."""
    pin = request.constraints.pin
    if pin is None:
        return request, inputs
    _check_limits(pin, request)
    if pin.gpu is not None:
        gpus = tuple(g for g in inputs.gpus if g.slug == pin.gpu)
        if not gpus:
            allowed = ", ".join(g.slug for g in inputs.gpus)
            raise _refuse(
                "gpu", f"pinned gpu {pin.gpu!r} is not among the GPU types this plan may use (allowed and priced: {allowed})"
            )
        inputs = replace(inputs, gpus=gpus, other_gpus=())
    if pin.precision is not None:
        precisions = tuple(p for p in inputs.precisions if (p.weights.slug, p.kv_cache.slug) == pin.precision)
        if not precisions:
            allowed = ", ".join(f"{p.weights.slug}/{p.kv_cache.slug}" for p in inputs.precisions)
            raise _refuse(
                "precision", f"pinned precision {pin.precision[0]}/{pin.precision[1]} is not allowed (allowed: {allowed})"
            )
        inputs = replace(inputs, precisions=precisions, other_precisions=())
    if pin.tp is not None and pin.tp not in request.tp_degrees:
        grid = ", ".join(str(t) for t in request.tp_degrees)
        raise _refuse("tp", f"pinned tp {pin.tp} is not a tensor-parallel degree the planner models ({grid})")
    if pin.ep is not None and pin.ep > 1:
        _check_expert_parallel(pin.ep, request, inputs)
    narrowed = replace(
        request,
        tp_degrees=request.tp_degrees if pin.tp is None else (pin.tp,),
        ep_degrees=request.ep_degrees if pin.ep is None else (pin.ep,),
        pp_degrees=request.pp_degrees if pin.pp is None else (pin.pp,),
        batch_limits=request.batch_limits if pin.batch_limit is None else (pin.batch_limit,),
        chunk_budgets=(pin.chunk_tokens,) if pin.chunk_pinned else request.chunk_budgets,
    )
    return narrowed, inputs


def without_replicas(pin: Pin | None) -> Pin | None:
    """The pin with its replica count released (the advice's relaxation, the sensitivity's re-plans)."""
    if pin is None or pin.replicas is None:
        return pin
    return replace(pin, replicas=None)
