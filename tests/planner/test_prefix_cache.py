"""Prefix caching (planner/prefix_cache.py): the Che approximation against a direct LRU, routing, the cached step."""

from __future__ import annotations

import numpy as np
import pytest

from planner.errors import PlannerInputError
from planner.prefix_cache import BlockLru, PrefixReuse, cacheable_tokens, che_hit_probabilities, prefix_hits
from planner.step_model import StepModel

#: A round-number step model: 1e12 B/s, 1e15 FLOP/s, 1e9 B of weights, 1e5 B of KV per token,
#: 2e9 FLOPs per token, 1e6 attention FLOPs per context token, full overlap, no communication.
STEP = StepModel(
    dense_weight_bytes=1e9,
    kv_bytes_per_token=1e5,
    flops_per_token=2e9,
    attention_flops_per_context_token=1e6,
    memory_bandwidth_bytes_per_s=1e12,
    compute_flops_per_s=1e15,
)


def _lru_hit_rate(reuse: PrefixReuse, cache_tokens: int, requests: int, seed: int) -> float:
    """A direct LRU over the independent reference stream: the fraction of prefix-carrying requests that hit."""
    rng = np.random.default_rng(seed)
    popularity = reuse.popularity()
    cache = BlockLru(cache_tokens)
    size = cacheable_tokens(reuse.prefix_tokens)
    draws = rng.choice(popularity.size, size=requests, p=popularity)
    hits = [cache.access(int(k), size) > 0 for k in draws]
    warm = requests // 5
    return float(np.mean(hits[warm:]))


@pytest.mark.parametrize(("exponent", "cache_fraction"), [(0.8, 0.1), (1.0, 0.25), (1.2, 0.5)])
def test_che_approximation_matches_a_direct_lru(exponent, cache_fraction):
    """500 prefixes of 512 tokens, Zipf(s): Che's hit rate within 0.02 of an LRU fed 60,000 IRM references
    (Fricker et al. report errors of a few 1e-3 for Zipf popularity at these sizes)."""
    reuse = PrefixReuse(distinct_prefixes=500, prefix_tokens=512, prefix_fraction=1.0, zipf_exponent=exponent)
    cache = int(cache_fraction * reuse.working_set_tokens())
    che = prefix_hits(reuse, cache, "random", 1).hit_rate
    direct = _lru_hit_rate(reuse, cache, 60_000, seed=7)
    assert 0.05 < che < 0.95
    assert che == pytest.approx(direct, abs=0.02)


def test_che_hand_vector_two_items():
    """Two items of 1 token, p = (0.75, 0.25), cache 1 token: T solves (1 − e^{−0.75T}) + (1 − e^{−0.25T}) = 1.
    With x = e^{−0.25T}: x³ + x − 1 = 0 → x = 0.6823278; h = (1 − x³, 1 − x) = (0.6823278, 0.3176722),
    which sum to the cache's 1 token."""
    h = che_hit_probabilities(np.array([0.75, 0.25]), np.array([1.0, 1.0]), 1.0)
    assert h == pytest.approx([0.6823278, 0.3176722], abs=1e-6)
    assert che_hit_probabilities(np.array([0.5, 0.5]), np.array([1.0, 1.0]), 2.0) == pytest.approx([1.0, 1.0])
    assert che_hit_probabilities(np.array([0.5, 0.5]), np.array([1.0, 1.0]), 0.0) == pytest.approx([0.0, 0.0])


def test_random_routing_hit_rate_does_not_depend_on_replicas_and_prefix_aware_raises_it():
    """Random routing thins every stream equally: the hit rate at R = 4 is R = 1's. Prefix-aware routing
    gives each replica a quarter of the prefixes, so the same per-replica cache holds ~4× the share."""
    reuse = PrefixReuse(distinct_prefixes=400, prefix_tokens=1024, prefix_fraction=1.0, zipf_exponent=0.9)
    cache = reuse.working_set_tokens() // 8
    one = prefix_hits(reuse, cache, "random", 1).hit_rate
    assert prefix_hits(reuse, cache, "random", 4).hit_rate == pytest.approx(one)
    aware = prefix_hits(reuse, cache, "prefix_aware", 4).hit_rate
    assert aware > one + 0.1
    # the prefix-aware per-replica working set is the system prompt plus a quarter of the prefixes
    assert reuse.working_set_tokens("prefix_aware", 4) == 100 * 1024
    # a cache holding a quarter of all prefixes holds a prefix-aware replica's whole share: every reference hits
    assert prefix_hits(reuse, reuse.working_set_tokens() // 4, "prefix_aware", 4).hit_rate == pytest.approx(1.0)


def test_system_prompt_alone_fits_any_cache_of_its_size():
    """A 1,000-token system prompt on 60 % of requests: 992 cacheable tokens (62 blocks); a cache of 992
    tokens holds it, so 60 % × 992 = 595.2 tokens are cached per request."""
    reuse = PrefixReuse(system_prompt_tokens=1000, system_prompt_fraction=0.6)
    hits = prefix_hits(reuse, 992, "random", 3)
    assert hits.hit_rate == pytest.approx(1.0)
    assert hits.cached_tokens_per_request == pytest.approx(595.2)
    assert prefix_hits(reuse, 991, "random", 3).hit_rate == 0.0  # one token short of the prefix: nothing fits


def test_cached_prefill_step_vector():
    """Prompt 2,000 tokens, 1,024 cached: n = 976 new tokens.
    memory = (1e9 + 1,024·1e5)/1e12 = 1.1024 ms; compute = (976·2e9 + (976·1,024 + 976·977/2)·1e6)/1e15
    = (1.952e12 + (999,424 + 476,776)·1e6)/1e15 = (1.952e12 + 1.4762e12)/1e15 = 3.4282 ms; the step is the max.
    Uncached: compute = (2,000·2e9 + 2,000·2,001/2·1e6)/1e15 = (4e12 + 2.001e12)/1e15 = 6.001 ms."""
    assert STEP.cached_prefill_s(2000, 1024) == pytest.approx(3.4282e-3)
    assert STEP.cached_prefill_s(2000, 0) == pytest.approx(6.001e-3)
    assert STEP.cached_prefill_s(2000, 0) == pytest.approx(STEP.step_s(2000, 0, 2000 * 2001 / 2))


@pytest.mark.parametrize(
    "fields",
    [
        {"hit_rate": 1.0},
        {"hit_rate": 0.5, "system_prompt_tokens": 100, "system_prompt_fraction": 0.5},
        {},
        {"system_prompt_tokens": 100, "system_prompt_fraction": 0.0},
        {"system_prompt_tokens": 8, "system_prompt_fraction": 0.5},
        {"distinct_prefixes": 10, "prefix_tokens": 512, "prefix_fraction": 1.5},
        {"distinct_prefixes": 10, "prefix_tokens": 512, "prefix_fraction": 0.5, "zipf_exponent": -1.0},
    ],
)
def test_invalid_reuse_is_refused(fields):
    with pytest.raises(PlannerInputError):
        PrefixReuse(**fields)
