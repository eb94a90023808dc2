"""Worked arithmetic for planner/queueing_priority.py: Erlang C, Cobham's priority waits, per-class shedding."""

from __future__ import annotations

import math

import pytest

from planner.errors import PlannerInputError, UnstableLoadError
from planner.queueing_priority import ClassLoad, erlang_c, priority_waits, shed_probabilities


def test_erlang_c_matches_the_m_m_1_and_m_m_2_closed_forms() -> None:
    """M/M/1: P_w = ρ = 0.5. M/M/2 at a = 1 (ρ = 0.5): P_w = 2ρ²/(1 + ρ) = 0.5/1.5 = 1/3
    (Erlang B: B_1 = 1/2, B_2 = 0.5/2.5 = 0.2; C = 0.2/(1 − 0.5·0.8) = 1/3)."""
    assert erlang_c(1, 0.5) == pytest.approx(0.5)
    assert erlang_c(2, 1.0) == pytest.approx(1.0 / 3.0)
    with pytest.raises(UnstableLoadError):
        erlang_c(2, 2.0)


def test_cobham_two_classes_on_one_slot_and_work_conservation() -> None:
    """M/M/1, s = 1 s, λ_hi = 0.3, λ_lo = 0.4: P_w = ρ = 0.7, W0 = P_w·s̄/c = 0.7 s.
    W_hi = 0.7/(1·(1 − 0.3)) = 1.0 s; W_lo = 0.7/((1 − 0.3)(1 − 0.7)) = 3.333 s.
    Conservation: (0.3·1.0 + 0.4·3.333)/0.7 = 2.333 s = FCFS M/M/1's ρ·s/(1 − ρ) = 0.7/0.3."""
    hi = ClassLoad(name="chat", arrival_rate_rps=0.3, service_s=1.0, priority=0)
    lo = ClassLoad(name="batch", arrival_rate_rps=0.4, service_s=1.0, priority=1)
    w_hi, w_lo = priority_waits([hi, lo], slots=1)
    assert w_hi.mean_wait_s == pytest.approx(1.0)
    assert w_lo.mean_wait_s == pytest.approx(0.7 / (0.7 * 0.3))
    fcfs = priority_waits([ClassLoad(name="all", arrival_rate_rps=0.7, service_s=1.0, priority=0)], slots=1)[0]
    assert (0.3 * w_hi.mean_wait_s + 0.4 * w_lo.mean_wait_s) / 0.7 == pytest.approx(fcfs.mean_wait_s)
    assert fcfs.mean_wait_s == pytest.approx(0.7 / 0.3)


def test_one_class_is_erlang_c_wait_with_exact_exponential_tail() -> None:
    """M/M/2, s = 2 s, λ = 0.5 → a = 1, P_w = 1/3, W = P_w·(s/c)/(1 − ρ) = (1/3)·1/0.5 = 2/3 s.
    Conditional mean W/P_w = 2 s (= 1/(cμ − λ) = 1/(1 − 0.5)); p99 = 2·ln((1/3)/0.01) = 7.013 s."""
    (w,) = priority_waits([ClassLoad(name="a", arrival_rate_rps=0.5, service_s=2.0, priority=0)], slots=2)
    assert w.mean_wait_s == pytest.approx(2.0 / 3.0)
    assert w.wait_at_percentile_s(99.0) == pytest.approx(2.0 * math.log((1.0 / 3.0) / 0.01))
    assert w.wait_at_percentile_s(50.0) == 0.0  # P_w = 1/3 < 0.5: the median arrival does not wait


def test_high_priority_wait_barely_moves_as_low_priority_load_grows() -> None:
    """The seed's claim in one line: adding batch load raises the high class's wait only through
    P_w·s̄/c (the residual of a busy slot), not through 1/(1 − ρ_total): at c = 8, s = 1,
    λ_hi = 4 (σ_hi = 0.5), growing λ_lo from 0 to 3.6 (ρ 0.5 → 0.95) multiplies W_hi by P_w's
    growth alone, while W_lo grows with 1/(1 − ρ)."""
    hi = ClassLoad(name="chat", arrival_rate_rps=4.0, service_s=1.0, priority=0)
    alone = priority_waits([hi], slots=8)[0]
    mixed = priority_waits([hi, ClassLoad(name="batch", arrival_rate_rps=3.6, service_s=1.0, priority=1)], slots=8)
    p_alone, p_mixed = erlang_c(8, 4.0), erlang_c(8, 7.6)
    assert mixed[0].mean_wait_s / alone.mean_wait_s == pytest.approx(p_mixed / p_alone)
    assert mixed[1].mean_wait_s == pytest.approx(p_mixed * (1 / 8) / (0.5 * 0.05))


def test_shedding_single_class_is_m_m_1_k_loss() -> None:
    """M/M/1/2 at λ = μ = 1: π_0 = π_1 = π_2 = 1/3, loss = π_2 = 1/3."""
    (r,) = shed_probabilities([ClassLoad(name="a", arrival_rate_rps=1.0, service_s=1.0, priority=0, admission_limit=2)], slots=1)
    assert r.shed_probability == pytest.approx(1.0 / 3.0)


def test_shedding_lowest_class_with_unlimited_high_class() -> None:
    """M/M/1, s = 1: chat λ = 0.2 unlimited, batch λ = 0.3 admitted only into an empty replica (K = 1).
    π_0 ∝ 1, π_1 = 0.5·1/1 = 0.5, states ≥ 2 geometric at 0.2: 0.5·0.2/0.8 = 0.125; total 1.625.
    Batch refused with P(N ≥ 1) = 0.625/1.625 = 0.3846; chat never."""
    chat = ClassLoad(name="chat", arrival_rate_rps=0.2, service_s=1.0, priority=0)
    batch = ClassLoad(name="batch", arrival_rate_rps=0.3, service_s=1.0, priority=1, admission_limit=1)
    r_chat, r_batch = shed_probabilities([chat, batch], slots=1)
    assert r_chat.shed_probability == 0.0
    assert r_batch.shed_probability == pytest.approx(0.625 / 1.625)


def test_shedding_two_slots_with_the_tail_below_c() -> None:
    """c = 2, s = 1: chat λ = 1 unlimited, batch λ = 1 with K = 1.
    π_0 = 1, π_1 = 2·1/1 = 2 (both classes arrive into an empty replica); above: chat only,
    π_2 = 2·1/2 = 1, then geometric at 1/2: 1·0.5/0.5 = 1. Total 5; batch refused 4/5."""
    chat = ClassLoad(name="chat", arrival_rate_rps=1.0, service_s=1.0, priority=0)
    batch = ClassLoad(name="batch", arrival_rate_rps=1.0, service_s=1.0, priority=1, admission_limit=1)
    assert shed_probabilities([chat, batch], slots=2)[1].shed_probability == pytest.approx(4.0 / 5.0)


def test_bad_inputs_are_typed_errors() -> None:
    with pytest.raises(PlannerInputError):
        ClassLoad(name="x", arrival_rate_rps=-1.0, service_s=1.0, priority=0)
    with pytest.raises(PlannerInputError):
        priority_waits([], slots=1)
    with pytest.raises(UnstableLoadError):
        shed_probabilities([ClassLoad(name="x", arrival_rate_rps=2.0, service_s=1.0, priority=0)], slots=1)


def test_overdispersed_shedding_keeps_the_negative_binomial_below_the_limit() -> None:
    """One class, λ = 6, s = 1 (a = 6 Erlangs), c = 16, K = 10, occupancy dispersion D = 2.5: below K
    every arrival is admitted, so the chain's occupancy is the negative binomial NB(r, q) with
    q = 1 − 1/D and r = a/(D − 1), cut at K; the refusal is its mass at K over its mass on 0…K
    (by hand from the pmf). D = 1 is the M/M/c chain, and more spread refuses more."""
    from math import exp, lgamma, log

    a, d, limit = 6.0, 2.5, 10
    q, r = 1.0 - 1.0 / d, a / (d - 1.0)
    pmf = [exp(lgamma(n + r) - lgamma(n + 1) - lgamma(r) + r * log(1 - q) + n * log(q)) for n in range(limit + 1)]
    load = ClassLoad(name="x", arrival_rate_rps=6.0, service_s=1.0, priority=0, admission_limit=limit)
    (spread,) = shed_probabilities([load], slots=16, dispersion=d)
    assert spread.shed_probability == pytest.approx(pmf[limit] / sum(pmf), rel=1e-9)
    (poisson,) = shed_probabilities([load], slots=16)
    assert shed_probabilities([load], slots=16, dispersion=1.0 + 1e-9)[0].shed_probability == pytest.approx(
        poisson.shed_probability, rel=1e-6
    )
    assert spread.shed_probability > poisson.shed_probability
    with pytest.raises(PlannerInputError):
        shed_probabilities([load], slots=16, dispersion=0.5)
