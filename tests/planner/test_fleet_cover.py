"""The cover cuts of the fleet MILP: `cheapest_cover` is the true integer minimum (brute force),
so the cut Σ a_c·r_c ≥ V never removes a feasible fleet; and the cut fleet is feasible."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from planner.fleet import cheapest_cover, cover_cost_lower_bound


def brute_force_cover(items: list[tuple[float, float]], demand_rps: float) -> float:
    ranges = [range(math.ceil(demand_rps / mu) + 1) for _, mu in items]
    return min(
        sum(n * a for n, (a, _) in zip(counts, items, strict=True))
        for counts in itertools.product(*ranges)
        if sum(n * mu for n, (_, mu) in zip(counts, items, strict=True)) >= demand_rps
    )


@pytest.mark.parametrize("seed", range(40))
def test_cheapest_cover_is_the_integer_minimum(seed: int) -> None:
    rng = random.Random(seed)
    items = [(rng.choice([1, 2, 4, 8]) * rng.uniform(0.5, 7.0), rng.uniform(0.2, 20.0)) for _ in range(rng.randint(1, 4))]
    demand = rng.uniform(0.0, 30.0)
    cost, counts, finished = cheapest_cover(items, demand)
    assert finished
    assert sum(n * mu for n, (_, mu) in zip(counts, items, strict=True)) >= demand * (1 - 1e-9)
    assert cost == pytest.approx(sum(n * a for n, (a, _) in zip(counts, items, strict=True)))
    assert cost == pytest.approx(brute_force_cover(items, demand))


def test_cover_bound_counts_min_replicas_and_rounds_up() -> None:
    # 0.6 req/s on replicas of 0.53 req/s at $1: the LP pays $1.13, any whole fleet $2.
    assert cover_cost_lower_bound([(1.0, 0.53), (2.0, 1.6)], 0.6, 1) == pytest.approx(2.0)
    assert cover_cost_lower_bound([(1.0, 0.53)], 0.0, 3) == pytest.approx(3.0)


def test_cover_bound_gives_up_past_its_node_limit() -> None:
    items = [(1.0 + i / 100, 1.0 + i / 97) for i in range(12)]
    assert cover_cost_lower_bound(items, 200.0, 1, node_limit=10) is None
