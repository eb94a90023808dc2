"""Three corners of the regime map (docs/disaggregation.md, bench/topology_regimes.py) through POST /v1/plans.

The published result (DistServe, Zhong et al., OSDI 2024; TaiChi, "Prefill-Decode Aggregation or
Disaggregation? Unifying Both for Goodput-Optimized LLM Serving", 2025): aggregation wins when TTFT
is tight and TPOT relaxed, disaggregation when TPOT is strict and TTFT relaxed. Llama-3.1-8B at
20 req/s, prompts mean 3,000 (p99 8,000), outputs 250 (1,000), constraints.topology any.
"""

from __future__ import annotations

import pytest

from bench.topology_regimes import body
from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS


@pytest.mark.parametrize(
    ("ttft_ms", "tpot_ms", "winner"),
    [
        (300, 100, "aggregated"),  # tight TTFT, relaxed TPOT: one pool, no transfer, no split budget
        (10000, 15, "disaggregated"),  # strict TPOT, relaxed TTFT: decode batches free of prefills
        (10000, 100, "aggregated"),  # both relaxed: one pool's batches carry prefills cheaply
    ],
)
def test_the_regime_corners(seeded: ApiClient, ttft_ms: int, tpot_ms: int, winner: str) -> None:
    answer = seeded.post("/v1/plans", json=body("llama-3.1-8b", 20.0, ttft_ms, tpot_ms), headers=ADMIN_HEADERS)
    assert answer.status_code == 200, answer.text  # a dry run
    section = answer.json()["disaggregation"]
    assert section["chosen"] == winner
    # both topologies weighed, a choice and not a default: the other's cost, or the lower bound that already loses
    other = section["alternative"]
    assert other["cost_usd_per_hour"] is not None or ("not searched" in other["reason"] and "at least" in section["why"])
