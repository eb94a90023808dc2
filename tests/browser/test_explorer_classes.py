"""The plan explorer on a class plan, in a real browser (the harness of tests/browser/test_explorer.py):
opening a stored class plan shows its arrangement, its pools with their classes, each class's figures and
the arrangements compared; its three charts (wall, alternatives, pools) load with the class plan's captions
and its knee and cost (422 for a class plan) are not requested, with no failed request or console error; its
recheck answers each class as GET /v1/plans/{id}/recheck does; the deployments table and the deployment's
history name its arrangement."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Page

from api.routers.explorer import CLASS_CHARTS
from tests.api.conftest import ADMIN_KEY, ServedHeadroom, serve_headroom
from tests.api.test_classes_plans import WORKED
from tests.browser.harness import Watched
from tests.browser.test_explorer import CHARTS, PLAN_TIMEOUT_MS, _chart_series, _num, _open, _value

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedHeadroom]:
    with serve_headroom(tmp_path_factory.mktemp("explorer-classes")) as running:
        yield running


def _loaded(page: Page, image_id: str) -> None:
    page.wait_for_function(
        "(id) => { const i = document.getElementById(id); return i.src && i.complete && i.naturalWidth > 0; }",
        arg=image_id,
        timeout=PLAN_TIMEOUT_MS,
    )


def test_a_class_plan_shows_its_pools_and_classes(page: tuple[Page, Watched], served: ServedHeadroom) -> None:
    browser_page, watched = page
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
    # its wall, alternatives and pools charts load, captioned as a class plan's; knee and cost (422) are not asked for
    for name in ("wall", "alternatives", "pools"):
        _loaded(browser_page, f"chart-{name}")
        assert browser_page.is_visible(f"#chart-{name}")
        assert browser_page.get_attribute(f"#chart-{name}", "alt") == CLASS_CHARTS[name]
        assert browser_page.locator(f"figure:has(#chart-{name}) figcaption").inner_text() == CLASS_CHARTS[name]
    for name in set(CHARTS) - {"wall", "alternatives"}:
        assert browser_page.get_attribute(f"#chart-{name}", "src") is None
        assert browser_page.is_hidden(f"#chart-{name}")
    chart_paths = sorted(urlsplit(url).path for url in watched.requested if "/charts/" in url)
    assert chart_paths == sorted(f"/v1/plans/{plan['id']}/charts/{name}.svg" for name in ("wall", "alternatives", "pools"))

    # each chart is the class plan's own: the wall a curve per class, the alternatives its arrangements, the pools its pools
    def drawn(name: str) -> dict[str, Any]:
        return _chart_series(httpx.get(f"{served.base_url}/v1/plans/{plan['id']}/charts/{name}.svg").text)

    wall = drawn("wall")
    assert [k["name"] for k in wall["classes"]] == ["chat", "summarise"]
    assert wall["plan_rate_rps"] == sum(k["arrival_rate_rps"] for k in WORKED["classes"])
    alternatives = drawn("alternatives")["rows"]
    assert alternatives[0]["label"] == f"chosen: {chosen}" and len(alternatives) == len(plan["arrangement"]["compared"])
    for name in ("knee", "cost"):
        assert httpx.get(f"{served.base_url}/v1/plans/{plan['id']}/charts/{name}.svg").status_code == 422
    assert browser_page.is_visible("#downloads")
    # the recheck: the API's answer, class by class
    assert browser_page.is_visible("#recheck-button")
    with browser_page.expect_response(lambda r: urlsplit(r.url).path == f"/v1/plans/{plan['id']}/recheck") as rechecked:
        browser_page.click("#recheck-button")
    assert rechecked.value.status == 200
    recheck: dict[str, Any] = rechecked.value.json()
    browser_page.wait_for_selector("#recheck-classes")
    assert browser_page.get_attribute("#recheck-summary", "data-holds") == str(recheck["holds"]).lower()
    assert recheck["summary"] in browser_page.inner_text("#recheck-summary")
    rows = browser_page.locator("#recheck-classes tbody tr")
    assert [rows.nth(i).get_attribute("data-class") for i in range(rows.count())] == [
        k["name"] for k in recheck["check"]["classes"]
    ]
    for i, checked in enumerate(recheck["check"]["classes"]):
        assert rows.nth(i).get_attribute("data-meets") == str(checked["meets_target"]).lower()
        assert f"{_num(checked['simulated_ttft_p99_ms'], 1)} ms" in rows.nth(i).inner_text()
    assert recheck["arrangement"] == chosen and chosen in browser_page.inner_text("#recheck-classes caption")
    # the deployments table and the history name the arrangement
    browser_page.wait_for_selector("#deployments-table")
    deployment_row = browser_page.locator("#deployments-table tbody tr", has_text="assistant")
    assert f"GPUs in {chosen} class pools" in deployment_row.inner_text()
    deployment_row.get_by_role("button", name="History").click()
    browser_page.wait_for_selector("#history-table")
    assert f"GPUs, {chosen}: " in browser_page.inner_text("#history-table tbody tr")
