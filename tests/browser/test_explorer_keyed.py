"""The plan explorer on a service that requires a key for every request (`HEADROOM_REQUIRE_AUTH=1`):
a stored plan's charts and downloads are fetched with the key, since an `<img src>` or a link
cannot send an Authorization header. Same browser, page watch and helpers as tests/browser/test_explorer.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Page

from tests.api.conftest import ADMIN_KEY, ServedHeadroom, serve_headroom
from tests.browser.harness import Watched
from tests.browser.test_explorer import MODEL, _fill_plan, _submit, _wait_for_charts

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
