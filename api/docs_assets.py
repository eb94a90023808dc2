"""Interactive API documentation that works offline: `/docs` (Swagger UI) and `/redoc` (ReDoc)
load their JavaScript, CSS and favicon from `/static/`, served from the files vendored in
`api/static/` (see its README for versions and licences), never from a CDN.

The app must be built with `docs_url=None, redoc_url=None` (FastAPI's own pages point at
cdn.jsdelivr.net); `install_docs(app)` adds these instead.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

STATIC_DIR = Path(__file__).resolve().parent / "static"
STATIC_PATH = "/static"

SWAGGER_JS = f"{STATIC_PATH}/swagger-ui/swagger-ui-bundle.js"
SWAGGER_CSS = f"{STATIC_PATH}/swagger-ui/swagger-ui.css"
FAVICON = f"{STATIC_PATH}/swagger-ui/favicon-32x32.png"
REDOC_JS = f"{STATIC_PATH}/redoc/redoc.standalone.js"

#: Swagger UI otherwise shows a badge loaded from validator.swagger.io; null turns it off.
SWAGGER_UI_PARAMETERS = {"validatorUrl": None}


def install_docs(app: FastAPI) -> None:
    """Mount the vendored assets at /static and add the /docs and /redoc pages (not in the schema)."""
    app.mount(STATIC_PATH, StaticFiles(directory=STATIC_DIR), name="static")

    def _prefix(request: Request) -> str:
        # Behind a proxy that mounts the service under a path, links must carry that path.
        return str(request.scope.get("root_path", "")).rstrip("/")

    @app.get("/docs", include_in_schema=False)
    def swagger_ui(request: Request) -> HTMLResponse:
        prefix = _prefix(request)
        return get_swagger_ui_html(
            openapi_url=f"{prefix}{app.openapi_url}",
            title=f"{app.title} - Swagger UI",
            swagger_js_url=f"{prefix}{SWAGGER_JS}",
            swagger_css_url=f"{prefix}{SWAGGER_CSS}",
            swagger_favicon_url=f"{prefix}{FAVICON}",
            swagger_ui_parameters=SWAGGER_UI_PARAMETERS,
        )

    @app.get("/redoc", include_in_schema=False)
    def redoc(request: Request) -> HTMLResponse:
        prefix = _prefix(request)
        return get_redoc_html(
            openapi_url=f"{prefix}{app.openapi_url}",
            title=f"{app.title} - ReDoc",
            redoc_js_url=f"{prefix}{REDOC_JS}",
            redoc_favicon_url=f"{prefix}{FAVICON}",
            with_google_fonts=False,
        )
