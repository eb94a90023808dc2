"""The reliable flag on the plans the planner makes (issue 14 §4): where `predict` says reliable, its
p99s are within 10 % of the simulator's on the same deployment; and the prefill-cluster dispersion
against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from bench import plan_corpus
from planner.queueing import _burstiness
from planner.queueing_kernels import occupancy_dispersion, prefill_cluster_dispersion
from planner.queueing_replica import life_overlap

#: Corpus questions whose plans the committed run (docs/queueing-fidelity.md) found flagged reliable
#: (#4, #32, #50) and three it did not (#13, #24, #53: ρ 0.36–0.79, chunked and not): a bounded sample
#: (six plans and 8,000-request simulations, ~20 s on two cores).
SAMPLE = (4, 32, 50, 13, 24, 53)


@pytest.fixture(scope="module")
def points() -> list[plan_corpus.CorpusPoint]:
    return plan_corpus.run(tuple(plan_corpus.CORPUS[i] for i in SAMPLE), requests=8_000)


def test_the_corpus_is_at_least_fifty_varied_questions() -> None:
    corpus = plan_corpus.CORPUS
    assert len(corpus) >= 50
    assert len({q["model"] for q in corpus}) >= 8
    assert sum("pin" in q["constraints"] for q in corpus) >= 10  # chunking pinned off
    assert any(isinstance(q["workload"]["prompt_tokens"], dict) and "tokens" in q["workload"]["prompt_tokens"] for q in corpus)


def test_reliable_means_within_ten_percent_of_the_simulator(points: list[plan_corpus.CorpusPoint]) -> None:
    assert len(points) == len(SAMPLE)
    reliable = [p for p in points if p.reliable]
    assert reliable, "the sample was chosen to hold plans flagged reliable"
    for p in reliable:
        assert p.within, f"{p.label}: flagged reliable but a p99 is {p.worst:.1%} off the simulator"


def test_prefill_cluster_dispersion_hand_vectors() -> None:
    # (1 + θ²·cv²)/(1 − θ)²
    assert prefill_cluster_dispersion(0.0, 3.0) == pytest.approx(1.0)
    assert prefill_cluster_dispersion(0.5, 0.0) == pytest.approx(4.0)  # equal stalls: the linearised 1/(1−θ)²
    assert prefill_cluster_dispersion(0.5, 1.0) == pytest.approx(1.25 / 0.25)  # = 5
    assert prefill_cluster_dispersion(0.2, 2.0) == pytest.approx(1.08 / 0.64)  # = 1.6875


def test_occupancy_dispersion_hand_vectors() -> None:
    # 1 + ((1 + θ_pf²·cv²)/(1 − θ_pf)² / (1 − θ_b)² − 1)·overlap
    assert occupancy_dispersion(0.0, 0.0, 1.0, 0.6) == pytest.approx(1.0)
    assert occupancy_dispersion(0.5, 0.0, 0.0, 1.0) == pytest.approx(4.0)
    assert occupancy_dispersion(0.5, 0.5, 0.0, 1.0) == pytest.approx(16.0)
    assert occupancy_dispersion(0.5, 0.5, 0.0, 0.5) == pytest.approx(8.5)  # 1 + 15·0.5


def test_life_overlap_hand_vectors() -> None:
    assert life_overlap(np.array([5.0, 5.0, 5.0])) == pytest.approx(1.0)  # fixed lives overlap wholly
    # lives 1 and 3: E[min] over the four ordered pairs = (1 + 1 + 1 + 3)/4 = 1.5, E[L] = 2
    assert life_overlap(np.array([3.0, 1.0])) == pytest.approx(0.75)
    # exponential lives: E[min] = E[L]/2 (a large sample of its quantiles)
    u = (np.arange(20_000) + 0.5) / 20_000
    assert life_overlap(-np.log1p(-u)) == pytest.approx(0.5, rel=2e-3)


@pytest.mark.parametrize("theta_pf", [0.0, 0.1, 0.3, 0.6])
@pytest.mark.parametrize("theta_b", [0.0, 0.2, 0.5])
@pytest.mark.parametrize("cv2", [0.0, 0.64, 2.7])
def test_the_reliable_bound_is_at_least_the_dispersion_the_region_was_validated_with(
    theta_pf: float, theta_b: float, cv2: float
) -> None:
    # the region was read off the grid with D = 1/((1 − θ_b)(1 − θ_pf)²); the quantity it now bounds
    # must not be smaller anywhere, or the region would grow beyond what was validated
    validated = 1.0 / ((1.0 - theta_b) * (1.0 - theta_pf) ** 2)
    assert _burstiness(theta_pf, theta_b, cv2) >= validated - 1e-12
    assert _burstiness(0.5, 0.5, 1.0) == pytest.approx(1.25 / 0.25 / 0.25)  # (1 + θ²cv²)/(1 − θ_pf)²/(1 − θ_b)² = 20
