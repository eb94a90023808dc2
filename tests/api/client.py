"""A synchronous test client that drives the real ASGI app through httpx's ASGI transport.

Starlette's TestClient warns (as an error under this suite's settings) when used with
`httpx` instead of `httpx2`; this client needs neither the warning nor another dependency.
Each instance owns one event loop; sync route handlers still run in anyio's thread pool.
"""

from __future__ import annotations

import asyncio
from typing import Any, Self

import httpx
from fastapi import FastAPI


class ApiClient:
    def __init__(self, app: FastAPI, *, raise_app_exceptions: bool = True, headers: dict[str, str] | None = None) -> None:
        self._loop = asyncio.new_event_loop()
        transport = httpx.ASGITransport(app=app, raise_app_exceptions=raise_app_exceptions)
        self._client = httpx.AsyncClient(transport=transport, base_url="http://testserver", headers=headers)

    def request(self, method: str, url: str, **kwargs: Any) -> httpx.Response:
        return self._loop.run_until_complete(self._client.request(method, url, **kwargs))

    def get(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("GET", url, **kwargs)

    def post(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("POST", url, **kwargs)

    def put(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("PUT", url, **kwargs)

    def patch(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("PATCH", url, **kwargs)

    def delete(self, url: str, **kwargs: Any) -> httpx.Response:
        return self.request("DELETE", url, **kwargs)

    def close(self) -> None:
        self._loop.run_until_complete(self._client.aclose())
        self._loop.run_until_complete(self._loop.shutdown_default_executor())
        self._loop.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()
