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
