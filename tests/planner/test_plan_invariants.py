"""Invariants of `plan_capacity` over generated requests (issue 13 §1 and §3; docs/plan-invariants.md).

Each property draws small requests — a model, two to four GPU types, one or two precision pairs,
a short length distribution, a modest rate, SLOs, limits, verification on or off — plans them and
checks what anyone can check by eye:

1. cost is monotone: more traffic never lowers it; a looser SLO, a larger budget, more inventory,
   a larger max_gpus, one more allowed GPU type or precision never raises it (an infeasible
   request counts as infinitely expensive);
2. a budget at or above the optimum without a budget never makes the request infeasible;
3. a 422's relaxations, applied and re-planned, give a plan, and 5 % less of each (one less for
   a whole-number limit), toward the request's own value, does not;
4. cost is Σ price × GPUs over the plan's rows, per hour, per month (× 730) and per row;
5. a verified plan meets its SLOs in an independent simulator run (another seed);
6. no alternative costs less than the plan;
and the §1 consistency checks: sensitivity to traffic is monotone, the binding section's counts are
the plan's, a verified plan never sends the reader to the simulator without saying its figures
are the ones of record.

Every request is a `Case`, a flat record whose repr is the exact request: a counter-example
hypothesis prints can be pasted into tests/planner/test_plan_regressions.py as it is. The specs
are the datasheet figures of tests/planner/performance_specs.py (L40S from its datasheet), with the
reference catalog's on-demand prices and calibrated efficiencies copied in, so a change to
catalog/data/ does not move a recorded counter-example. CI runs the `ci` hypothesis profile
(derandomized, tests/conftest.py); the example counts below add up to 565 generated
requests, 400 of them in the properties that hold today (docs/plan-invariants.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from hypothesis import HealthCheck, Phase, event, example, given, note, settings
from hypothesis import strategies as st

from planner.errors import InfeasiblePlanError
from planner.memory import kv_capacity_tokens
from planner.optimizer import PlanConstraints
from planner.performance import build_step_model
from planner.plan_result import as_dict
from planner.planning import (
    HOURS_PER_MONTH,
    PlanningInputs,
    PlanningRequest,
    PlanResult,
    plan_capacity,
)
from planner.simulator import simulate
from planner.specs import Efficiency, GpuSpec, ModelSpec, Precision
from planner.workload import LognormalLength, Serving, Slo, Workload
from tests.planner.performance_specs import (
    A100_SXM,
    BF16,
    FP8,
    GB,
    H100_SXM,
    LLAMA_2_70B,
    MI300X,
    TFLOPS,
)

# --- the tiny catalog -------------------------------------------------------------------------------

# Calibrated efficiencies and on-demand prices of the reference catalog (catalog/data/gpus.json), copied.
H100 = replace(
    H100_SXM,
    price_usd_per_hour_on_demand=6.155,
    efficiency=Efficiency(
        name="calibrated",
        memory=0.7257,
        compute=0.5147,
        step_overhead_s=0.002,
        memory_reserve_fraction=0.1,
        memory_compute_overlap=0.2652,
        source="reference catalog",
    ),
)
A100 = replace(
    A100_SXM,
    price_usd_per_hour_on_demand=2.7,
    efficiency=Efficiency(
        name="calibrated",
        memory=0.6418,
        compute=0.778,
        step_overhead_s=0.002,
        memory_reserve_fraction=0.1,
        memory_compute_overlap=0.4788,
        source="reference catalog",
    ),
)
MI300 = replace(
    MI300X,
    price_usd_per_hour_on_demand=1.5,
    efficiency=Efficiency(
        name="calibrated",
        memory=0.3387,
        compute=0.1807,
        step_overhead_s=0.002,
        memory_reserve_fraction=0.1,
        memory_compute_overlap=0.6948,
        source="reference catalog",
    ),
)
# NVIDIA L40S datasheet: 48 GB GDDR6, 864 GB/s, dense BF16 362, FP8 733 TFLOP/s; PCIe Gen4 x16 64 GB/s.
L40S = GpuSpec(
    slug="l40s",
    vendor="nvidia",
    architecture="ada",
    memory_bytes=48 * GB,
    hbm_bandwidth_bytes_per_s=864e9,
    peak_flops_per_s={"bf16": 362 * TFLOPS, "fp16": 362 * TFLOPS, "fp8": 733 * TFLOPS, "int8": 733 * TFLOPS},
    interconnect_bytes_per_s=64 * GB,
    interconnect_latency_s=10e-6,
    gpus_per_node=8,
    price_usd_per_hour_on_demand=1.861,
    efficiency=Efficiency(
        name="calibrated",
        memory=0.8255,
        compute=0.6103,
        step_overhead_s=0.002,
        memory_reserve_fraction=0.1,
        memory_compute_overlap=0.4562,
        source="reference catalog",
    ),
)
GPUS: dict[str, GpuSpec] = {g.slug: g for g in (H100, A100, L40S, MI300)}


def _dense(
    slug: str, params: float, layers: int, hidden: int, heads: int, kv_heads: int, intermediate: int, vocab: int, context: int
) -> ModelSpec:
    return ModelSpec(
        slug=slug,
        params_total=params,
        params_active=params,
        layers=layers,
        hidden_size=hidden,
        attention_heads=heads,
        kv_heads=kv_heads,
        head_dim=128,
        intermediate_size=intermediate,
        vocab_size=vocab,
        max_context_tokens=context,
    )


# Published config.json shapes (as in catalog/data/models.json).
MODELS: dict[str, ModelSpec] = {
    m.slug: m
    for m in (
        _dense("llama-3.1-8b", 8.03e9, 32, 4096, 32, 8, 14336, 128256, 131072),
        _dense("mistral-7b-v0.3", 7.3e9, 32, 4096, 32, 8, 14336, 32768, 32768),
        _dense("qwen2.5-7b", 7.61e9, 28, 3584, 28, 4, 18944, 152064, 131072),
        _dense("llama-2-13b", 13e9, 40, 5120, 40, 40, 13824, 32000, 4096),
        LLAMA_2_70B,
    )
}
PRECISIONS: dict[str, Precision] = {
    "bf16/bf16": Precision(weights=BF16, kv_cache=BF16),
    "fp8/fp8": Precision(weights=FP8, kv_cache=FP8),
    "fp8/bf16": Precision(weights=FP8, kv_cache=BF16),
}
#: The search grid of tests/planner/test_planning.py: enough choice for the optimizer to get wrong.
GRID: dict[str, Any] = {"tp_degrees": (1, 2), "batch_limits": (16, 64), "chunk_budgets": (None, 2048)}
VERIFY_REQUESTS = 2_000
#: The independent run of invariant 5: another seed, and twice the requests of verification.
CHECK_SEED = 7_919
CHECK_REQUESTS = 4_000
#: A miss seen in the CHECK_REQUESTS run is confirmed over this many (simulated_misses).
CONFIRM_REQUESTS = 40_000
#: No shrinking: an example is one to a dozen plans (a 422's advice re-plans for seconds), so shrinking
#: a failure would take minutes; the failing `Case` hypothesis prints is flat and exact as generated.
FAST: dict[str, Any] = {
    "deadline": None,
    "phases": (Phase.explicit, Phase.reuse, Phase.generate),
    "suppress_health_check": [HealthCheck.too_slow],
}
#: Cost equality to well below a cent per hour (sums of a handful of prices).
COST_TOLERANCE = 1e-6


@dataclass(frozen=True, kw_only=True)
class Case:
    """One planning request, flat, so that its repr is the request (paste it into a regression test)."""

    model: str
    gpus: tuple[str, ...]
    precisions: tuple[str, ...]
    rate_rps: float
    prompt: tuple[int, int]  # mean, p99 tokens (lognormal)
    output: tuple[int, int]
    arrival_cv: float = 1.0
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2e_s: float | None = None
    max_gpus: int | None = None
    budget_usd_per_hour: float | None = None
    min_replicas: int = 1
    n_plus_one: bool = False
    mixed_fleet: bool = False
    inventory: tuple[tuple[str, int], ...] = ()
    verify: bool = False
    #: Catalog GPU types and precisions the request did not allow: what a 422's advice may add.
    other_gpus: tuple[str, ...] = ()
    other_precisions: tuple[str, ...] = ()

    def inputs(self) -> PlanningInputs:
        return PlanningInputs(
            model=MODELS[self.model],
            gpus=tuple(GPUS[g] for g in self.gpus),
            precisions=tuple(PRECISIONS[p] for p in self.precisions),
            efficiency_profile="calibrated",
            other_gpus=tuple(GPUS[g] for g in self.other_gpus),
            other_precisions=tuple(PRECISIONS[p] for p in self.other_precisions),
        )

    def workload(self) -> Workload:
        return Workload(
            arrival_rate_rps=self.rate_rps,
            prompt_tokens=LognormalLength(mean_tokens=self.prompt[0], p99_tokens=self.prompt[1]),
            output_tokens=LognormalLength(mean_tokens=self.output[0], p99_tokens=self.output[1]),
            arrival_cv=self.arrival_cv,
        )

    def slo(self) -> Slo:
        return Slo(
            ttft_s=None if self.ttft_ms is None else self.ttft_ms / 1e3,
            tpot_s=None if self.tpot_ms is None else self.tpot_ms / 1e3,
            e2e_s=self.e2e_s,
        )

    def constraints(self) -> PlanConstraints:
        return PlanConstraints(
            max_gpus=self.max_gpus,
            budget_usd_per_hour=self.budget_usd_per_hour,
            min_replicas=self.min_replicas,
            n_plus_one=self.n_plus_one,
            mixed_fleet=self.mixed_fleet,
            inventory=dict(self.inventory),
        )

    def request(self, *, advise: bool = False) -> PlanningRequest:
        return PlanningRequest(
            workload=self.workload(),
            slo=self.slo(),
            constraints=self.constraints(),
            verify=self.verify,
            verify_requests=VERIFY_REQUESTS,
            advise=advise,
            **GRID,
        )


def plan(case: Case, *, advise: bool = False) -> PlanResult | InfeasiblePlanError:
    """The plan, or the 422 it answers with; any other exception is a bug and propagates."""
    try:
        return plan_capacity(case.request(advise=advise), case.inputs())
    except InfeasiblePlanError as error:
        return error


def cost_of(outcome: PlanResult | InfeasiblePlanError) -> float:
    """An infeasible request is infinitely expensive: no plan is dearer than any plan."""
    return math.inf if isinstance(outcome, InfeasiblePlanError) else outcome.cost_usd_per_hour


def describe(outcome: PlanResult | InfeasiblePlanError) -> str:
    if isinstance(outcome, InfeasiblePlanError):
        return f"422 ({outcome.extensions.get('constraint')}): {outcome.detail}"
    rows = ", ".join(
        f"{r.replicas}×{r.gpu}/tp{r.tp}/{r.weights_precision}/{r.kv_precision}/b{r.batch_limit}/"
        f"{'nochunk' if r.chunk_tokens is None else f'c{r.chunk_tokens}'}"
        for r in outcome.rows
    )
    return f"${outcome.cost_usd_per_hour:.4f}/h on {outcome.gpus_total} GPUs: {rows}"


def at_most(higher: float, lower: float) -> bool:
    """`lower <= higher` up to rounding of sums of prices (inf compares as itself)."""
    return lower <= higher or math.isclose(lower, higher, rel_tol=COST_TOLERANCE)


# --- counter-examples found (tests/planner/test_plan_regressions.py tests each; docs/plan-invariants.md) -----

#: 70B at 30 rps on a verified mixed fleet with N+1, three GPU types, H100s limited to 3.
SEVENTY_B_MIXED = Case(
    model="llama-2-70b",
    gpus=("mi300x", "h100-sxm", "l40s"),
    precisions=("fp8/bf16", "bf16/bf16"),
    rate_rps=30.25,
    prompt=(512, 768),
    output=(125, 250),
    ttft_ms=150,
    n_plus_one=True,
    mixed_fleet=True,
    inventory=(("h100-sxm", 3),),
    verify=True,
)
#: 8B at 35 rps, e2e 4 s only, bursty arrivals (cv 1.5): a verified mixed fleet that ends on one configuration.
EIGHT_B_E2E_MIXED = Case(
    model="llama-3.1-8b",
    gpus=("h100-sxm", "a100-80gb-sxm", "l40s", "mi300x"),
    precisions=("bf16/bf16", "fp8/fp8"),
    rate_rps=34.75,
    prompt=(32, 48),
    output=(356, 1068),
    arrival_cv=1.5,
    e2e_s=4,
    min_replicas=0,
    mixed_fleet=True,
    verify=True,
)
#: 70B at 36.75 rps, TPOT 102 ms only, fp8/fp8 on three GPU types, unverified.
SEVENTY_B_TPOT = Case(
    model="llama-2-70b",
    gpus=("l40s", "mi300x", "h100-sxm"),
    precisions=("fp8/fp8",),
    rate_rps=36.75,
    prompt=(755, 1510),
    output=(121, 242),
    tpot_ms=102,
)
#: 8B at 1 rps, TTFT 1,357 ms / TPOT 16 ms / e2e 52 s, bursty, a verified mixed fleet with MI300X and A100
#: capped at 2: the simulator refuted 1 × MI300X fp8/bf16 ($1.50/h), the plan took 2 × MI300X fp8/fp8
#: ($3/h), and the alternatives listed the refuted configuration as $1.50/h (found 2026-12-04).
EIGHT_B_REFUTED_ALTERNATIVE = Case(
    model="llama-3.1-8b",
    gpus=("h100-sxm", "a100-80gb-sxm", "mi300x"),
    precisions=("fp8/fp8", "fp8/bf16"),
    rate_rps=1.0,
    prompt=(774, 3096),
    output=(16, 64),
    arrival_cv=1.5,
    ttft_ms=1357,
    tpot_ms=16,
    e2e_s=52,
    min_replicas=0,
    mixed_fleet=True,
    inventory=(("a100-80gb-sxm", 2), ("mi300x", 2)),
    verify=True,
)
#: SEVENTY_B_TPOT verified under a $6/h budget, the catalog's other GPU and precision offered: a 422.
SEVENTY_B_TPOT_BUDGET_6 = replace(
    SEVENTY_B_TPOT, budget_usd_per_hour=6.0, verify=True, other_gpus=("a100-80gb-sxm",), other_precisions=("bf16/bf16",)
)

#: A TPOT below every configuration's unloaded floor and min_replicas 3 against max_gpus 2: two culprits.
SEVENTY_B_TWO_CULPRITS = Case(
    model="llama-2-70b",
    gpus=("h100-sxm", "mi300x"),
    precisions=("fp8/fp8",),
    rate_rps=0.5,
    prompt=(32, 48),
    output=(16, 24),
    arrival_cv=1.5,
    ttft_ms=150,
    tpot_ms=15,
    max_gpus=2,
    min_replicas=3,
    other_gpus=("a100-80gb-sxm",),
    other_precisions=("bf16/bf16",),
)

#: Llama 2 13B at 13 rps, TTFT 150 ms and TPOT 109 ms, a verified mixed fleet with N+1, min_replicas 3,
#: one H100 and one MI300X in stock.
THIRTEEN_B_MIXED = Case(
    model="llama-2-13b",
    gpus=("l40s", "a100-80gb-sxm", "h100-sxm", "mi300x"),
    precisions=("bf16/bf16",),
    rate_rps=13.0,
    prompt=(633, 949),
    output=(16, 32),
    arrival_cv=1.5,
    ttft_ms=150,
    tpot_ms=109,
    min_replicas=3,
    n_plus_one=True,
    mixed_fleet=True,
    inventory=(("h100-sxm", 1), ("mi300x", 1)),
    verify=True,
)


# --- strategies ---------------------------------------------------------------------------------------


@st.composite
def lengths(draw: st.DrawFn, low: int, high: int) -> tuple[int, int]:
    mean = draw(st.integers(min_value=low, max_value=high))
    return mean, int(mean * draw(st.sampled_from((1.5, 2.0, 3.0, 4.0))))


@st.composite
def cases(draw: st.DrawFn, *, verify: bool | None = None, limits: bool = True, mixed: bool = True) -> Case:
    """A small request: 2-4 GPU types, 1-2 precisions, modest rate and lengths, SLOs, optional limits."""
    gpus = tuple(draw(st.lists(st.sampled_from(tuple(GPUS)), min_size=2, max_size=4, unique=True)))
    precisions = tuple(draw(st.lists(st.sampled_from(tuple(PRECISIONS)), min_size=1, max_size=2, unique=True)))
    targets = draw(st.sampled_from(("ttft+tpot", "tpot", "ttft", "e2e", "ttft+tpot+e2e")))
    case = Case(
        model=draw(st.sampled_from(tuple(MODELS))),
        gpus=gpus,
        precisions=precisions,
        rate_rps=draw(st.integers(min_value=1, max_value=160)) / 4,
        prompt=draw(lengths(32, 1024)),
        output=draw(lengths(16, 384)),
        arrival_cv=draw(st.sampled_from((1.0, 1.0, 1.0, 1.5))),
        ttft_ms=draw(st.integers(min_value=150, max_value=3000)) if "ttft" in targets else None,
        tpot_ms=draw(st.integers(min_value=15, max_value=150)) if "tpot" in targets else None,
        e2e_s=draw(st.integers(min_value=4, max_value=60)) if "e2e" in targets else None,
        verify=draw(st.booleans()) if verify is None else verify,
    )
    if not limits:
        return case
    inventory = draw(st.dictionaries(st.sampled_from(gpus), st.integers(min_value=0, max_value=8), max_size=2))
    return replace(
        case,
        max_gpus=draw(st.none() | st.integers(min_value=1, max_value=12)),
        budget_usd_per_hour=draw(st.none() | st.integers(min_value=2, max_value=80).map(float)),
        min_replicas=draw(st.integers(min_value=0, max_value=3)),
        n_plus_one=draw(st.booleans()),
        mixed_fleet=draw(st.booleans()) if mixed else False,
        inventory=tuple(sorted(inventory.items())),
    )


def _noted(case: Case, outcome: PlanResult | InfeasiblePlanError, label: str) -> PlanResult | InfeasiblePlanError:
    note(f"{label}: {case!r}\n  -> {describe(outcome)}")
    event("feasible" if isinstance(outcome, PlanResult) else f"422 {outcome.extensions.get('constraint')}")
    return outcome


def assert_cost_not_raised(tighter: Case, looser: Case, what: str) -> None:
    strict = _noted(tighter, plan(tighter), "tighter")
    loose = _noted(looser, plan(looser), "looser")
    assert at_most(cost_of(strict), cost_of(loose)), (
        f"{what} raised the cost: {describe(strict)} became {describe(loose)}\n  before: {tighter!r}\n  after:  {looser!r}"
    )


# --- 1. monotone cost ----------------------------------------------------------------------------------


@settings(max_examples=40, **FAST)
@given(case=cases(), factor=st.sampled_from((1.05, 1.1, 1.25, 1.5, 2.0, 3.0)))
def test_more_traffic_never_lowers_the_cost(case: Case, factor: float) -> None:
    assert_cost_not_raised(replace(case, rate_rps=case.rate_rps * factor), case, f"less traffic (÷{factor})")


@settings(max_examples=40, **FAST)
@given(case=cases(), factor=st.sampled_from((1.05, 1.1, 1.25, 1.5, 2.0)), which=st.sampled_from(("ttft", "tpot", "e2e", "all")))
@example(case=THIRTEEN_B_MIXED, factor=1.05, which="ttft")
def test_a_looser_slo_never_raises_the_cost(case: Case, factor: float, which: str) -> None:
    changes = {
        f: getattr(case, f) * factor
        for f in ("ttft_ms", "tpot_ms", "e2e_s")
        if getattr(case, f) is not None and (which == "all" or f.startswith(which))
    }
    assert_cost_not_raised(case, replace(case, **changes), f"looser SLO (×{factor} on {which})")


@settings(max_examples=30, **FAST)
@given(case=cases(), budget=st.integers(min_value=2, max_value=60).map(float), factor=st.sampled_from((1.05, 1.5, 2.0, None)))
@example(case=SEVENTY_B_TPOT, budget=18.0, factor=None)
def test_a_larger_budget_never_raises_the_cost(case: Case, budget: float, factor: float | None) -> None:
    tighter = replace(case, budget_usd_per_hour=budget)
    assert_cost_not_raised(
        tighter, replace(case, budget_usd_per_hour=None if factor is None else budget * factor), f"a larger budget (×{factor})"
    )


@settings(max_examples=30, **FAST)
@given(case=cases(), data=st.data())
def test_more_inventory_never_raises_the_cost(case: Case, data: st.DataObject) -> None:
    gpu = data.draw(st.sampled_from(case.gpus), label="gpu")
    stock = data.draw(st.integers(min_value=0, max_value=6), label="stock")
    more = data.draw(st.integers(min_value=1, max_value=8) | st.none(), label="more (None: unlimited)")
    others = tuple((g, n) for g, n in case.inventory if g != gpu)
    tighter = replace(case, inventory=tuple(sorted((*others, (gpu, stock)))))
    looser = replace(case, inventory=others if more is None else tuple(sorted((*others, (gpu, stock + more)))))
    assert_cost_not_raised(tighter, looser, f"more {gpu} inventory")


@settings(max_examples=30, **FAST)
@given(case=cases(), limit=st.integers(min_value=1, max_value=8), more=st.integers(min_value=1, max_value=8) | st.none())
def test_a_larger_max_gpus_never_raises_the_cost(case: Case, limit: int, more: int | None) -> None:
    assert_cost_not_raised(
        replace(case, max_gpus=limit), replace(case, max_gpus=None if more is None else limit + more), "a larger max_gpus"
    )


@settings(max_examples=30, **FAST)
@given(case=cases(), kind=st.sampled_from(("gpu", "precision")), pick=st.integers(min_value=0, max_value=3))
@example(case=SEVENTY_B_MIXED, kind="precision", pick=0)
def test_one_more_gpu_type_or_precision_never_raises_the_cost(case: Case, kind: str, pick: int) -> None:
    if kind == "gpu":
        left_out = case.gpus[pick % len(case.gpus)]
        fewer = tuple(g for g in case.gpus if g != left_out)
        tighter = replace(case, gpus=fewer, inventory=tuple((g, n) for g, n in case.inventory if g != left_out))
        looser = replace(case, inventory=tighter.inventory)
    else:
        extras = [p for p in PRECISIONS if p not in case.precisions]
        tighter, looser = case, replace(case, precisions=(*case.precisions, extras[pick % len(extras)]))
    assert_cost_not_raised(tighter, looser, f"one more allowed {kind}")


# --- 2. a sufficient budget is feasible -------------------------------------------------------------


@settings(max_examples=40, **FAST)
@given(case=cases(), headroom=st.sampled_from((0.0, 0.0, 1e-9, 0.01, 0.1, 0.5)))
def test_a_budget_at_or_above_the_optimum_keeps_the_request_feasible(case: Case, headroom: float) -> None:
    """The cheapest plan without a budget (the other limits kept) is within any budget ≥ its cost, so
    that budget cannot make the request infeasible, nor change the optimal cost."""
    free = replace(case, budget_usd_per_hour=None)
    optimum = _noted(free, plan(free), "without a budget")
    if isinstance(optimum, InfeasiblePlanError):
        return  # no optimum to budget for
    budgeted = replace(case, budget_usd_per_hour=optimum.cost_usd_per_hour * (1 + headroom))
    outcome = _noted(budgeted, plan(budgeted), "budgeted")
    assert isinstance(outcome, PlanResult), f"a budget of the optimum × {1 + headroom} is refused: {describe(outcome)}"
    assert math.isclose(outcome.cost_usd_per_hour, optimum.cost_usd_per_hour, rel_tol=COST_TOLERANCE), (
        f"a non-binding budget moved the optimum: {describe(optimum)} became {describe(outcome)}"
    )


# --- 3. a 422's relaxations work and are minimal -------------------------------------------------------


def relaxations_of(error: InfeasiblePlanError) -> tuple[list[dict[str, Any]], str]:
    """The error's relaxations as `[{constraint, current, value, unit}]` and whether any one ("any") or
    all together ("all") are claimed to work.

    Reads the one shape `relaxations: [{constraint, current, value, unit}]` (planner/advice.py) when
    present, and otherwise adapts the optimizer's older extensions (`relaxation`/`relaxations` with
    `needed`/`limit`, `raise_inventory_to`, and an SLO's `smallest_feasible`)."""
    extensions = error.extensions
    listed = extensions.get("relaxations")
    if isinstance(listed, list) and all(isinstance(r, dict) and "value" in r for r in listed):
        return [dict(r) for r in listed], str(extensions.get("relaxations_apply", "any"))
    old = listed if isinstance(listed, list) else [extensions["relaxation"]] if "relaxation" in extensions else []
    out: list[dict[str, Any]] = []
    for r in old:
        family = r.get("constraint")
        if family in ("max_gpus", "budget", "min_replicas"):
            field = {"max_gpus": "max_gpus", "budget": "budget_usd_per_hour", "min_replicas": "min_replicas"}[family]
            out.append({"constraint": f"constraints.{field}", "current": r["limit"], "value": r["needed"], "unit": None})
        elif family == "gpu_inventory":
            out += [
                {"constraint": f"constraints.inventory.{gpu}", "current": None, "value": n, "unit": "GPUs"}
                for gpu, n in r["raise_inventory_to"].items()
            ]
        elif family == "n_plus_one":
            out.append({"constraint": "constraints.n_plus_one", "current": True, "value": False, "unit": None})
    metric = extensions.get("constraint")
    if metric in ("ttft", "tpot", "e2e") and isinstance(extensions.get("smallest_feasible"), int | float):
        field = {"ttft": "slo.ttft_ms", "tpot": "slo.tpot_ms", "e2e": "slo.e2e_s"}[metric]
        out.append(
            {"constraint": field, "current": None, "value": extensions["smallest_feasible"], "unit": extensions.get("unit")}
        )
    return out, "any"


def relaxed(case: Case, relaxation: dict[str, Any], value: Any = None) -> Case:
    """`case` with one relaxation applied (at `value` instead of the advised one, when given)."""
    name, value = relaxation["constraint"], relaxation["value"] if value is None else value
    if name in ("slo.ttft_ms", "slo.tpot_ms"):
        return replace(case, **{name.removeprefix("slo."): float(value)})
    if name == "slo.e2e_s":
        return replace(case, e2e_s=float(value))
    if name == "constraints.budget_usd_per_hour":
        return replace(case, budget_usd_per_hour=float(value))
    if name == "constraints.max_gpus":
        return replace(case, max_gpus=int(value))
    if name == "constraints.min_replicas":
        return replace(case, min_replicas=int(value))
    if name == "constraints.n_plus_one":
        return replace(case, n_plus_one=bool(value))
    if name.startswith("constraints.inventory."):
        gpu = name.removeprefix("constraints.inventory.")
        return replace(case, inventory=tuple(sorted((*((g, n) for g, n in case.inventory if g != gpu), (gpu, int(value))))))
    if name == "constraints.gpus":
        return replace(case, gpus=(*case.gpus, value), other_gpus=tuple(g for g in case.other_gpus if g != value))
    if name == "constraints.precisions":
        return replace(
            case, precisions=(*case.precisions, value), other_precisions=tuple(p for p in case.other_precisions if p != value)
        )
    raise AssertionError(f"a relaxation of an unknown constraint {name!r}: {relaxation}")


def just_short(relaxation: dict[str, Any]) -> Any:
    """The relaxation moved 5 % back toward the request's value (one step for a whole-number limit),
    or None where that is the request's own value (known infeasible) or not a number."""
    name, current, value = relaxation["constraint"], relaxation["current"], relaxation["value"]
    if isinstance(value, bool) or not isinstance(value, int | float) or not isinstance(current, int | float | None):
        return None
    if name == "constraints.min_replicas":  # relaxed downward
        short: float = value + 1
        return short if current is None or short < current else None
    short = value - 1 if name.startswith(("constraints.max_gpus", "constraints.inventory.")) else value * 0.95
    return short if current is None or short > current else None


@st.composite
def infeasible_cases(draw: st.DrawFn) -> Case:
    """Requests that are mostly impossible: one limit or SLO set below what the traffic needs, with the
    catalog's other GPU types and precisions offered to the advice."""
    case = draw(cases(limits=False, mixed=False))
    squeeze = draw(st.sampled_from(("slo", "budget", "max_gpus", "inventory", "min_replicas", "n_plus_one")))
    if squeeze == "slo":
        case = replace(
            case,
            ttft_ms=draw(st.integers(min_value=20, max_value=200)),
            tpot_ms=draw(st.integers(min_value=2, max_value=15)) if case.tpot_ms is not None else None,
        )
    elif squeeze == "budget":
        case = replace(case, budget_usd_per_hour=draw(st.integers(min_value=1, max_value=12).map(float)))
    elif squeeze == "max_gpus":
        case = replace(case, max_gpus=1, rate_rps=case.rate_rps * 4)
    elif squeeze == "inventory":
        case = replace(case, inventory=tuple((g, draw(st.integers(min_value=0, max_value=1))) for g in case.gpus))
    elif squeeze == "min_replicas":
        case = replace(case, min_replicas=draw(st.integers(min_value=3, max_value=6)), max_gpus=2)
    else:
        case = replace(case, n_plus_one=True, max_gpus=1)
    other_gpus = tuple(g for g in GPUS if g not in case.gpus)
    other_precisions = tuple(p for p in PRECISIONS if p not in case.precisions)
    return replace(case, other_gpus=other_gpus[:1], other_precisions=other_precisions[:1])


def check_relaxations(case: Case, error: InfeasiblePlanError) -> Iterator[str]:
    """Every way the error's advice fails: a relaxation that does not work, or one 5 % short that does."""
    relaxations, apply = relaxations_of(error)
    if not relaxations:
        event("422 without a relaxation")
        return
    if apply == "all":
        together = case
        for relaxation in relaxations:
            together = relaxed(together, relaxation)
        outcome = plan(together)
        if isinstance(outcome, InfeasiblePlanError):
            yield f"all relaxations together {relaxations} still give {describe(outcome)} for {together!r}"
        return
    for relaxation in relaxations:
        applied = relaxed(case, relaxation)
        outcome = plan(applied)
        if isinstance(outcome, InfeasiblePlanError):
            yield f"relaxation {relaxation} applied still gives {describe(outcome)}: {applied!r}"
            continue
        short = just_short(relaxation)
        if short is None:
            continue
        nearer = relaxed(case, relaxation, short)
        outcome = plan(nearer)
        if isinstance(outcome, PlanResult):
            yield (
                f"relaxation {relaxation} is not minimal: {relaxation['constraint']} = {short:g} (5 % / one step "
                f"toward {relaxation['current']}) already gives {describe(outcome)}: {nearer!r}"
            )


@settings(max_examples=25, **FAST)
@given(case=infeasible_cases())
@example(case=SEVENTY_B_TPOT_BUDGET_6)
def test_a_422s_relaxations_work_and_are_minimal(case: Case) -> None:
    """Each relaxation the advice lists, applied and re-planned (verification as requested), gives a
    plan; 5 % less of it (one less GPU, one more required replica) toward the request's own value
    does not — the advice claims each is the smallest that works, to 5 %."""
    outcome = _noted(case, plan(case, advise=True), "request")
    if isinstance(outcome, PlanResult):
        return
    note(f"extensions: {outcome.extensions}")
    failures = list(check_relaxations(case, outcome))
    assert not failures, "\n".join(failures)


# --- 4, 6 and §1: what every plan says of itself ----------------------------------------------------


def cost_failures(case: Case, result: PlanResult) -> Iterator[str]:
    """Invariant 4: cost = Σ price × GPUs, per row, per hour, per month (× 730)."""
    total = 0.0
    for row in result.rows:
        expected = GPUS[row.gpu].price_usd_per_hour_on_demand * row.gpus
        total += expected
        if row.gpus != row.replicas * row.tp:
            yield f"row {row.gpu} has {row.gpus} GPUs, not replicas {row.replicas} × tp {row.tp}"
        if not math.isclose(row.cost_usd_per_hour, expected, rel_tol=COST_TOLERANCE):
            yield f"row {row.gpu} costs {row.cost_usd_per_hour}, not price × GPUs = {expected}"
    if not math.isclose(result.cost_usd_per_hour, total, rel_tol=COST_TOLERANCE):
        yield f"plan costs {result.cost_usd_per_hour}/h, not Σ price × GPUs = {total}"
    if not math.isclose(result.cost_usd_per_month, total * HOURS_PER_MONTH, rel_tol=COST_TOLERANCE):
        yield f"plan costs {result.cost_usd_per_month}/month, not 730 × {total}"
    if result.gpus_total != sum(r.gpus for r in result.rows) or result.replicas != sum(r.replicas for r in result.rows):
        yield f"totals {result.replicas} replicas / {result.gpus_total} GPUs are not the rows' sums"
    if case.budget_usd_per_hour is not None and result.cost_usd_per_hour > case.budget_usd_per_hour * (1 + COST_TOLERANCE):
        yield f"plan costs {result.cost_usd_per_hour}/h over the budget {case.budget_usd_per_hour}"
    if case.max_gpus is not None and result.gpus_total > case.max_gpus:
        yield f"plan uses {result.gpus_total} GPUs, max_gpus is {case.max_gpus}"
    for gpu, stock in case.inventory:
        used = sum(r.gpus for r in result.rows if r.gpu == gpu)
        if used > stock:
            yield f"plan uses {used} {gpu}, inventory is {stock}"
    if result.replicas < case.min_replicas:
        yield f"plan has {result.replicas} replicas, min_replicas is {case.min_replicas}"
    if not case.mixed_fleet and len(result.rows) != 1:
        yield f"a single-configuration request got {len(result.rows)} rows"


def alternative_failures(result: PlanResult) -> Iterator[str]:
    """Invariant 6: no alternative is cheaper than the plan, exact or not; a lower bound not above it
    would have been priced exactly (planner/planning.py's `_alternatives_section`)."""
    cost = result.cost_usd_per_hour
    for alternative in as_dict(result.justification)["alternatives"]:
        priced = alternative.get("cost_usd_per_hour")
        if priced is not None and not at_most(priced, cost):
            yield (
                f"alternative {alternative['kind']} {alternative['name']} (exact: {alternative.get('exact')}) costs "
                f"{priced}/h, less than the plan's {cost}/h: {alternative}"
            )
        bound = alternative.get("cost_at_least_usd_per_hour")
        if alternative.get("exact") is False and bound is not None and not bound > cost * (1 - COST_TOLERANCE):
            yield f"alternative {alternative['name']} is bounded at {bound}/h, not above the plan's {cost}/h: {alternative}"


def sensitivity_failures(result: PlanResult) -> Iterator[str]:
    """§1: more traffic never costs less; within-limits levels come before any that break a limit.

    A level no plan within the limits serves is priced without them (`within_limits: false`): it is
    compared with the levels priced the same way, not with those priced within the limits, which may
    cost more for less traffic (a max_gpus that forces dearer GPUs)."""
    traffic = as_dict(result.justification)["sensitivity"]["traffic"]
    cost = result.cost_usd_per_hour
    previous_same, outside = None, False
    previous = {True: cost, False: -math.inf}  # by within_limits
    for level in traffic:
        factor = level["traffic_factor"]
        if level.get("cost_usd_per_hour") is not None:
            within = level.get("within_limits") is not False
            if not at_most(level["cost_usd_per_hour"], previous[within]):
                yield (
                    f"×{factor} traffic costs {level['cost_usd_per_hour']}/h, less than {previous[within]}/h at less "
                    f"traffic ({'within' if within else 'without'} the limits): {traffic}"
                )
            if level["cost_increase_usd_per_hour"] < -COST_TOLERANCE * cost:
                yield f"×{factor} traffic has cost_increase {level['cost_increase_usd_per_hour']} < 0: {level}"
            if not math.isclose(
                level["cost_increase_usd_per_hour"], level["cost_usd_per_hour"] - cost, rel_tol=1e-9, abs_tol=1e-9
            ):
                yield f"×{factor} traffic: cost_increase is not its cost − the plan's: {level}"
            previous[within] = level["cost_usd_per_hour"]
            if level.get("within_limits") is False:
                outside = True
            elif level.get("within_limits") and outside:
                yield f"×{factor} traffic fits the limits but less traffic did not: {traffic}"
        same = level.get("same_configuration")
        if same is not None:
            if previous_same is not None and same["cost_usd_per_hour"] < previous_same * (1 - COST_TOLERANCE):
                yield f"×{factor} traffic on the same configuration costs less than at less traffic: {traffic}"
            if same["cost_usd_per_hour"] < cost * (1 - COST_TOLERANCE):
                yield f"×{factor} traffic on the same configuration costs {same['cost_usd_per_hour']} < the plan's {cost}"
            previous_same = same["cost_usd_per_hour"]


def binding_failures(result: PlanResult) -> Iterator[str]:
    """§1: the binding section's counts (replicas, GPUs, cost, per-GPU inventory use) are the plan's."""
    expected = {"min_replicas": result.replicas, "max_gpus": result.gpus_total, "budget": result.cost_usd_per_hour}
    for entry in as_dict(result.justification)["binding"]:
        kind, value = entry["kind"], entry.get("value")
        if kind in expected and not math.isclose(value, expected[kind], rel_tol=COST_TOLERANCE):
            yield f"binding {entry['constraint']} says {value}, the plan has {expected[kind]}: {entry}"
        if kind == "gpu_inventory":
            gpu = next(g for g in GPUS if entry["constraint"].endswith(g.replace("-", "_")))
            used = sum(r.gpus for r in result.rows if r.gpu == gpu)
            if value != used:
                yield f"binding {entry['constraint']} says {value} GPUs, the plan uses {used}: {entry}"


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def fidelity_failures(result: PlanResult) -> Iterator[str]:
    """§1: a verified plan never says "unreliable … use the simulator" without saying the simulator's
    figures are the ones of record (and then they are)."""
    if result.verification is None:
        return
    predicted = as_dict(result.predicted)
    texts = list(_strings(predicted)) + list(_strings(as_dict(result.justification)))
    sends_to_simulator = [t for t in texts if "use the simulator" in t]
    if sends_to_simulator:
        yield f"a verified plan still says {sends_to_simulator[0]!r}"
    if predicted.get("reliable") is False:
        methods = {k: v["method"] for k, v in predicted["of_record"].items()}
        if set(methods.values()) != {"simulated"}:
            yield f"a verified plan outside the analytic model's region reports analytic figures of record: {methods}"
        if "of record are the simulator's" not in (predicted.get("fidelity_note") or ""):
            yield f"a verified unreliable plan's note does not say the simulator's figures are of record: {predicted.get('fidelity_note')!r}"


def plan_failures(case: Case, result: PlanResult) -> list[str]:
    """Every check of one plan but sensitivity (its own property below)."""
    return [*cost_failures(case, result), *alternative_failures(result), *binding_failures(result), *fidelity_failures(result)]


@settings(max_examples=200, **FAST)
@given(case=cases())
@example(case=EIGHT_B_REFUTED_ALTERNATIVE)
def test_every_plan_costs_its_rows_and_its_justification_agrees(case: Case) -> None:
    """Invariants 4 and 6 and two §1 checks on one plan: cost is Σ price × GPUs (per row, per hour,
    × 730 per month) within every limit; no alternative is cheaper; the binding section counts the
    plan's replicas and GPUs; a verified plan's figures of record are the simulator's wherever the
    analytic model is out of its region."""
    outcome = _noted(case, plan(case), "request")
    if isinstance(outcome, InfeasiblePlanError):
        return
    failures = plan_failures(case, outcome)
    assert not failures, "\n".join(failures)


@settings(max_examples=40, **FAST)
@given(case=cases())
@example(case=EIGHT_B_E2E_MIXED)
def test_sensitivity_to_traffic_is_monotone(case: Case) -> None:
    """§1: each traffic level of justification.sensitivity costs at least the level below it and the
    plan itself (cost_increase ≥ 0), its own configuration grown to it too; levels within the limits
    come before any that break one."""
    outcome = _noted(case, plan(case), "request")
    if isinstance(outcome, InfeasiblePlanError):
        return
    failures = list(sensitivity_failures(outcome))
    assert not failures, "\n".join(failures)


# --- 5. a verified plan meets its SLOs in an independent simulation ------------------------------------


def simulated_misses(case: Case, result: PlanResult) -> list[str]:
    """Each row simulated again — one replica at its share of the traffic, a random split (as
    plan_predict.verify_replica_share does), another seed, twice the requests — and compared with the SLOs.

    The rule for noise: the independent run's p99 is an estimate with a 95 % batch-means confidence
    interval (planner/simulator.py). A plan that truly sits at its target reads above it about half
    the time, so a point estimate over the target is not evidence of a miss; the whole interval above
    it is (a false alarm at most ~2.5 % per metric when the true p99 equals the target, less below),
    in the first run and again in a run ten times as long with another seed (the first run's blocks
    can be shorter than a full batch's bursts, which narrows its interval). Instability (queue growing through the run) is a miss outright."""
    misses: list[str] = []
    model, slo = MODELS[case.model], case.slo()
    workload = case.workload()
    for row in result.rows:
        gpu = GPUS[row.gpu]
        precision = next(
            p for p in PRECISIONS.values() if (p.weights.slug, p.kv_cache.slug) == (row.weights_precision, row.kv_precision)
        )
        step_model = build_step_model(gpu, model, precision, row.tp, gpu.efficiency)
        capacity = kv_capacity_tokens(gpu, model, precision, row.tp, gpu.efficiency)
        cv = math.sqrt(
            workload.arrival_cv**2 / row.replicas + (row.replicas - 1) / row.replicas
        )  # random split of a renewal stream
        share = Workload(
            arrival_rate_rps=row.offered_rps / row.replicas,
            prompt_tokens=workload.prompt_tokens,
            output_tokens=workload.output_tokens,
            arrival_cv=cv,
        )
        serving = Serving(batch_limit=row.batch_limit, chunk_tokens=row.chunk_tokens)
        run = simulate(step_model, share, serving, kv_capacity_tokens=capacity, requests=CHECK_REQUESTS, seed=CHECK_SEED)
        if not run.stable:
            misses.append(f"{row.gpu} row unstable at {share.arrival_rate_rps:.3f} rps per replica")
        confirm = None
        for metric, target in (("ttft", slo.ttft_s), ("tpot", slo.tpot_s), ("e2e", slo.e2e_s)):
            if target is None:
                continue
            p = getattr(run, f"{metric}_s")
            if p.p99_ci_low is not None and p.p99_ci_low > target:
                # Near a full batch, bursts outlast the batch-means blocks of a 4,000-request run and its
                # interval comes out too narrow (seen: 10-13 % of seeds put a plan that meets its TTFT
                # over 40,000 requests wholly above the target). A miss must hold in a run ten times as long.
                confirm = confirm or simulate(
                    step_model, share, serving, kv_capacity_tokens=capacity, requests=CONFIRM_REQUESTS, seed=CHECK_SEED + 1
                )
                p = getattr(confirm, f"{metric}_s")
            if p.p99_ci_low is not None and p.p99_ci_low > target:
                misses.append(
                    f"{row.gpu} row: simulated p99 {metric} {p.p99:.4f} s, 95 % CI [{p.p99_ci_low:.4f}, "
                    f"{p.p99_ci_high:.4f}] entirely above the target {target} s"
                )
    return misses


@settings(max_examples=60, **FAST)
@given(case=cases(verify=True))
def test_a_verified_plan_meets_its_slos_in_an_independent_simulation(case: Case) -> None:
    outcome = _noted(case, plan(case), "request")
    if isinstance(outcome, InfeasiblePlanError):
        return
    assert outcome.verification is not None and outcome.verification.meets_slo, outcome.verification
    misses = simulated_misses(case, outcome)
    assert not misses, f"{describe(outcome)}\n" + "\n".join(misses)
