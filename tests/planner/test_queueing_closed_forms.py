"""Textbook queueing closed forms, worked by hand."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.closed_forms import (
    allen_cunneen_mean_wait_s,
    erlang_b,
    erlang_c,
    kingman_mean_wait_s,
    mg1_mean_wait_s,
    mm1_mean_wait_s,
    mm1_wait_exceedance,
    mm1_wait_quantile_s,
    mmc_mean_wait_s,
    mmc_wait_quantile_s,
)
from planner.errors import PlannerInputError, UnstableLoadError


@pytest.mark.parametrize(("rho", "multiple"), [(0.5, 1.0), (0.8, 4.0), (0.9, 9.0), (0.95, 19.0), (0.99, 99.0)])
def test_seed_003_table(rho: float, multiple: float) -> None:
    """Seed 003: W_q = S·ρ/(1−ρ) is 1, 4, 9, 19, 99 service times at ρ = .5, .8, .9, .95, .99."""
    service_s = 0.25
    assert mm1_mean_wait_s(rho / service_s, service_s) == pytest.approx(multiple * service_s, rel=1e-9)


def test_mm1_tail_and_quantile() -> None:
    """λ = 8/s, S = 0.1 s: ρ = 0.8, μ − λ = 2/s. P(W > 1 s) = 0.8·e^{−2}; p99 = ln(0.8/0.01)/2 = 2.191 s."""
    assert mm1_wait_exceedance(8.0, 0.1, 1.0) == pytest.approx(0.8 * math.exp(-2.0))
    assert mm1_wait_quantile_s(8.0, 0.1, 0.99) == pytest.approx(math.log(80.0) / 2.0)
    assert mm1_wait_exceedance(8.0, 0.1, mm1_wait_quantile_s(8.0, 0.1, 0.99)) == pytest.approx(0.01)
    # The median: P(W > 0) = ρ = 0.8 > 0.5, so the median wait is ln(0.8/0.5)/2.
    assert mm1_wait_quantile_s(8.0, 0.1, 0.5) == pytest.approx(math.log(1.6) / 2.0)
    # At ρ = 0.3 more than half the arrivals do not wait at all.
    assert mm1_wait_quantile_s(3.0, 0.1, 0.5) == 0.0


def test_erlang_c_known_values() -> None:
    """c = 2, a = 1 Erlang (ρ = 0.5): B = 1/5, C = 2·(1/5)/(2 − 1·(4/5)) = 1/3 — the textbook value.

    c = 1 reduces to M/M/1: C = ρ.
    """
    assert erlang_b(2, 1.0) == pytest.approx(0.2)
    assert erlang_c(2, 1.0) == pytest.approx(1.0 / 3.0)
    assert erlang_c(1, 0.7) == pytest.approx(0.7)
    # M/M/2 at λ = 1/s, S = 1 s: W_q = C/(cμ − λ) = (1/3)/(2 − 1) = 1/3 s.
    assert mmc_mean_wait_s(2, 1.0, 1.0) == pytest.approx(1.0 / 3.0)
    # p99 of that wait: ln((1/3)/0.01)/(2 − 1).
    assert mmc_wait_quantile_s(2, 1.0, 1.0, 0.99) == pytest.approx(math.log(100.0 / 3.0))


def test_mmc_with_one_server_is_mm1() -> None:
    assert mmc_mean_wait_s(1, 6.0, 0.1) == pytest.approx(mm1_mean_wait_s(6.0, 0.1))
    assert mmc_wait_quantile_s(1, 6.0, 0.1, 0.99) == pytest.approx(mm1_wait_quantile_s(6.0, 0.1, 0.99))


def test_pollaczek_khinchine() -> None:
    """Exponential service (E[S²] = 2S²) gives M/M/1; deterministic (E[S²] = S²) halves it."""
    assert mg1_mean_wait_s(8.0, 0.1, 2 * 0.01) == pytest.approx(mm1_mean_wait_s(8.0, 0.1))
    assert mg1_mean_wait_s(8.0, 0.1, 0.01) == pytest.approx(mm1_mean_wait_s(8.0, 0.1) / 2.0)


def test_kingman_and_allen_cunneen_reduce_to_exact_cases() -> None:
    assert kingman_mean_wait_s(8.0, 0.1, 1.0, 1.0) == pytest.approx(mm1_mean_wait_s(8.0, 0.1))
    assert kingman_mean_wait_s(8.0, 0.1, 1.0, 0.0) == pytest.approx(mg1_mean_wait_s(8.0, 0.1, 0.01))
    assert allen_cunneen_mean_wait_s(3, 2.0, 1.0, 1.0, 1.0) == pytest.approx(mmc_mean_wait_s(3, 2.0, 1.0))
    # Smoother arrivals (c_a = 0.5) and deterministic service wait (0.25 + 0)/2 of M/M/c.
    assert allen_cunneen_mean_wait_s(3, 2.0, 1.0, 0.5, 0.0) == pytest.approx(mmc_mean_wait_s(3, 2.0, 1.0) * 0.125)


@pytest.mark.parametrize(
    "call",
    [
        lambda: mm1_mean_wait_s(10.0, 0.1),
        lambda: mm1_wait_quantile_s(11.0, 0.1, 0.99),
        lambda: erlang_c(2, 2.0),
        lambda: mmc_mean_wait_s(4, 5.0, 1.0),
        lambda: mg1_mean_wait_s(10.0, 0.1, 0.02),
        lambda: kingman_mean_wait_s(12.0, 0.1, 1.0, 1.0),
    ],
)
def test_unstable_load_raises(call) -> None:
    with pytest.raises(UnstableLoadError):
        call()


def test_invalid_input_raises() -> None:
    with pytest.raises(PlannerInputError):
        mm1_mean_wait_s(-1.0, 0.1)
    with pytest.raises(PlannerInputError):
        mm1_mean_wait_s(1.0, 0.0)
    with pytest.raises(PlannerInputError):
        mm1_wait_quantile_s(1.0, 0.1, 1.0)
    with pytest.raises(PlannerInputError):
        mg1_mean_wait_s(1.0, 0.1, 0.001)  # E[S²] < E[S]²


@settings(max_examples=60, deadline=None)
@given(
    servers=st.integers(min_value=1, max_value=64),
    rho_low=st.floats(min_value=0.01, max_value=0.97),
    step=st.floats(min_value=0.001, max_value=0.02),
)
def test_waiting_never_falls_as_load_rises(servers: int, rho_low: float, step: float) -> None:
    rho_high = min(rho_low + step, 0.99)
    low = mmc_mean_wait_s(servers, rho_low * servers, 1.0)
    high = mmc_mean_wait_s(servers, rho_high * servers, 1.0)
    assert high >= low
    assert erlang_c(servers, rho_high * servers) >= erlang_c(servers, rho_low * servers)
