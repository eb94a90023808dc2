"""The explorer page's HTML without a browser (runs everywhere, where tests/browser/test_explorer.py
may skip): served at `/`, everything it loads on this host, and the charts it embeds the ones the
app serves."""

from __future__ import annotations

import re
from pathlib import Path

from fastapi import APIRouter

from api.app import create_app
from api.routers.explorer import CHARTS, available_charts
from api.settings import Settings
from tests.api.client import ApiClient


def test_the_page_loads_only_from_this_host(tmp_path: Path) -> None:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'headroom.db'}"))
    with ApiClient(app) as client:
        page = client.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        urls = re.findall(r'(?:src|href)="([^"]*)"', page.text)
        assert urls, "the page links nothing"
        assert all(url.startswith("#") or (url.startswith("/") and not url.startswith("//")) for url in urls), urls
        for asset in ("/static/explorer/explorer.js", "/static/explorer/explorer.css"):
            assert asset in urls and client.get(asset).status_code == 200
        assert 'data-charts="wall,knee,cost,alternatives"' in page.text
        assert "/" not in app.openapi()["paths"], "a page is not an operation"


def test_only_the_charts_the_app_serves_are_embedded() -> None:
    assert available_charts([]) == ()
    one = APIRouter()
    one.add_api_route("/v1/plans/{plan_id}/charts/cost.svg", lambda plan_id: None)
    assert available_charts(one.routes) == tuple(chart for chart in CHARTS if chart[0] == "cost")
    by_name = APIRouter()
    by_name.add_api_route("/v1/plans/{plan_id}/charts/{name}.svg", lambda plan_id, name: None)
    assert available_charts(by_name.routes) == CHARTS


def _options(page: str, select_id: str) -> tuple[list[str], str | None]:
    """A <select>'s option values in order, and the one marked selected."""
    found = re.search(rf'<select id="{select_id}"[^>]*>(.*?)</select>', page, re.DOTALL)
    assert found is not None, select_id
    options = re.findall(r'<option value="([^"]*)"( selected)?>', found.group(1))
    selected = [value for value, mark in options if mark]
    return [value for value, _ in options], selected[0] if selected else None


def test_the_lever_choices_are_the_ones_the_api_documents(tmp_path: Path) -> None:
    """The form's task and speculative choices and its speculative default are the OpenAPI document's, so the
    page can neither offer a value the API refuses nor send a mode the user did not choose."""
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'headroom.db'}"))
    schemas = app.openapi()["components"]["schemas"]
    speculative = schemas["PlanConstraintsSpec"]["properties"]["speculative"]
    task = next(each for each in schemas["WorkloadSpec"]["properties"]["task"]["anyOf"] if "enum" in each)
    with ApiClient(app) as client:
        page = client.get("/").text
    assert _options(page, "speculative") == (speculative["enum"], speculative["default"])
    assert f'data-default="{speculative["default"]}"' in page
    assert _options(page, "task") == (["", *task["enum"]], "")  # "" leaves workload.task out: the chat default
    assert _options(page, "prefix-reuse") == (["", "system_prompt", "hit_rate"], "")
