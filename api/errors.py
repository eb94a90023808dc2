"""Errors raised by the HTTP edge itself (authentication, malformed headers).

    ApiError
    ├── AuthenticationError      no API key, or one the service does not know    → 401
    ├── PermissionDeniedError    a valid key whose role may not do this          → 403
    ├── MalformedHeaderError     a header that cannot be parsed (If-Match: abc)  → 400
    ├── NotReadyError            database unreachable or not migrated (/readyz)   → 503
    └── RequestTimeoutError      planning work ran past HEADROOM_REQUEST_TIMEOUT_S → 503

Like the planner's and the catalog's errors they carry `detail` and `extensions`; `headers`
are sent with the problem response (WWW-Authenticate on a 401).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ApiError(Exception):
    title: str = "Request error"

    def __init__(self, detail: str, *, headers: Mapping[str, str] | None = None, **extensions: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.headers: dict[str, str] = dict(headers or {})
        self.extensions: dict[str, Any] = extensions


class AuthenticationError(ApiError):
    title = "Authentication required"

    def __init__(self, detail: str, **extensions: Any) -> None:
        super().__init__(detail, headers={"WWW-Authenticate": 'Bearer realm="headroom"'}, **extensions)


class PermissionDeniedError(ApiError):
    title = "Permission denied"


class MalformedHeaderError(ApiError):
    title = "Malformed header"


class NotReadyError(ApiError):
    """The process is up but cannot serve: database unreachable or not migrated to head."""

    title = "Not ready"


class BrokerUnavailableError(ApiError):
    """An operation could not be handed to the task broker (Redis unreachable): it is stored failed, with this reason."""

    title = "Broker unavailable"


class RequestTimeoutError(ApiError):
    """Planning work did not finish within the service's request timeout (api.observability.Deadline)."""

    title = "Request timeout"

    def __init__(self, *, timeout_s: float) -> None:
        super().__init__(
            f"The planning work did not finish within this service's request timeout of {timeout_s:g} s "
            "(HEADROOM_REQUEST_TIMEOUT_S): ask for less work (fewer candidates or simulated requests) or retry later.",
            timeout_s=timeout_s,
        )
