"""The plan explorer on a service that requires a key for every request (`HEADROOM_REQUIRE_AUTH=1`):
a stored plan's charts and downloads (a class plan's charts and recheck too) are fetched with the key,
since an `<img src>` or a link cannot send an Authorization header. Same browser, page watch and helpers as tests/browser/test_explorer.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Page

from tests.api.conftest import ADMIN_KEY, ServedHeadroom, serve_headroom
from tests.api.test_classes_plans import WORKED
from tests.browser.harness import Watched
from tests.browser.test_explorer import MODEL, PLAN_TIMEOUT_MS, _fill_plan, _submit, _wait_for_charts

pytestmark = pytest.mark.slow

HEADERS = {"Authorization": f"Bearer {ADMIN_KEY}"}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedHeadroom]:
    with serve_headroom(tmp_path_factory.mktemp("explorer-keyed"), env={"HEADROOM_REQUIRE_AUTH": "1"}) as running:
        yield running


def test_with_a_required_key_a_stored_plans_charts_and_files_load(page: tuple[Page, Watched], served: ServedHeadroom) -> None:
    browser_page, watched = page
    # The service answers nothing without a key, so neither may the page's files.
    assert httpx.get(f"{served.base_url}/v1/models").status_code == 401
    browser_page.goto(served.base_url + "/")
    browser_page.fill("#api-key", ADMIN_KEY)
    browser_page.dispatch_event("#api-key", "change")
    browser_page.wait_for_selector(f"#model option[value='{MODEL}']", state="attached")
    _fill_plan(browser_page, key=ADMIN_KEY, name="keyed-chat", verify=False)
    with browser_page.expect_response(lambda r: urlsplit(r.url).path == "/v1/plans" and r.request.method == "POST") as posted:
        _submit(browser_page, "/v1/plans")
    assert posted.value.status == 201
    plan_id = posted.value.json()["id"]
    # The blob: URLs come once each fetch is done: wait until every chart has one, then until they load.
    browser_page.wait_for_function(
        "() => { const all = document.querySelectorAll('#charts img'); "
        "return all.length > 0 && [...all].every((i) => i.getAttribute('src')); }",
        timeout=60_000,
    )
    _wait_for_charts(browser_page)
    images = browser_page.locator("#charts img[src]")
    assert images.count() > 0
    for index in range(images.count()):
        assert (images.nth(index).get_attribute("src") or "").startswith(f"blob:{served.base_url}/")
    # Each chart was fetched once, with the key (a 401 would also be a failed load, caught by the page watch).
    chart_paths = [urlsplit(url).path for url in watched.requested if "/charts/" in url and not url.startswith("blob:")]
    assert sorted(chart_paths) == sorted({path for path in chart_paths})
    # The CSV download is the API's own file, fetched with the key.
    with browser_page.expect_download() as csv_download:
        browser_page.click("#download-csv")
    assert csv_download.value.suggested_filename == f"plan-{plan_id}.csv"
    csv_bytes = Path(csv_download.value.path()).read_bytes()
    assert csv_bytes == httpx.get(f"{served.base_url}/v1/plans/{plan_id}/csv", headers=HEADERS).content
    assert plan_id.encode() in csv_bytes


def test_with_a_required_key_a_class_plans_charts_and_recheck_load(page: tuple[Page, Watched], served: ServedHeadroom) -> None:
    browser_page, watched = page
    stored = httpx.post(f"{served.base_url}/v1/plans", json=WORKED, headers=HEADERS, timeout=PLAN_TIMEOUT_MS / 1000)
    assert stored.status_code == 201, stored.text
    plan_id = stored.json()["id"]
    browser_page.goto(served.base_url + "/")
    browser_page.fill("#api-key", ADMIN_KEY)
    browser_page.dispatch_event("#api-key", "change")
    browser_page.wait_for_selector("#plans-table")
    browser_page.fill("#plan-id", plan_id)
    browser_page.press("#plan-id", "Enter")
    browser_page.wait_for_selector("#answer-class-pools")
    # its three charts come as blob: URLs fetched with the key, and load; knee and cost are not asked for
    shown = ("chart-wall", "chart-alternatives", "chart-pools")
    browser_page.wait_for_function(
        "(ids) => ids.every((id) => { const i = document.getElementById(id); "
        "return (i.getAttribute('src') || '').startsWith('blob:') && i.complete && i.naturalWidth > 0; })",
        arg=list(shown),
        timeout=PLAN_TIMEOUT_MS,
    )
    chart_paths = sorted(urlsplit(url).path for url in watched.requested if "/charts/" in url and not url.startswith("blob:"))
    assert chart_paths == sorted(f"/v1/plans/{plan_id}/charts/{name}.svg" for name in ("wall", "alternatives", "pools"))
    # the recheck is asked with the key too
    with browser_page.expect_response(lambda r: urlsplit(r.url).path == f"/v1/plans/{plan_id}/recheck") as rechecked:
        browser_page.click("#recheck-button")
    assert rechecked.value.status == 200
    browser_page.wait_for_selector("#recheck-classes")
    assert browser_page.locator("#recheck-classes tbody tr").count() == len(WORKED["classes"])
