"""The reliable flag on the plans the planner makes (issue 14 §4): where `predict` says reliable, its
p99s are within 10 % of the simulator's on the same deployment; the region's bounds (split prompts,
long-tailed prompt mixes); and the prefill-cluster dispersion against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest

from bench import plan_corpus
from planner import queueing
from planner.queueing_kernels import occupancy_dispersion, prefill_cluster_dispersion
from planner.queueing_replica import _replica, life_overlap
from planner.step_model import StepModel
from planner.workload import FixedLength, HistogramLength, Serving, Workload

#: Corpus questions whose plans the committed run (docs/queueing-fidelity.md) found flagged reliable
#: (#4, #12, #42, #53: ρ 0.06–0.57, chunked and not) and two it did not (#8: a 2,048-token budget
#: splitting most prompts, #23: prompt cv² 2.7): a bounded sample (six plans, 8,000-request simulations).
SAMPLE = (4, 12, 42, 53, 8, 23)


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


#: A small made-up replica (test figures): 1 GB of weights, 100 kB of KV per token, 2 GFLOP per token.
_SMALL = StepModel(
    dense_weight_bytes=1e9,
    kv_bytes_per_token=1e5,
    flops_per_token=2e9,
    attention_flops_per_context_token=1e5,
    memory_bandwidth_bytes_per_s=1e12,
    compute_flops_per_s=1e14,
)


def _flag(prompt: FixedLength | HistogramLength, chunk: int | None) -> queueing.Prediction:
    workload = Workload(arrival_rate_rps=1.0, prompt_tokens=prompt, output_tokens=FixedLength(tokens=100))
    serving = Serving(batch_limit=16, chunk_tokens=chunk)
    rate = 0.3 * queueing.saturation_rps(_SMALL, workload, serving, kv_capacity_tokens=1e6)
    return queueing.predict(_SMALL, workload.at_rate(rate), serving, kv_capacity_tokens=1e6)


def test_split_prompts_are_outside_the_reliable_region() -> None:
    # 1,000-token prompts: a 4,096-token budget holds each in one step (16 decodes at most take 16 of
    # it), a 512-token one splits every prompt
    assert _flag(FixedLength(tokens=1000), 4096).reliable
    split = _flag(FixedLength(tokens=1000), 512)
    assert not split.reliable and split.fidelity_note is not None and "split" in split.fidelity_note


def test_the_split_fraction_counts_the_prompts_beyond_the_budget() -> None:
    # half the prompts are 2,000 tokens: beyond a 1,024-token budget less the running decodes
    histogram = HistogramLength(tokens=(100, 2000), weights=(0.5, 0.5))
    workload = Workload(arrival_rate_rps=1.0, prompt_tokens=histogram, output_tokens=FixedLength(tokens=100))
    rep = _replica(_SMALL, workload, Serving(batch_limit=16, chunk_tokens=1024), 1e6)
    assert queueing._split_fraction(rep, 8.0) == pytest.approx(0.5, abs=0.01)
    unchunked = _replica(_SMALL, workload, Serving(batch_limit=16), 1e6)
    assert queueing._split_fraction(unchunked, 8.0) == 0.0


def test_long_tailed_prompt_mixes_are_outside_the_reliable_region() -> None:
    # the corpus's agent mix: cv² = E[p²]/E[p]² − 1 = 7.63e6/1434² − 1 ≈ 2.71 > 1.5
    agent = HistogramLength(tokens=(128, 512, 2048, 8192), weights=(0.4, 0.3, 0.2, 0.1))
    p = _flag(agent, None)
    assert not p.reliable and p.fidelity_note is not None and "cv²" in p.fidelity_note
    assert _flag(FixedLength(tokens=1000), None).reliable
