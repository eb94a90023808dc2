"""/docs and /redoc work with no internet access (issue 7 §3): every script, stylesheet and icon
they load is served by Headroom from the assets vendored in api/static/, and those assets ship
in the wheel."""

from __future__ import annotations

import glob
import tomllib
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import Path

import pytest

from api.docs_assets import STATIC_DIR
from tests.api.client import ApiClient

ROOT = Path(__file__).resolve().parents[2]
JS_TYPES = ("text/javascript", "application/javascript")


@pytest.fixture
def database_url(tmp_path: Path) -> str:
    """SQLite only: the pages do not touch the database."""
    return f"sqlite:///{tmp_path / 'headroom.db'}"


class _References(HTMLParser):
    """Every URL a page makes the browser load: script src, link href, img src, and spec-url."""

    def __init__(self) -> None:
        super().__init__()
        self.urls: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is not None and (tag, name) in {("script", "src"), ("link", "href"), ("img", "src"), ("redoc", "spec-url")}:
                self.urls.append((tag, value))


def references(html: str) -> list[tuple[str, str]]:
    parser = _References()
    parser.feed(html)
    return parser.urls


@pytest.mark.parametrize(
    ("page", "bundle_marker"),
    [("/docs", "SwaggerUIBundle"), ("/redoc", "Redoc")],
)
def test_docs_pages_load_only_local_assets(client: ApiClient, page: str, bundle_marker: str) -> None:
    response = client.get(page)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    html = response.text
    assert "cdn.jsdelivr.net" not in html and "fonts.googleapis.com" not in html and "tiangolo.com" not in html
    urls = references(html)
    kinds = {tag for tag, _ in urls}
    assert "script" in kinds and "link" in kinds, urls
    for tag, url in urls:
        assert url.startswith("/") and not url.startswith("//"), f"{page} loads {url} from another host"
        asset = client.get(url)
        assert asset.status_code == 200, url
        content_type = asset.headers["content-type"]
        if url.endswith(".js"):
            assert content_type.startswith(JS_TYPES), (url, content_type)
            assert bundle_marker in asset.text
        elif url.endswith(".css"):
            assert content_type.startswith("text/css"), (url, content_type)
        elif url.endswith(".png"):
            assert content_type == "image/png" and asset.content.startswith(b"\x89PNG")
        else:
            assert url == "/openapi.json" and asset.json()["info"]["title"] == "Headroom", url
    inline_config = "\n".join(line for line in html.splitlines() if "http://" in line or "https://" in line)
    assert inline_config == "", f"{page} names a remote URL: {inline_config}"


def test_swagger_ui_does_not_call_the_online_validator(client: ApiClient) -> None:
    assert '"validatorUrl": null' in client.get("/docs").text


def test_docs_pages_and_assets_are_not_api_operations(client: ApiClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    assert not {"/docs", "/redoc"} & paths.keys()
    assert not any(path.startswith("/static") for path in paths)
    assert client.get("/static/../api/app.py").status_code == 404


def test_docs_pages_honour_a_proxy_root_path(make_client: Callable[..., ApiClient], migrated_database_url: str) -> None:
    """Behind a proxy that serves Headroom under /headroom, the pages link to /headroom/static/…."""
    from api.app import create_app
    from api.settings import Settings

    app = create_app(Settings(database_url=migrated_database_url))
    app.root_path = "/headroom"
    client = make_client(app=app)
    urls = [url for _, url in references(client.get("/docs").text)]
    assert urls and all(url.startswith("/headroom/") for url in urls), urls


def test_vendored_assets_are_package_data_with_their_licences() -> None:
    """pyproject's package-data globs (expanded as setuptools does, with recursive glob) cover
    every file under api/static/, so a wheel ships them; each bundle sits next to its licence."""
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    package_dir = STATIC_DIR.parent
    shipped = {
        name
        for pattern in [*package_data.get("api", []), *package_data.get("*", [])]
        for name in glob.glob(pattern, root_dir=package_dir, recursive=True)
    }
    files = {path.relative_to(package_dir).as_posix() for path in STATIC_DIR.rglob("*") if path.is_file()}
    assert len(files) >= 8
    assert files - shipped == set()
    for bundle in ("swagger-ui/swagger-ui-bundle.js", "swagger-ui/swagger-ui.css", "redoc/redoc.standalone.js"):
        assert (STATIC_DIR / bundle).stat().st_size > 100_000
        assert (STATIC_DIR / bundle).parent.joinpath("LICENSE").is_file()
