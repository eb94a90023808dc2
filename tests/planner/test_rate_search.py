"""Narrowing μ between a met and a missed rate (planner/rate_search.py): it always ends within the
tolerance below μ, from below, whatever the shape of the slack; regula falsi takes fewer probes
than bisection on latency-like curves; the Illinois rule keeps a stuck end from making it creep."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from planner.rate_search import MU_RELATIVE_TOLERANCE, Bracket, slack


def _narrow(mu: float, saturation: float, latency, target: float) -> tuple[Bracket, int]:
    """Run the search on a latency curve with one crossing at μ; returns the bracket and the probes made."""
    bracket = Bracket(met_rps=saturation * 1e-6, missed_rps=saturation)
    bracket.record(saturation * 1e-6, latency(saturation * 1e-6) / target - 1.0)
    probes = 0
    while not bracket.narrow_enough():
        rate = bracket.next_probe()
        assert bracket.met_rps < rate < bracket.missed_rps
        bracket.record(rate, latency(rate) / target - 1.0)
        probes += 1
        assert probes < 200
    return bracket, probes


def _queue_like(saturation: float, base: float):
    """Latency like an M/M/1 sojourn, base/(1 − ρ): convex, unbounded at saturation."""
    return lambda rate: base / (1.0 - rate / saturation) if rate < saturation else math.inf


@settings(max_examples=60, deadline=None)
@given(rho_at_slo=st.floats(min_value=0.05, max_value=0.995), base=st.floats(min_value=1e-3, max_value=10.0))
def test_mu_ends_within_the_tolerance_below_the_true_mu(rho_at_slo: float, base: float) -> None:
    saturation = 10.0
    latency = _queue_like(saturation, base)
    target = latency(rho_at_slo * saturation)  # the SLO is met exactly up to μ = ρ·saturation
    bracket, _ = _narrow(rho_at_slo * saturation, saturation, latency, target)
    mu = rho_at_slo * saturation
    assert bracket.met_rps <= mu * (1 + 1e-12)
    assert bracket.met_rps >= mu * (1 - MU_RELATIVE_TOLERANCE) * (1 - 1e-12)


@pytest.mark.parametrize("rho_at_slo", [0.3, 0.6, 0.8, 0.9, 0.97])
def test_regula_falsi_takes_fewer_probes_than_bisection(rho_at_slo: float) -> None:
    """Bisection from (0, saturation) to 1 % needs ⌈log2(1/0.01ρ)⌉ ≈ 7–9 probes; the slack of a
    1/(1 − ρ) latency is nearly linear near μ, so the chord lands next to it."""
    saturation = 10.0
    latency = _queue_like(saturation, 0.2)
    _, probes = _narrow(rho_at_slo * saturation, saturation, latency, latency(rho_at_slo * saturation))
    bisection = math.ceil(math.log2(1.0 / (MU_RELATIVE_TOLERANCE * rho_at_slo)))
    assert probes <= 4 < bisection


def test_a_stuck_end_does_not_make_the_search_creep() -> None:
    """A slack that is flat and then drops off a cliff (a TPOT-like metric that holds until the batch
    fills, here at 99.5 % of saturation) makes plain regula falsi keep moving the met end by a
    fraction of the width (10 probes here); the Illinois rule halves the stuck end's weight each
    time, so it needs no more probes than bisection would."""
    saturation = 10.0
    mu = 9.95

    def latency(rate: float) -> float:
        return 1.0 if rate <= mu else 100.0

    _, probes = _narrow(mu, saturation, latency, 1.5)
    assert probes <= math.ceil(math.log2(1.0 / MU_RELATIVE_TOLERANCE))


def test_without_both_slacks_the_probe_is_the_midpoint() -> None:
    bracket = Bracket(met_rps=2.0, missed_rps=6.0, met_slack=None)
    assert bracket.next_probe() == 4.0


def test_slack_is_target_over_predicted_minus_one() -> None:
    assert slack(0.25) == pytest.approx(1 / 1.25 - 1)  # predicted 25 % above target
    assert slack(-0.5) == pytest.approx(1.0)  # predicted half the target
    assert slack(math.inf) == -1.0  # unstable: unbounded latency
