"""A speculating winner that ties with a plain configuration: `auto` searches the plain options once
more (planner/plan_search.py `_plain_on_a_tie`), and options the first search had already priced must
not reach the MILP twice. This request (long prompts, short answers, verify on) once answered 422
"candidate ids must be unique" with the fp8 tp2 options listed twice."""

from __future__ import annotations

from typing import Any

import pytest

from tests.api.client import ApiClient

pytestmark = pytest.mark.slow

LONG_PROMPTS: dict[str, Any] = {
    "model": "llama-3.1-8b",
    "workload": {
        "arrival_rate_rps": 40,
        "prompt_tokens": {"mean": 4000, "p99": 10000},
        "output_tokens": {"mean": 80, "p99": 320},
    },
    "slo": {"ttft_ms": 1000, "tpot_ms": 60},
    "constraints": {"gpus": ["h100-sxm"], "speculative": "auto"},
    "verify": True,
}


def test_a_tie_search_prices_each_option_once(seeded: ApiClient, admin: dict[str, str]) -> None:
    response = seeded.post("/v1/plans", json=LONG_PROMPTS, headers=admin)
    assert response.status_code == 201, response.text
    plan = response.json()
    off = seeded.post(
        "/v1/plans", json={**LONG_PROMPTS, "constraints": {"gpus": ["h100-sxm"], "speculative": "off"}}, headers=admin
    )
    assert off.status_code == 201, off.text
    # auto may only buy speculation for what it saves: never more than the plan without it
    assert plan["cost"]["usd_per_hour"] <= off.json()["cost"]["usd_per_hour"] + 1e-9
