"""The class simulator against planner/queueing_priority.py's closed forms (seeded, long runs)."""

from __future__ import annotations

import pytest

from planner.queueing_priority import ClassLoad, priority_waits, shed_probabilities
from planner.simulator_classes import simulate_classes


def test_priority_waits_match_cobham_on_eight_slots() -> None:
    """c = 8, s = 1 s exponential, chat λ = 4, batch λ = 2.4 (ρ = 0.8). Cobham: P_w = C(8, 6.4),
    W_chat = P_w/8/(1 − 0.5), W_batch = P_w/8/(0.5·0.2). 100,000 s of traffic (640 k requests):
    the simulated means lie within 5 % of the model's. The batch p99 is within the reliable region's
    30 % (docs/traffic-classes.md); measured 5.33 s against the exponential tail's 4.78 s (seed 1,
    200,000 s): a low class's wait is a busy period of the classes above it, heavier-tailed than
    an exponential, so the model is optimistic there."""
    chat = ClassLoad(name="chat", arrival_rate_rps=4.0, service_s=1.0, priority=0)
    batch = ClassLoad(name="batch", arrival_rate_rps=2.4, service_s=1.0, priority=1)
    model = priority_waits([chat, batch], slots=8)
    sim = simulate_classes([chat, batch], slots=8, duration_s=100_000.0, seed=1)
    for m, s in zip(model, sim, strict=True):
        assert s.mean_wait_s == pytest.approx(m.mean_wait_s, rel=0.05)
        assert s.wait_probability == pytest.approx(m.wait_probability, rel=0.05)
    assert sim[1].p99_wait_s == pytest.approx(model[1].wait_at_percentile_s(99.0), rel=0.30)
    assert sim[1].p99_wait_s > model[1].wait_at_percentile_s(99.0)  # the known direction of the error
    assert sim[0].mean_wait_s < sim[1].mean_wait_s / 4  # priority actually reorders the queue


def test_shedding_matches_the_birth_death_chain() -> None:
    """c = 4, s = 1 s, chat λ = 2 unlimited, batch λ = 2 admitted while fewer than 4 are in the
    replica (only into a free slot): the chain's refusal probability for batch, simulated within 3 %."""
    chat = ClassLoad(name="chat", arrival_rate_rps=2.0, service_s=1.0, priority=0)
    batch = ClassLoad(name="batch", arrival_rate_rps=2.0, service_s=1.0, priority=1, admission_limit=4)
    model = shed_probabilities([chat, batch], slots=4)
    sim = simulate_classes([chat, batch], slots=4, duration_s=100_000.0, seed=2)
    assert sim[0].shed_fraction == 0.0
    assert sim[1].shed_fraction == pytest.approx(model[1].shed_probability, rel=0.03)
