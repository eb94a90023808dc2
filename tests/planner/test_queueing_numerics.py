"""The queueing model's numerical kernels against slow references: the compiled per-point sample
arithmetic and fixed-point evaluation (planner/queueing_kernels.py) against a plain NumPy reading
of the same formulas (tests/planner/queueing_reference.py), the exact Poisson quantile walk against
SciPy, the occupancy fixed point bracketed around Little's-law guess against a wide bracket, the
gamma quantile, the MoE expert count and the screen. Each was rewritten for speed
(docs/plan-benchmark.md); these tests pin that the rewrite computes the same quantities."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import brentq
from scipy.special import ndtri
from scipy.stats import poisson

from planner import queueing, queueing_kernels, queueing_latency, queueing_occupancy, queueing_replica, queueing_sample
from planner.step_model import StepModel
from planner.workload import HistogramLength, Serving, Slo, Workload
from tests.planner import queueing_reference
from tests.planner.test_queueing_model import CHAT, KV_TOKENS, LLAMA70B_4XH100, LONG_TAILED

CHAT_HISTOGRAM = Workload(
    arrival_rate_rps=1.0,
    prompt_tokens=HistogramLength(tokens=(200, 2000, 8000), weights=(0.5, 0.4, 0.1)),
    output_tokens=HistogramLength(tokens=(1, 50, 400), weights=(0.1, 0.6, 0.3)),
)
#: An MoE step model shaped like Mixtral-8x7B on 2 GPUs (8 experts, 2 per token; test figures).
MIXTRAL_LIKE = StepModel(
    dense_weight_bytes=3.2e9,
    expert_weight_bytes=0.35e9,
    experts=8,
    experts_per_token=2,
    moe_layers=32,
    kv_bytes_per_token=131_072.0,
    flops_per_token=2 * 12.9e9,
    attention_flops_per_context_token=4 * 32 * 32 * 128,
    memory_bandwidth_bytes_per_s=2 * 2.0e12,
    compute_flops_per_s=2 * 312e12,
    comm_s_per_token=1e-7,
    comm_latency_s=5e-6,
    step_overhead_s=0.002,
    memory_compute_overlap=0.8,
)


def _kernel_poisson(u: np.ndarray, z: np.ndarray, mean: np.ndarray) -> np.ndarray:
    return np.array([queueing_kernels._poisson_quantile(a, b, m) for a, b, m in zip(u, z, mean, strict=True)])


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1), scale=st.sampled_from([0.05, 0.5, 2.0, 6.0, 11.9]))
def test_the_poisson_quantile_is_scipys_below_the_normal_switch(seed: int, scale: float) -> None:
    """Below the switch the walk is exact: the smallest k with P(K ≤ k) ≥ u, SciPy's
    `poisson.ppf`, except where u sits within rounding of a CDF step (they sum differently)."""
    rng = np.random.default_rng(seed)
    u = rng.uniform(1e-9, 1 - 1e-9, 2048)
    mean = np.minimum(rng.uniform(0.0, 2.0 * scale, u.size), queueing_kernels.POISSON_NORMAL_MEAN)
    k = _kernel_poisson(u, ndtri(u), mean)
    assert np.all(poisson.cdf(k, mean) >= u - 1e-12) and np.all(poisson.cdf(k - 1, mean) < u + 1e-12)
    assert np.mean(k == poisson.ppf(u, mean)) > 0.999


def test_the_poisson_quantile_uses_the_normal_expansion_above_the_switch() -> None:
    """Above the switch the Cornish–Fisher expansion is taken: within one count of the exact quantile."""
    rng = np.random.default_rng(7)
    u = rng.uniform(0.001, 0.999, 2048)
    mean = rng.uniform(queueing_kernels.POISSON_NORMAL_MEAN + 0.1, 500.0, u.size)
    k = _kernel_poisson(u, ndtri(u), mean)
    assert np.max(np.abs(k - poisson.ppf(u, mean))) <= 1


SHAPES = [
    pytest.param(LLAMA70B_4XH100, CHAT, None, id="dense-fixed"),
    pytest.param(LLAMA70B_4XH100, LONG_TAILED, None, id="dense-lognormal"),
    pytest.param(LLAMA70B_4XH100, LONG_TAILED, 1024, id="dense-lognormal-chunked"),
    pytest.param(MIXTRAL_LIKE, CHAT_HISTOGRAM, None, id="moe-histogram"),
    pytest.param(MIXTRAL_LIKE, CHAT_HISTOGRAM, 512, id="moe-histogram-chunked"),
]


@pytest.mark.parametrize(("sm", "workload", "chunk"), SHAPES)
@pytest.mark.parametrize("rho", [0.05, 0.5, 0.85, 0.97])
def test_the_compiled_kernels_compute_the_reference_formulas(
    sm: StepModel, workload: Workload, chunk: int | None, rho: float
) -> None:
    """Each sample point's TTFT, TPOT, E2E and wait, and the occupancy distribution at the fixed
    point, equal the NumPy reference's to rounding (a few ulps; a Poisson count may flip only where
    u sits within an ulp of a CDF step, which these points do not)."""
    serving = Serving(batch_limit=64, chunk_tokens=chunk)
    rep = queueing_replica._replica(sm, workload, serving, KV_TOKENS)
    lam = rho * rep.saturation_rps
    op = queueing_latency._operating_point(rep, lam)
    if op is None:
        return
    reference = queueing_reference.occupancy_at(rep, lam, rho, op.occ.shape_mean)
    for name, value in reference.items():
        assert getattr(op.occ, name) == pytest.approx(value, rel=1e-9, abs=1e-15), name
    for points in (queueing_sample._ALL_POINTS, queueing_sample._SCREEN_HEAD, queueing_sample._SCREEN_REST):
        got, want = queueing_latency._sample(rep, op, points), queueing_reference.sample(rep, op, points)
        for name in ("ttft", "tpot", "e2e", "wait"):
            assert getattr(got, name) == pytest.approx(getattr(want, name), rel=1e-9, abs=1e-15), name


def test_counts_below_is_searchsorted() -> None:
    """The merge that finds each point's place in a CDF equals `np.searchsorted`, ties included."""
    rng = np.random.default_rng(7)
    for size in (1, 5, 200):
        table = np.sort(rng.random(size))
        table[size // 2 :] = table[size // 2]  # ties, as a CDF with zero-probability steps has
        for points in (queueing_sample._ALL_POINTS, queueing_sample._SCREEN_HEAD, queueing_sample._SCREEN_REST):
            for values, ordered, order in (
                (points.u_wait, points.wait_sorted, points.wait_order),
                (points.u_step_in_progress, points.step_in_progress_sorted, points.step_in_progress_order),
            ):
                out = np.empty(values.size, dtype=np.int64)
                queueing_kernels._counts_below(table, ordered, order, out)
                assert np.array_equal(out, np.searchsorted(table, values))


@pytest.mark.parametrize("workload", [CHAT, LONG_TAILED], ids=["fixed", "lognormal"])
@pytest.mark.parametrize("chunk", [None, 1024])
@pytest.mark.parametrize("rho", [0.02, 0.3, 0.7, 0.9, 0.98])
def test_the_occupancy_root_is_the_one_a_wide_bracket_finds(workload: Workload, chunk: int | None, rho: float) -> None:
    """The fixed point is bracketed around Little's-law guess instead of [0, 4c]: the same root (both
    solved to 1e-7), so the occupancy and the wait probability it implies agree."""
    serving = Serving(batch_limit=64, chunk_tokens=chunk)
    rep = queueing_replica._replica(LLAMA70B_4XH100, workload, serving, KV_TOKENS)
    lam = rho * rep.saturation_rps
    occupancy = queueing_occupancy._occupancy(rep, lam, rho)

    def excess(mu: float) -> float:
        return queueing_occupancy._occupancy_at(rep, lam, rho, mu).departure_rate_rps - lam

    wide = brentq(excess, 1e-9, 4.0 * rep.slots, xtol=1e-12 * rep.slots, rtol=1e-12, maxiter=500)
    assert occupancy.shape_mean == pytest.approx(wide, rel=2e-7)
    reference = queueing_occupancy._occupancy_at(rep, lam, rho, wide)
    assert occupancy.mean_running == pytest.approx(reference.mean_running, rel=1e-6)
    assert occupancy.p_wait == pytest.approx(reference.p_wait, rel=1e-4, abs=1e-15)
    assert abs(occupancy.departure_rate_rps - lam) <= 1e-6 * lam


def test_the_gamma_quantile_cube_is_the_power() -> None:
    """Wilson–Hilferty: the cube taken by products equals `** 3` within an ulp or two."""
    z = np.linspace(-6.0, 6.0, 10_001)
    for variance in (1e-6, 0.1, 1.0, 5.0):
        g = np.maximum(1.0 - variance / 9.0 + math.sqrt(variance / 9.0) * z, 0.0)
        assert queueing_latency._gamma_unit_quantile(z, variance) == pytest.approx(g**3, rel=1e-15, abs=0.0)


def test_moe_expert_count_is_the_power_form() -> None:
    """E·(1 − (1 − k/E)^n), computed as −E·expm1(n·log1p(−k/E)): the array step time equals the
    scalar `StepModel.step_s`, which takes the power, from one token (2 of Mixtral's 8 experts) to
    a thousand (all 8)."""
    sm = StepModel(
        dense_weight_bytes=1e9,
        kv_bytes_per_token=1e5,
        flops_per_token=2e9,
        attention_flops_per_context_token=1e5,
        memory_bandwidth_bytes_per_s=1e12,
        compute_flops_per_s=1e15,
        moe_layers=32,
        experts=8,
        experts_per_token=2,
        expert_weight_bytes=1e8,
    )
    new = np.array([1.0, 2.0, 10.0, 1000.0])
    seconds = queueing.step_seconds(sm, new, np.zeros(4), np.zeros(4))
    for n, got in zip(new, seconds, strict=True):
        assert got == pytest.approx(sm.step_s(int(n), 0, 0), rel=1e-12)


def slo_target(slo: Slo, metric: str) -> float:
    return getattr(slo, f"{metric}_s")


@settings(max_examples=30, deadline=None)
@given(
    rho=st.floats(min_value=0.05, max_value=0.95),
    fraction=st.floats(min_value=0.2, max_value=1.5),
    metric=st.sampled_from(["ttft", "tpot", "e2e"]),
    long_tailed=st.booleans(),
    chunked=st.booleans(),
)
def test_screen_is_predict_or_a_proven_miss(rho: float, fraction: float, metric: str, long_tailed: bool, chunked: bool) -> None:
    """`screen` answers exactly what `predict` does: the same prediction, or a miss that `predict`
    confirms (its percentile above the target, and at least the bound the screen reports)."""
    workload = LONG_TAILED if long_tailed else CHAT
    serving = Serving(batch_limit=64, chunk_tokens=1024 if chunked else None)
    rep = queueing_replica._replica(LLAMA70B_4XH100, workload, serving, KV_TOKENS)
    at_rate = workload.at_rate(rho * rep.saturation_rps)
    full = queueing.predict(LLAMA70B_4XH100, at_rate, serving, kv_capacity_tokens=KV_TOKENS)
    if full.unstable:
        return
    predicted = getattr(full, metric).at_percentile_s
    slo = Slo(**{f"{metric}_s": predicted * fraction})
    answer = queueing.screen(LLAMA70B_4XH100, at_rate, serving, slo, kv_capacity_tokens=KV_TOKENS)
    if isinstance(answer, queueing.PercentileBounds):
        excess, bound_metric, bound = answer.excess(slo)
        assert bound_metric == metric and excess > 0
        assert slo_target(slo, metric) < bound <= predicted
        for other in ("ttft", "tpot", "e2e"):  # every bound is a bound
            value, other_bound = getattr(full, other), getattr(answer, f"{other}_s")
            assert other_bound is None or value is None or other_bound <= value.at_percentile_s
    else:
        assert answer == full


def test_screen_settles_clear_misses_on_the_first_slice() -> None:
    """A target at half the predicted p99 is missed by far more than 1 % of requests: the first
    eighth of the sample holds enough of them to prove it."""
    serving = Serving(batch_limit=64)
    rep = queueing_replica._replica(LLAMA70B_4XH100, CHAT, serving, KV_TOKENS)
    at_rate = CHAT.at_rate(0.6 * rep.saturation_rps)
    full = queueing.predict(LLAMA70B_4XH100, at_rate, serving, kv_capacity_tokens=KV_TOKENS)
    answer = queueing.screen(LLAMA70B_4XH100, at_rate, serving, Slo(tpot_s=full.tpot.p50_s), kv_capacity_tokens=KV_TOKENS)
    assert isinstance(answer, queueing.PercentileBounds) and answer.prove_missed(Slo(tpot_s=full.tpot.p50_s))


@pytest.mark.parametrize(("sm", "workload", "chunk"), SHAPES)
@pytest.mark.parametrize("rho", [0.3, 0.9])
@pytest.mark.parametrize("fraction", [0.5, 0.98, 1.02, 2.0])
def test_slo_excess_is_what_predict_gives(
    sm: StepModel, workload: Workload, chunk: int | None, rho: float, fraction: float
) -> None:
    """The lean check computes the very percentiles `predict` does for the SLO's metrics (bit for
    bit), and with screening answers either that or a proven miss bounded by them."""
    serving = Serving(batch_limit=64, chunk_tokens=chunk)
    rep = queueing_replica._replica(sm, workload, serving, KV_TOKENS)
    at_rate = workload.at_rate(rho * rep.saturation_rps)
    full = queueing.predict(sm, at_rate, serving, kv_capacity_tokens=KV_TOKENS, percentile=95.0)
    slo = Slo(ttft_s=full.ttft.at_percentile_s * fraction, e2e_s=full.e2e.at_percentile_s * 1.5, percentile=95.0)
    expected = max(
        (
            (full.ttft.at_percentile_s / slo.ttft_s - 1.0, "ttft", full.ttft.at_percentile_s),
            (full.e2e.at_percentile_s / slo.e2e_s - 1.0, "e2e", full.e2e.at_percentile_s),
        )
    )
    assert queueing.slo_excess(sm, at_rate, serving, slo, kv_capacity_tokens=KV_TOKENS) == expected
    excess, metric, value = queueing.slo_excess(sm, at_rate, serving, slo, kv_capacity_tokens=KV_TOKENS, screen_first=True)
    if (excess, metric, value) != expected:
        assert 0 < excess <= expected[0] and metric == "ttft" and value <= full.ttft.at_percentile_s
