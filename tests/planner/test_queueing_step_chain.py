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
