"""The plan explorer on a disaggregated plan, in a real browser (the harness of tests/browser/test_explorer.py):
opening a stored plan with separate prefill and decode pools shows its pools table and its pools chart in place
of the four one-queue charts, with no failed request or console error, and the deployment's history names the pools."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page

from tests.api.conftest import ADMIN_KEY, ServedHeadroom, serve_headroom
from tests.api.test_plan_pools import rag
from tests.browser.harness import Watched
from tests.browser.test_explorer import CHARTS, PLAN_TIMEOUT_MS, _chart_series, _open, _value

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedHeadroom]:
    with serve_headroom(tmp_path_factory.mktemp("explorer-pools")) as running:
        yield running


def test_a_disaggregated_plan_shows_its_pools_table_and_chart(page: tuple[Page, Watched], served: ServedHeadroom) -> None:
    browser_page, _ = page
    answer = httpx.post(
        f"{served.base_url}/v1/plans",
        json={**rag("disaggregated"), "name": "rag-pools"},
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        timeout=PLAN_TIMEOUT_MS / 1000,
    )
    assert answer.status_code == 201, answer.text
    plan: dict[str, Any] = answer.json()
    _open(browser_page, served)
    browser_page.wait_for_selector("#plans-table")
    browser_page.locator(f"#plans-table tbody tr[data-plan-id='{plan['id']}'] button").click()
    browser_page.wait_for_selector("#answer-pools")
    rows = browser_page.locator("#answer-pools tbody tr")
    assert [rows.nth(i).get_attribute("data-role") for i in range(rows.count())] == ["prefill", "decode"]
    for i, pool in enumerate(plan["plan"]["pools"]):
        cells = rows.nth(i).locator("td")
        assert cells.nth(0).inner_text() == pool["gpu"] and cells.nth(2).inner_text() == str(pool["replicas"])
    assert "prefill" in browser_page.inner_text("#answer-summary") and "decode" in browser_page.inner_text("#answer-summary")
    assert float(_value(browser_page, "#answer-ttft")) == plan["disaggregation"]["predicted_ttft_ms"]
    prefill, decode = plan["plan"]["pools"]
    assert browser_page.inner_text("#answer-replicas") == (
        f"prefill {prefill['replicas']} × {prefill['tp']}, decode {decode['replicas']} × {decode['tp']}"
    )
    assert "separate prefill and decode pools" in browser_page.inner_text("#status")
    # the pools chart loads in place of the one-queue charts (which a disaggregated plan does not have)
    browser_page.wait_for_function(
        "() => { const i = document.getElementById('chart-pools'); return i.complete && i.naturalWidth > 0; }"
    )
    assert browser_page.is_visible("#pools-chart") and browser_page.is_hidden("#charts")
    for name in CHARTS:
        assert browser_page.get_attribute(f"#chart-{name}", "src") is None
    svg = httpx.get(f"{served.base_url}/v1/plans/{plan['id']}/charts/pools.svg")
    assert [p["role"] for p in _chart_series(svg.text)["pools"]] == ["prefill", "decode"]
    # the deployment's history names the pools
    browser_page.wait_for_selector("#deployments-table")
    deployment_row = browser_page.locator("#deployments-table tbody tr", has_text="rag-pools")
    assert "GPUs in prefill and decode pools" in deployment_row.inner_text()
    browser_page.locator("#deployments-table tbody tr", has_text="rag-pools").get_by_role("button", name="History").click()
    browser_page.wait_for_selector("#history-table")
    assert "GPUs in pools: prefill" in browser_page.inner_text("#history-table tbody tr")
