"""Headroom's REST service: FastAPI app factory, routers, request/response schemas, problem
documents, and the `headroom` command line."""

#: The service version in the OpenAPI document; equals pyproject.toml's (a test checks).
__version__ = "0.1.0"
