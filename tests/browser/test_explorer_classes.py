"""The plan explorer on a class plan, in a real browser (the harness of tests/browser/test_explorer.py):
opening a stored class plan shows its arrangement, its pools with their classes, each class's figures and
the arrangements compared, with no chart requested (a class plan has none: 404) and no failed request or
console error; the deployments table and the deployment's history name its arrangement."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page

from tests.api.conftest import ADMIN_KEY, ServedHeadroom, serve_headroom
from tests.api.test_classes_plans import WORKED
from tests.browser.harness import Watched
from tests.browser.test_explorer import CHARTS, PLAN_TIMEOUT_MS, _open, _value

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedHeadroom]:
    with serve_headroom(tmp_path_factory.mktemp("explorer-classes")) as running:
        yield running


def test_a_class_plan_shows_its_pools_and_classes(page: tuple[Page, Watched], served: ServedHeadroom) -> None:
    browser_page, _ = page
    answer = httpx.post(
        f"{served.base_url}/v1/plans",
        json={**WORKED, "name": "assistant"},
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        timeout=PLAN_TIMEOUT_MS / 1000,
    )
    assert answer.status_code == 201, answer.text
    plan: dict[str, Any] = answer.json()
    _open(browser_page, served)
    browser_page.wait_for_selector("#plans-table")
    row = browser_page.locator(f"#plans-table tbody tr[data-plan-id='{plan['id']}']")
    assert "req/s in classes" in row.inner_text()
    row.locator("button").click()
    browser_page.wait_for_selector("#answer-class-pools")
    chosen = plan["arrangement"]["chosen"]
    assert _value(browser_page, "#answer-arrangement") == chosen
    pools = browser_page.locator("#answer-class-pools tbody tr")
    assert [pools.nth(i).get_attribute("data-pool") for i in range(pools.count())] == [p["name"] for p in plan["pools"]]
    for i, pool in enumerate(plan["pools"]):
        cells = pools.nth(i).locator("td")
        assert cells.nth(0).inner_text() == ", ".join(pool["classes"])
        assert cells.nth(2).inner_text() == pool["gpu"] and cells.nth(4).inner_text() == str(pool["replicas"])
    classes = browser_page.locator("#answer-classes tbody tr")
    assert [classes.nth(i).get_attribute("data-class") for i in range(classes.count())] == ["chat", "summarise"]
    compared = browser_page.locator("#answer-arrangements tbody tr")
    assert compared.count() == len(plan["arrangement"]["compared"])
    assert browser_page.locator(f"#answer-arrangements tbody tr[data-arrangement='{chosen}']").get_attribute("class") == "current"
    assert int(_value(browser_page, "#answer-gpus")) == sum(p["replicas"] * p["tp"] for p in plan["pools"])
    assert f"Class plan: {chosen}" in browser_page.inner_text("#status")
    assert "deployment assistant's plan" in browser_page.inner_text("#answer-stored")
    # no chart is asked for (a class plan has none); the CSV and deploy downloads are offered
    assert browser_page.is_hidden("#charts")
    for name in CHARTS:
        assert browser_page.get_attribute(f"#chart-{name}", "src") is None
    assert browser_page.is_visible("#downloads")
    # the deployments table and the history name the arrangement
    browser_page.wait_for_selector("#deployments-table")
    deployment_row = browser_page.locator("#deployments-table tbody tr", has_text="assistant")
    assert f"GPUs in {chosen} class pools" in deployment_row.inner_text()
    deployment_row.get_by_role("button", name="History").click()
    browser_page.wait_for_selector("#history-table")
    assert f"GPUs, {chosen}: " in browser_page.inner_text("#history-table tbody tr")
