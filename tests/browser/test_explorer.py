"""The plan explorer (`GET /`, api/routers/explorer.py) in a real browser: headless Chromium driven
by Playwright against a live `headroom serve` (issue 19 §3).

The browser is the system's Chromium (Debian's `chromium` package; `HEADROOM_CHROMIUM` names
another binary), launched with `--no-sandbox` (containers run it as root); Playwright's own browser
download is not used. Without a browser these tests skip with the reason, except in CI (`CI` set),
where they fail: .ci/run installs chromium, as tests/conftest.py does for PostgreSQL.

Every page is watched for console errors, uncaught exceptions, failed requests and requests to any
host but the service's own 127.0.0.1: the page must work offline. Screenshots go to a pytest
temporary folder, or to `HEADROOM_SCREENSHOTS_DIR` when set (docs/screenshots/explorer.png is made
with `HEADROOM_SCREENSHOTS_DIR=docs/screenshots`).
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Page

from tests.api.conftest import ADMIN_KEY, ServedHeadroom, serve_headroom
from tests.browser.harness import Watched

SCREENSHOTS_ENV = "HEADROOM_SCREENSHOTS_DIR"
#: A plan with verification takes a few seconds on one core; a loaded 2-core CI runner is slower.
PLAN_TIMEOUT_MS = 240_000
#: docs/design.md's test vectors' model and the golden chat workload (tests/golden/chat-8b.request.json).
MODEL = "llama-3.1-8b"
CHARTS = ("wall", "knee", "cost", "alternatives")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedHeadroom]:
    with serve_headroom(tmp_path_factory.mktemp("explorer")) as running:
        yield running


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    folder = Path(os.environ[SCREENSHOTS_ENV]) if os.environ.get(SCREENSHOTS_ENV) else tmp_path / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _open(page: Page, served: ServedHeadroom) -> None:
    page.goto(served.base_url + "/")
    page.wait_for_selector(f"#model option[value='{MODEL}']", state="attached")
    page.wait_for_selector("#gpus-allowed input[type=checkbox]", state="attached")
    page.wait_for_selector("#deployments p, #deployments table")


def _fill_plan(page: Page, *, rate: str | None = "20", key: str = "", name: str = "", verify: bool = True) -> None:
    """The golden chat workload (tests/golden/chat-8b.request.json); `rate` None for a capacity question (it has none)."""
    page.select_option("#model", MODEL)
    if rate is not None:
        page.fill("#arrival-rate", rate)
        page.fill("#deployment-name", name)
    page.fill("#prompt-mean", "1000")
    page.fill("#prompt-p99", "4000")
    page.fill("#output-mean", "250")
    page.fill("#output-p99", "1000")
    page.fill("#ttft", "500")
    page.fill("#tpot", "50")
    page.set_checked("#verify", verify)
    page.fill("#api-key", key)


def _submit(page: Page, path: str) -> dict[str, Any]:
    """Presses Enter in the form (the keyboard path) and returns the JSON body the page POSTed to `path`."""
    with page.expect_request(lambda r: r.method == "POST" and urlsplit(r.url).path == path) as sent:
        page.press("#tpot", "Enter")
    body = sent.value.post_data_json
    assert isinstance(body, dict)
    page.wait_for_selector("#answer-gpu", timeout=PLAN_TIMEOUT_MS)
    return body


def _wait_for_charts(page: Page) -> None:
    """Until every chart the answer embeds has loaded (a non-empty image), at most the plan timeout."""
    page.wait_for_function(
        "() => [...document.querySelectorAll('#charts img[src]')].every((i) => i.complete && i.naturalWidth > 0)",
        timeout=PLAN_TIMEOUT_MS,
    )


def _value(page: Page, selector: str) -> str:
    value = page.get_attribute(selector, "data-value")
    assert value is not None, selector
    return value


def _usd(value: float) -> str:
    return f"${value:,.2f}"


def _num(value: float, digits: int) -> str:
    """A number as the page writes it (explorer.js `num`: en-US grouping, at most `digits` decimals)."""
    text = f"{round(value, digits):,.{digits}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def test_page_loads_offline_labelled_and_keyboard_reachable(page: tuple[Page, Watched], served: ServedHeadroom) -> None:
    browser_page, watched = page
    _open(browser_page, served)
    assert browser_page.title() == "Headroom plan explorer"
    # Every control has a visible label tied to it (<label for>), including the GPU checkboxes.
    unlabelled = browser_page.evaluate(
        """() => [...document.querySelectorAll('input, select')]
            .filter((c) => !document.querySelector(`label[for="${c.id}"]`))
            .map((c) => c.id || c.name || c.outerHTML)"""
    )
    assert unlabelled == []
    gpu_boxes = browser_page.locator("#gpus-allowed input[type=checkbox]").count()
    assert gpu_boxes == httpx.get(f"{served.base_url}/v1/gpus?limit=500").json()["total"]
    # The question's controls are reached with Tab alone, in reading order.
    reached: list[str] = []
    for _ in range(40):
        browser_page.keyboard.press("Tab")
        reached.append(browser_page.evaluate("() => document.activeElement.id"))
    controls = ("model", "arrival-rate", "prompt-mean", "ttft", "tpot", "max-gpus", "budget", "prefix-reuse", "task")
    for control in (*controls, "speculative", "api-key", "submit"):
        assert control in reached, (control, reached)
    assert reached.index("model") < reached.index("arrival-rate") < reached.index("ttft") < reached.index("submit")
    assert reached.index("budget") < reached.index("prefix-reuse") < reached.index("speculative") < reached.index("submit")
    # What was fetched: the page, its script and stylesheet from /static, and the catalog from the API.
    paths = {urlsplit(url).path for url in watched.requested}
    assert {"/", "/static/explorer/explorer.js", "/static/explorer/explorer.css", "/v1/models", "/v1/gpus"} <= paths


def test_a_plan_asked_through_the_form_is_the_apis_plan(
    page: tuple[Page, Watched], served: ServedHeadroom, screenshots: Path
) -> None:
    browser_page, _ = page
    _open(browser_page, served)
    _fill_plan(browser_page)
    browser_page.check("#gpu-allow-l40s")
    browser_page.check("#gpu-allow-h100-sxm")
    browser_page.fill("#max-gpus", "16")
    browser_page.fill("#budget", "100")
    sent = _submit(browser_page, "/v1/plans")
    # The form says what the user typed, as the API's request body: a dry run without a key.
    assert sent == {
        "model": MODEL,
        "workload": {
            "arrival_rate_rps": 20,
            "prompt_tokens": {"mean": 1000, "p99": 4000},
            "output_tokens": {"mean": 250, "p99": 1000},
        },
        "slo": {"ttft_ms": 500, "tpot_ms": 50},
        "constraints": {"gpus": ["h100-sxm", "l40s"], "max_gpus": 16, "budget_usd_per_hour": 100},
        "verify": True,
        "store": False,
    }
    answer = httpx.post(f"{served.base_url}/v1/plans", json=sent, timeout=PLAN_TIMEOUT_MS / 1000)
    assert answer.status_code == 200, answer.text
    plan = answer.json()
    assert plan["plan"]["gpu"] in ("l40s", "h100-sxm")
    assert _value(browser_page, "#answer-gpu") == plan["plan"]["gpu"]
    assert int(_value(browser_page, "#answer-gpus")) == plan["plan"]["gpus_total"]
    assert float(_value(browser_page, "#answer-cost-hour")) == plan["cost"]["usd_per_hour"]
    assert browser_page.inner_text("#answer-cost-hour") == _usd(plan["cost"]["usd_per_hour"])
    summary = browser_page.inner_text("#answer-summary")
    assert f"Buy {plan['plan']['gpus_total']} × {plan['plan']['gpu']}" in summary
    assert _usd(plan["cost"]["usd_per_month"]) in browser_page.inner_text("#answer-cost")
    # What binds and what would change it, from the justification's binding and sensitivity sections.
    binding = plan["justification"]["binding"]
    binds = [entry for entry in binding if entry["binding"] and entry["kind"] == "slo"]
    for entry in binds:
        assert entry["constraint"].removeprefix("slo_").upper() + " binds" in browser_page.inner_text("#answer-binding")
    levels = plan["justification"]["sensitivity"]["traffic"]
    assert browser_page.locator("#answer-sensitivity tbody tr").count() == len(levels)
    assert browser_page.locator("#answer-alternatives tbody tr").count() == len(plan["justification"]["alternatives"])
    # A dry run is not stored: no charts or downloads by id, and the page says why.
    assert "dry run" in browser_page.inner_text("#answer-stored")
    assert browser_page.is_hidden("#charts") and browser_page.is_hidden("#downloads")
    browser_page.screenshot(path=screenshots / "explorer-dry-run.png", full_page=True)


def test_capacity_asked_through_the_form_is_the_apis_answer(page: tuple[Page, Watched], served: ServedHeadroom) -> None:
    browser_page, _ = page
    _open(browser_page, served)
    browser_page.check("#mode-capacity")
    assert browser_page.is_hidden("#arrival-rate") and browser_page.is_visible("#capacity-gpus")
    _fill_plan(browser_page, rate=None, verify=False)
    browser_page.select_option("#capacity-gpu", "h100-sxm")
    browser_page.fill("#capacity-gpus", "8")
    sent = _submit(browser_page, "/v1/capacity")
    assert sent["gpu"] == "h100-sxm" and sent["gpus"] == 8 and sent["verify"] is False
    answer = httpx.post(f"{served.base_url}/v1/capacity", json=sent, timeout=PLAN_TIMEOUT_MS / 1000)
    assert answer.status_code == 200, answer.text
    capacity = answer.json()
    assert _value(browser_page, "#answer-gpu") == "h100-sxm"
    assert int(_value(browser_page, "#answer-gpus")) == capacity["configuration"]["gpus_used"]
    assert float(_value(browser_page, "#answer-rate")) == capacity["max_arrival_rate_rps"]
    # Its chart, drawn by POST /v1/capacity/charts/wall.svg from the same request, is shown from a blob of this page.
    browser_page.wait_for_function(
        "() => { const i = document.getElementById('chart-capacity-wall'); return i && i.complete && i.naturalWidth > 0; }",
        timeout=PLAN_TIMEOUT_MS,
    )
    assert (browser_page.get_attribute("#chart-capacity-wall", "src") or "").startswith(f"blob:{served.base_url}/")
    svg = browser_page.evaluate("async () => (await fetch(document.getElementById('chart-capacity-wall').src)).text()")
    series = _chart_series(svg)
    assert series["slo"] == {"ttft_ms": 500, "tpot_ms": 50} and len(series["rate_rps"]) > 1


def test_a_stored_plan_has_charts_downloads_and_history(
    page: tuple[Page, Watched], served: ServedHeadroom, screenshots: Path
) -> None:
    browser_page, _ = page
    _open(browser_page, served)
    _fill_plan(browser_page, key=ADMIN_KEY, name="explorer-chat")
    with browser_page.expect_response(lambda r: urlsplit(r.url).path == "/v1/plans" and r.request.method == "POST") as posted:
        _submit(browser_page, "/v1/plans")
    assert posted.value.status == 201
    plan = posted.value.json()
    assert plan["name"] == "explorer-chat"
    assert plan["id"] in browser_page.inner_text("#answer-stored")
    stored = httpx.get(f"{served.base_url}/v1/plans/{plan['id']}").json()
    assert float(_value(browser_page, "#answer-cost-hour")) == stored["cost"]["usd_per_hour"]
    # Every chart the app serves is embedded, loads and is a non-empty SVG.
    chart_names = browser_page.get_attribute("#charts", "data-chart-names") or ""
    embedded = [name for name in chart_names.split(",") if name]
    served_charts = [name for name in CHARTS if _has_chart_route(served, name)]
    assert embedded == served_charts
    for name in embedded:
        image = browser_page.locator(f"#chart-{name}")
        image.scroll_into_view_if_needed()
        browser_page.wait_for_function(
            "(id) => { const i = document.getElementById(id); return i.complete && i.naturalWidth > 0; }", arg=f"chart-{name}"
        )
        svg = httpx.get(f"{served.base_url}/v1/plans/{plan['id']}/charts/{name}.svg")
        assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
        assert svg.text.lstrip().startswith(("<?xml", "<svg")) and "<path" in svg.text
        _assert_series(name, _chart_series(svg.text), plan)
        image.screenshot(path=screenshots / f"chart-{name}.png")
    browser_page.screenshot(path=screenshots / "explorer.png", full_page=True)
    # The downloads are the API's own files.
    with browser_page.expect_download() as csv_download:
        browser_page.click("#download-csv")
    csv_bytes = Path(csv_download.value.path()).read_bytes()
    assert csv_bytes == httpx.get(f"{served.base_url}/v1/plans/{plan['id']}/csv").content
    assert plan["id"].encode() in csv_bytes
    browser_page.select_option("#deploy-target", "k8s")
    with browser_page.expect_download() as deploy_download:
        browser_page.click("#download-deploy")
    manifests = Path(deploy_download.value.path()).read_bytes()
    assert manifests == httpx.get(f"{served.base_url}/v1/plans/{plan['id']}/deploy", params={"target": "k8s"}).content
    assert b"kind: Deployment" in manifests
    # A second plan for the deployment at twice the traffic: the history shows both and what changed.
    _fill_plan(browser_page, rate="40", key=ADMIN_KEY, name="explorer-chat", verify=False)
    _submit(browser_page, "/v1/plans")
    _wait_for_charts(browser_page)  # the user sees them; moving on sooner would abort their requests
    browser_page.wait_for_selector("#deployments-table")
    row = browser_page.locator("#deployments-table tbody tr", has_text="explorer-chat")
    row.get_by_role("button", name="History").click()
    browser_page.wait_for_selector("#history-table")
    history = httpx.get(f"{served.base_url}/v1/deployments/explorer-chat/plans").json()["items"]
    rows = browser_page.locator("#history-table tbody tr")
    assert rows.count() == len(history) == 2
    assert "traffic 20 → 40 req/s" in rows.nth(0).inner_text()
    assert "first plan" in rows.nth(1).inner_text()
    # Opening the older plan from the history shows that plan.
    rows.nth(1).get_by_role("button", name="Open").click()
    browser_page.wait_for_function("(id) => document.getElementById('answer-stored')?.textContent.includes(id)", arg=plan["id"])
    assert _value(browser_page, "#answer-gpu") == plan["plan"]["gpu"]
    _wait_for_charts(browser_page)


#: The explorer's stored-plans page size (PLANS_PAGE in api/static/explorer/explorer.js).
PLANS_PAGE = 20
#: Quick plans to store through the API: the golden chat workload on H100 bf16, unverified (a fraction
#: of a second each), and a small batch job, so the stored-plans table has an interactive and a batch row.
QUICK_CHAT: dict[str, Any] = {
    "model": MODEL,
    "workload": {
        "arrival_rate_rps": 20,
        "prompt_tokens": {"mean": 1000, "p99": 4000},
        "output_tokens": {"mean": 250, "p99": 1000},
    },
    "slo": {"ttft_ms": 500, "tpot_ms": 50},
    "constraints": {"gpus": ["h100-sxm"], "precisions": [{"weights": "bf16", "kv_cache": "bf16"}]},
    "verify": False,
}
QUICK_JOB: dict[str, Any] = {
    "model": MODEL,
    "workload": {"kind": "batch", "requests": 100_000, "prompt_tokens": 1000, "output_tokens": 250, "deadline_h": 24},
    "constraints": {"gpus": ["h100-sxm"], "precisions": [{"weights": "bf16", "kv_cache": "bf16"}]},
    "verify": False,
}


def _store(served: ServedHeadroom, body: dict[str, Any]) -> dict[str, Any]:
    answer = httpx.post(
        f"{served.base_url}/v1/plans",
        json=body,
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        timeout=PLAN_TIMEOUT_MS / 1000,
    )
    assert answer.status_code == 201, answer.text
    plan: dict[str, Any] = answer.json()
    return plan


def test_the_stored_plans_table_lists_the_apis_plans_pages_and_opens_them(
    page: tuple[Page, Watched], served: ServedHeadroom
) -> None:
    browser_page, _ = page
    # More plans than one page (other tests in this module may have stored some), the newest a batch job.
    chat = _store(served, QUICK_CHAT)
    total = httpx.get(f"{served.base_url}/v1/plans?limit=1").json()["total"]
    for rate in range(max(0, PLANS_PAGE - total)):
        _store(served, {**QUICK_CHAT, "workload": {**QUICK_CHAT["workload"], "arrival_rate_rps": 21 + rate}})
    job = _store(served, QUICK_JOB)
    listed = httpx.get(f"{served.base_url}/v1/plans?limit=500").json()
    assert listed["total"] > PLANS_PAGE and listed["items"][0]["id"] == job["id"]
    ids = [item["id"] for item in listed["items"]]

    _open(browser_page, served)
    browser_page.wait_for_selector("#plans-table")
    rows = browser_page.locator("#plans-table tbody tr")
    shown = [rows.nth(i).get_attribute("data-plan-id") for i in range(rows.count())]
    assert shown == ids[:PLANS_PAGE]  # the API's first page, newest first
    assert f"({PLANS_PAGE} of {listed['total']})" in browser_page.inner_text("#plans-table caption")
    assert "job of 100,000 requests in 24 h" in rows.nth(0).inner_text()
    assert _usd(listed["items"][0]["cost_usd_per_hour"]) in rows.nth(0).inner_text()

    # "More plans" from the keyboard appends the next page and moves focus to its first row's button.
    more = browser_page.locator("#more-plans")
    assert more.is_visible()
    more.focus()
    browser_page.keyboard.press("Enter")
    browser_page.wait_for_function("(n) => document.querySelectorAll('#plans-table tbody tr').length > n", arg=PLANS_PAGE)
    shown = [rows.nth(i).get_attribute("data-plan-id") for i in range(rows.count())]
    assert shown == ids[: 2 * PLANS_PAGE]
    focused = browser_page.evaluate("() => document.activeElement.closest('tr')?.dataset.planId")
    assert focused == ids[PLANS_PAGE]
    assert more.is_hidden() == (len(ids) <= 2 * PLANS_PAGE)

    # Opening a plan from its row (Enter on its button) shows that plan's GPU, count and cost.
    button = browser_page.locator(f"#plans-table tbody tr[data-plan-id='{chat['id']}'] button")
    assert button.get_attribute("aria-label") == f"Open plan {chat['id']}"
    button.focus()
    browser_page.keyboard.press("Enter")
    browser_page.wait_for_function("(id) => document.getElementById('answer-stored')?.textContent.includes(id)", arg=chat["id"])
    assert _value(browser_page, "#answer-gpu") == chat["plan"]["gpu"] == "h100-sxm"
    assert int(_value(browser_page, "#answer-gpus")) == chat["plan"]["gpus_total"]
    assert float(_value(browser_page, "#answer-cost-hour")) == chat["cost"]["usd_per_hour"]
    assert browser_page.inner_text("#answer-cost-hour") == _usd(chat["cost"]["usd_per_hour"])
    _wait_for_charts(browser_page)  # the user sees them; moving on sooner would abort their requests


def _chart_series(svg: str) -> dict[str, Any]:
    """The series a chart drew, as api/charts.py records them in `<metadata id="headroom-chart-data">`."""
    found = re.search(r'<metadata id="headroom-chart-data">(.*?)</metadata>', svg, re.DOTALL)
    assert found is not None, "the SVG carries no headroom-chart-data"
    series = json.loads(html.unescape(found.group(1)))
    assert isinstance(series, dict)
    return series


def _assert_series(name: str, series: dict[str, Any], plan: dict[str, Any]) -> None:
    """Each chart drew the plan's own numbers: 20 req/s over the plan's replicas, its batch limit, its
    cost and sensitivity levels, and one bar per alternative besides the plan's."""
    justification = plan["justification"]
    if name == "wall":
        assert series["plan_rate_rps"] == pytest.approx(20 / plan["plan"]["replicas"])
        assert series["slo"] == {"ttft_ms": 500, "tpot_ms": 50}
        assert len(series["rate_rps"]) == len(series["ttft_ms"]) == len(series["tpot_ms"]) > 1
    elif name == "knee":
        assert series["batch_limit"] == plan["plan"]["batch_limit"]
        assert len(series["batch"]) == len(series["output_tokens_per_s"]) > 1
    elif name == "cost":
        assert series["arrival_rate_rps"] == 20 and series["cost_usd_per_hour"] == plan["cost"]["usd_per_hour"]
        assert len(series["levels"]) == len(justification["sensitivity"]["traffic"])
    else:
        labels = [row["label"] for row in series["rows"]]
        assert len(labels) == 1 + len(justification["alternatives"]) and labels[0].startswith("this plan")


def _has_chart_route(served: ServedHeadroom, name: str) -> bool:
    """Whether the app documents GET /v1/plans/{plan_id}/charts/<name>.svg (api/routers/charts.py)."""
    paths = httpx.get(f"{served.base_url}/openapi.json").json()["paths"]
    return any(path.startswith("/v1/plans/{") and (path.endswith(f"/charts/{name}.svg") or "/charts/{" in path) for path in paths)
