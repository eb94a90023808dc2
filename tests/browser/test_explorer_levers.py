"""The plan explorer's work-saving levers, in a real browser (the harness of tests/browser/test_explorer.py):
the form asks for workload.prefix_reuse (a shared system prompt or a measured hit rate), workload.task and
constraints.speculative, and a plan that deploys a prefix cache or speculative decoding shows a "Work saved"
section with the API's numbers (plan.prefix_caching, plan.speculative and their justification sections); a
stored plan's recheck answers as GET /v1/plans/{id}/recheck does."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import Page

from tests.api.conftest import ADMIN_KEY, ServedHeadroom, serve_headroom
from tests.browser.harness import Watched
from tests.browser.test_explorer import (
    PLAN_TIMEOUT_MS,
    _fill_plan,
    _num,
    _open,
    _submit,
    _usd,
    _value,
    _wait_for_charts,
    screenshots,  # noqa: F401  (the fixture: HEADROOM_SCREENSHOTS_DIR or a temporary folder)
)

pytestmark = pytest.mark.slow

#: Half the requests share a 1,000-token system prompt (docs/prefix-caching.md's example's system prompt).
SYSTEM_PROMPT = {"system_prompt_tokens": 1000, "system_prompt_fraction": 0.5}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServedHeadroom]:
    with serve_headroom(tmp_path_factory.mktemp("explorer-levers")) as running:
        yield running


def _api_plan(served: ServedHeadroom, sent: dict[str, Any]) -> dict[str, Any]:
    """The plan the API answers to the body the page sent (a dry run: the same request, the same plan)."""
    answer = httpx.post(f"{served.base_url}/v1/plans", json=sent, timeout=PLAN_TIMEOUT_MS / 1000)
    assert answer.status_code == 200, answer.text
    plan: dict[str, Any] = answer.json()
    return plan


def _row(page: Page, row: str) -> tuple[float | None, float | None]:
    """A with/without row's raw figures (data-without, data-with; empty when the planner gives none)."""
    cells = page.locator(f"#answer-work-saved tr[data-row='{row}']")
    without, with_it = cells.get_attribute("data-without"), cells.get_attribute("data-with")
    return (float(without) if without else None, float(with_it) if with_it else None)


def test_a_plan_with_a_shared_system_prompt_shows_the_work_saved(
    page: tuple[Page, Watched],
    served: ServedHeadroom,
    screenshots: Path,  # noqa: F811
) -> None:
    browser_page, _ = page
    _open(browser_page, served)
    _fill_plan(browser_page, verify=False)
    assert browser_page.is_hidden("#system-prompt-tokens") and browser_page.is_hidden("#hit-rate")
    browser_page.select_option("#prefix-reuse", "system_prompt")
    assert browser_page.is_visible("#system-prompt-tokens") and browser_page.is_hidden("#hit-rate")
    browser_page.fill("#system-prompt-tokens", str(SYSTEM_PROMPT["system_prompt_tokens"]))
    browser_page.fill("#system-prompt-fraction", str(SYSTEM_PROMPT["system_prompt_fraction"]))
    browser_page.select_option("#task", "code")
    sent = _submit(browser_page, "/v1/plans")
    # The form sends what was asked, and leaves constraints.speculative at the API's default (auto) by omitting it.
    assert sent["workload"]["prefix_reuse"] == SYSTEM_PROMPT and sent["workload"]["task"] == "code"
    assert "speculative" not in sent["constraints"]
    plan = _api_plan(served, sent)
    cache, draft = plan["plan"]["prefix_caching"], plan["plan"]["speculative"]
    assert cache is not None and draft is not None  # the 8B chat plan on these GPUs deploys both (else nothing is shown)
    browser_page.wait_for_selector("#work-saved")
    # the prefix cache: hit rate, cache tokens, routing and prefill saved, as plan.prefix_caching says
    assert float(_value(browser_page, "#answer-prefix-hit-rate")) == cache["hit_rate"]
    assert int(_value(browser_page, "#answer-prefix-cache-tokens")) == cache["cache_tokens"]
    assert _value(browser_page, "#answer-prefix-routing") == cache["routing"]
    assert float(_value(browser_page, "#answer-prefix-saved")) == cache["prefill_tokens_saved_fraction"]
    assert browser_page.inner_text("#answer-prefix-saved") == f"{_num(cache['prefill_tokens_saved_fraction'] * 100, 1)} %"
    section = plan["justification"]["prefix_caching"]
    assert _row(browser_page, "prefix-ttft") == (section["ttft_s_without"], section["ttft_s_with"])
    assert _row(browser_page, "prefix-cost") == (section["cost_usd_per_hour_without"], section["cost_usd_per_hour_with"])
    cost_cells = browser_page.locator("#answer-work-saved tr[data-row='prefix-cost'] td")
    change = section["cost_usd_per_hour_with"] - section["cost_usd_per_hour_without"]
    sign = "−" if change < 0 else "+" if change > 0 else ""
    assert cost_cells.nth(0).inner_text() == _usd(section["cost_usd_per_hour_without"])
    assert cost_cells.nth(2).inner_text() == sign + _usd(abs(change))
    # speculative decoding: method, k, α (code's, not chat's), E and the crossover batch, as plan.speculative says
    assert _value(browser_page, "#answer-spec-method") == draft["method"]
    assert int(_value(browser_page, "#answer-spec-k")) == draft["draft_tokens"]
    assert float(_value(browser_page, "#answer-spec-alpha")) == draft["acceptance_rate"]
    assert float(_value(browser_page, "#answer-spec-e")) == draft["tokens_per_step"]
    k, alpha = draft["draft_tokens"], draft["acceptance_rate"]
    assert draft["tokens_per_step"] == pytest.approx((1 - alpha ** (k + 1)) / (1 - alpha), rel=1e-5)
    crossover = _value(browser_page, "#answer-spec-crossover")
    assert crossover == ("" if draft["crossover_batch"] is None else str(draft["crossover_batch"]))
    spec = plan["justification"]["speculative"]
    chosen_trial = next(t for t in spec["trials"] if (t["method"], t["draft_tokens"]) == (draft["method"], k))
    assert _row(browser_page, "spec-tpot") == (spec["tpot_s_without"], chosen_trial["tpot_s"])
    without_cell = browser_page.locator("#answer-work-saved tr[data-row='spec-tpot'] td").nth(0).inner_text()
    # null without speculation: the plan's per-replica load is unstable without it (SpeculativeSectionRead)
    assert without_cell == ("overloaded" if spec["tpot_s_without"] is None else f"{_num(spec['tpot_s_without'] * 1000, 1)} ms")
    assert _row(browser_page, "spec-cost") == (spec["cost_usd_per_hour_without"], plan["cost"]["usd_per_hour"])
    browser_page.locator("#work-saved").scroll_into_view_if_needed()
    browser_page.screenshot(path=screenshots / "explorer-work-saved.png", full_page=True)
    # the task changed the draft's acceptance: the same request without it assumes the chat default
    chat = _api_plan(served, {**sent, "workload": {k: v for k, v in sent["workload"].items() if k != "task"}})
    assert chat["plan"]["speculative"] is not None
    assert not math.isclose(chat["plan"]["speculative"]["acceptance_rate"], alpha)


def _ask_hit_rate(page: Page, served: ServedHeadroom, hit_rate: str, ttft_ms: str) -> dict[str, Any]:
    """Asks, through the form, the golden chat workload with a measured hit rate and no speculation; the API's plan."""
    _open(page, served)
    _fill_plan(page, verify=False)
    page.select_option("#prefix-reuse", "hit_rate")
    assert page.is_visible("#hit-rate") and page.is_hidden("#system-prompt-tokens")
    page.fill("#hit-rate", hit_rate)
    page.select_option("#speculative", "off")
    page.fill("#ttft", ttft_ms)
    sent = _submit(page, "/v1/plans")
    assert sent["workload"]["prefix_reuse"] == {"hit_rate": float(hit_rate)} and "task" not in sent["workload"]
    assert sent["constraints"]["speculative"] == "off" and sent["slo"]["ttft_ms"] == float(ttft_ms)
    plan = _api_plan(served, sent)
    assert plan["plan"]["speculative"] is None and plan["justification"].get("speculative") is None
    return plan


def test_a_measured_hit_rate_without_speculation_shows_only_the_cache(page: tuple[Page, Watched], served: ServedHeadroom) -> None:
    browser_page, _ = page
    # at a 300 ms TTFT target the measured 60 % hit rate saves a replica's worth of prefill: a cache is deployed
    plan = _ask_hit_rate(browser_page, served, "0.6", "300")
    cache = plan["plan"]["prefix_caching"]
    assert cache is not None
    browser_page.wait_for_selector("#work-saved")
    assert _value(browser_page, "#answer-prefix-routing") == cache["routing"] == "as_measured"
    assert int(_value(browser_page, "#answer-prefix-cache-tokens")) == cache["cache_tokens"] == 0
    assert float(_value(browser_page, "#answer-prefix-hit-rate")) == cache["hit_rate"] == 0.6
    assert browser_page.locator("#answer-speculative, #answer-spec-none").count() == 0  # off: nothing tried, nothing said
    rows = browser_page.locator("#answer-work-saved tbody tr")
    assert [rows.nth(i).get_attribute("data-row") for i in range(rows.count())] == ["prefix-ttft", "prefix-cost"]
    section = plan["justification"]["prefix_caching"]
    assert _row(browser_page, "prefix-cost") == (section["cost_usd_per_hour_without"], section["cost_usd_per_hour_with"])
    assert section["cost_usd_per_hour_with"] < section["cost_usd_per_hour_without"]


def test_reuse_that_saves_nothing_says_why_and_a_bad_hit_rate_is_the_apis_422(
    page: tuple[Page, Watched], served: ServedHeadroom
) -> None:
    browser_page, watched = page
    # at 500 ms the same hit rate lowers no cost: no cache is deployed, and the section says the planner's reason
    plan = _ask_hit_rate(browser_page, served, "0.6", "500")
    assert plan["plan"]["prefix_caching"] is None
    browser_page.wait_for_selector("#work-saved")
    assert plan["justification"]["prefix_caching"]["reason"] in browser_page.inner_text("#answer-prefix-none")
    assert browser_page.locator("#answer-prefix-caching, #answer-work-saved").count() == 0
    # a plan with neither lever asked for has no section at all
    browser_page.select_option("#prefix-reuse", "")
    sent = _submit(browser_page, "/v1/plans")
    assert "prefix_reuse" not in sent["workload"]
    assert _api_plan(served, sent)["plan"]["prefix_caching"] is None
    browser_page.wait_for_function("() => !document.getElementById('answer-prefix-none')")
    assert browser_page.locator("#work-saved").count() == 0
    # a hit rate of 1.5 is sent as typed and the API's 422 names the field: nothing is clamped or dropped
    browser_page.select_option("#prefix-reuse", "hit_rate")
    browser_page.fill("#hit-rate", "1.5")
    with browser_page.expect_response(lambda r: urlsplit(r.url).path == "/v1/plans") as answered:
        browser_page.press("#tpot", "Enter")
    assert answered.value.status == 422
    assert answered.value.request.post_data_json["workload"]["prefix_reuse"] == {"hit_rate": 1.5}
    browser_page.wait_for_selector(".problem")
    assert "workload.prefix_reuse.hit_rate" in browser_page.inner_text(".problem")
    # Chromium logs every 4xx answer as a console error: this one, and nothing else, is expected
    expected = [e for e in watched.console_errors if "status of 422" in e and f"{served.base_url}/v1/plans'" in e]
    assert len(expected) == 1 and watched.console_errors == expected, watched.console_errors
    watched.console_errors.clear()


def test_a_stored_plan_is_rechecked_on_todays_catalog(page: tuple[Page, Watched], served: ServedHeadroom) -> None:
    browser_page, _ = page
    _open(browser_page, served)
    _fill_plan(browser_page, key=ADMIN_KEY, verify=False)
    browser_page.select_option("#speculative", "off")
    with browser_page.expect_response(lambda r: urlsplit(r.url).path == "/v1/plans" and r.request.method == "POST") as posted:
        _submit(browser_page, "/v1/plans")
    assert posted.value.status == 201
    plan = posted.value.json()
    _wait_for_charts(browser_page)  # the user sees them; opening the plan again sooner would abort their requests
    assert browser_page.is_visible("#recheck-button")
    with browser_page.expect_response(lambda r: urlsplit(r.url).path == f"/v1/plans/{plan['id']}/recheck") as rechecked:
        browser_page.click("#recheck-button")
    assert rechecked.value.status == 200
    recheck: dict[str, Any] = rechecked.value.json()
    browser_page.wait_for_selector("#recheck-rows")
    assert browser_page.get_attribute("#recheck-summary", "data-holds") == str(recheck["holds"]).lower() == "true"
    assert recheck["summary"] in browser_page.inner_text("#recheck-summary")
    rows = browser_page.locator("#recheck-rows tbody tr")
    assert rows.count() == len(recheck["check"]["rows"])
    first = recheck["check"]["rows"][0]
    assert rows.nth(0).locator("td").nth(0).inner_text() == first["gpu"] == plan["plan"]["gpu"]
    assert _usd(recheck["cost"]["now_usd_per_hour"]) in browser_page.inner_text("#recheck-cost")
    # opening another plan clears the answer: it is this plan's, not the next one's
    browser_page.fill("#plan-id", plan["id"])
    browser_page.press("#plan-id", "Enter")
    browser_page.wait_for_function("() => document.getElementById('recheck-answer').children.length === 0")
    _wait_for_charts(browser_page)  # the user sees them; moving on sooner would abort their requests
