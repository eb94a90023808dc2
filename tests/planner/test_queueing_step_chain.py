"""The step an arrival finds as gated batch service (issue 14 §4): every prompt that arrives while a
step runs goes into the next step, so the number of prompts a step carries is the stationary law of
K' ~ Poisson(λ·T(K)) (planner/queueing_latency.py `gated_batch_stationary`)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import gammaln
from scipy.stats import poisson

from planner.queueing_latency import gated_batch_stationary

K = np.arange(60, dtype=float)
LOG_K_FACTORIAL = gammaln(K + 1.0)


def test_steps_of_one_length_carry_a_poisson_count() -> None:
    # T(k) = 50 ms whatever k: K' ~ Poisson(λ·T) = Poisson(20 × 0.05 = 1) independently of K
    pmf = gated_batch_stationary(np.full(K.size, 0.05), 20.0, K, LOG_K_FACTORIAL)
    assert pmf == pytest.approx(poisson.pmf(K, 1.0), abs=1e-12)


def test_longer_steps_for_more_prompts_overdisperse_the_count() -> None:
    """T(k) = a + b·k, a = 20 ms, b = 10 ms, λ = 40/s: E[K'] = λ(a + b·E[K]) gives the mean
    m = λa/(1 − λb) = 0.8/0.6 = 4/3; Var(K') = E[λT(K)] + (λb)²·Var(K) gives V = m/(1 − (λb)²) =
    (4/3)/0.84 = 1.587: more than the Poisson variance m."""
    pmf = gated_batch_stationary(0.02 + 0.01 * K, 40.0, K, LOG_K_FACTORIAL)
    mean = float(np.dot(pmf, K))
    variance = float(np.dot(pmf, (K - mean) ** 2))
    assert mean == pytest.approx(4.0 / 3.0, rel=1e-6)
    assert variance == pytest.approx((4.0 / 3.0) / 0.84, rel=1e-6)


def test_the_columns_are_averaged_as_a_mixture() -> None:
    # two equally likely durations per k (the prompt grid's points): K' ~ ½Poisson(λT₁) + ½Poisson(λT₂)
    durations = np.stack([np.full(K.size, 0.02), np.full(K.size, 0.06)], axis=1)
    pmf = gated_batch_stationary(durations, 50.0, K, LOG_K_FACTORIAL)
    assert pmf == pytest.approx(0.5 * poisson.pmf(K, 1.0) + 0.5 * poisson.pmf(K, 3.0), abs=1e-12)


def test_a_chain_past_the_dense_bound_keeps_its_mean_in_bounded_memory() -> None:
    """2,000 states (a replica admitting ~2,000 prompts a step) would be a 32 MB system built from a
    2,000 × points × 2,000 temporary (the hostile-numbers test OOM-killed a 24 GiB machine through it): past
    GATED_CHAIN_MAX_STATES the counts are Poisson at the fixed point m = λ·T(m), for T(k) = a + b·k the
    chain's own mean λa/(1 − λb): λ = 1000/s, a = 0.1 s, b = 0.0005 s give m = 100/(1 − 0.5) = 200, which
    the exact chain at the bound also has."""
    from planner.queueing_latency import GATED_CHAIN_MAX_STATES

    lam, a, b = 1000.0, 0.1, 0.0005
    for size in (GATED_CHAIN_MAX_STATES, 2_000):
        k = np.arange(size, dtype=float)
        pmf = gated_batch_stationary((a + b * k)[:, None], lam, k, gammaln(k + 1.0))
        assert pmf.sum() == pytest.approx(1.0)
        assert float(np.dot(k, pmf)) == pytest.approx(lam * a / (1.0 - lam * b), rel=1e-3)
