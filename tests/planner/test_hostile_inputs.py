"""The planner never turns a finite input into inf or NaN silently (issue 22 §2): a spec outside
planner/specs.py's physical bounds is a PlannerInputError naming the field, histogram weights
are scaled before they are summed, and nothing absurd enters the MILP."""

from __future__ import annotations

import dataclasses
import math

import pulp
import pytest

from planner import specs
from planner.errors import PlannerInputError
from planner.milp import MAX_COEFFICIENT, check_coefficients
from planner.specs import GpuSpec, ModelSpec, QuantSpec
from planner.workload import MAX_ARRIVAL_CV, MIN_ARRIVAL_CV, FixedLength, HistogramLength, Workload

H100 = GpuSpec(
    slug="h100",
    vendor="nvidia",
    architecture="hopper",
    memory_bytes=80e9,
    hbm_bandwidth_bytes_per_s=3.35e12,
    peak_flops_per_s={"bf16": 989e12},
    interconnect_bytes_per_s=450e9,
)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("memory_bytes", 1e308 * 1e9),  # inf: what a 1e308 GB row became
        ("memory_bytes", specs.MAX_MEMORY_BYTES * 1.01),
        ("hbm_bandwidth_bytes_per_s", math.nan),
        ("interconnect_bytes_per_s", 1e-300),
        ("interconnect_latency_s", 1.0),
        ("gpus_per_node", 10**6),
        ("price_usd_per_hour_on_demand", 1e15),
        ("price_usd_per_hour_reserved_1y", 1e308),
    ],
)
def test_a_gpu_outside_its_physical_bounds_is_refused_by_field(field: str, value: float) -> None:
    with pytest.raises(PlannerInputError) as refused:
        dataclasses.replace(H100, **{field: value})
    assert refused.value.extensions["field"] == field


def test_the_bounds_themselves_are_accepted() -> None:
    """Every bound is inclusive: a GPU, model and scheme at the edges are valid specs."""
    dataclasses.replace(
        H100,
        memory_bytes=specs.MAX_MEMORY_BYTES,
        hbm_bandwidth_bytes_per_s=specs.MIN_BANDWIDTH_BYTES_PER_S,
        interconnect_bytes_per_s=specs.MAX_INTERCONNECT_BYTES_PER_S,
        gpus_per_node=specs.MAX_GPUS_PER_NODE,
        interconnect_latency_s=specs.MAX_INTERCONNECT_LATENCY_S,
        price_usd_per_hour_on_demand=specs.MAX_PRICE_USD_PER_HOUR,
        peak_flops_per_s={"bf16": specs.MAX_PEAK_FLOPS_PER_S, "fp8": specs.MIN_PEAK_FLOPS_PER_S},
    )
    ModelSpec(
        slug="huge",
        params_total=specs.MAX_PARAMS,
        params_active=specs.MAX_PARAMS,
        layers=specs.MAX_MODEL_DIMENSION,
        hidden_size=specs.MAX_MODEL_DIMENSION,
        attention_heads=specs.MAX_MODEL_DIMENSION,
        kv_heads=1,
        head_dim=specs.MAX_MODEL_DIMENSION,
        intermediate_size=specs.MAX_INTERMEDIATE_SIZE,
        vocab_size=specs.MAX_VOCAB_SIZE,
        max_context_tokens=specs.MAX_CONTEXT_TOKENS,
    )
    QuantSpec(
        slug="q", weight_bytes_per_param=specs.MAX_BYTES_PER_VALUE, element_bytes=specs.MIN_BYTES_PER_VALUE, compute_dtype="bf16"
    )


def test_histogram_weights_near_the_float_limit_are_scaled_before_summing() -> None:
    """Two weights of 1e308 sum to inf, and w / inf is 0: once a ZeroDivisionError downstream.
    Scaled by the largest weight first, they are (0.5, 0.5): mean (100 + 300)/2 = 200 tokens."""
    histogram = HistogramLength(tokens=(100, 300), weights=(1e308, 1e308))
    assert histogram.mean == pytest.approx(200.0)
    assert histogram.second_moment == pytest.approx((100**2 + 300**2) / 2)
    with pytest.raises(PlannerInputError):
        HistogramLength(tokens=(100,), weights=(math.inf,))


@pytest.mark.parametrize("cv", [1e-200, MIN_ARRIVAL_CV / 2, MAX_ARRIVAL_CV * 2, math.nan])
def test_an_arrival_cv_outside_its_range_is_refused(cv: float) -> None:
    """1e-200 squared is 0 in floating point: the gamma shape 1/c² divided by zero."""
    with pytest.raises(PlannerInputError) as refused:
        Workload(arrival_rate_rps=1.0, prompt_tokens=FixedLength(tokens=10), output_tokens=FixedLength(tokens=10), arrival_cv=cv)
    assert refused.value.extensions["field"] == "arrival_cv"


@pytest.mark.parametrize("coefficient", [1e16, 1e300])
def test_nothing_absurd_enters_the_milp(coefficient: float) -> None:
    """A cost of 1e15 $/h once failed inside the solver library (HiGHS calls such a model badly scaled)."""
    for cost, refused in ((coefficient, True), (MAX_COEFFICIENT, False)):
        problem = pulp.LpProblem("plan", pulp.LpMinimize)
        replicas = problem.add_variable("replicas", 0, 10, cat="Integer")
        problem += cost * replicas
        problem += replicas >= 1, "meet_demand"
        if refused:
            with pytest.raises(PlannerInputError, match="too large for the solver"):
                check_coefficients(problem)
        else:
            check_coefficients(problem)
