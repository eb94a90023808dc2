"""`Idempotency-Key` on POSTs (and PUTs) that create something: a retry with the same key and the
same body gets the first answer again (status, body, Location) and creates nothing; the same key
with another body is a 409 problem.

A route takes `IdempotencyDep` and calls it twice:

    if (replayed := idempotency.replay(body)) is not None:
        return replayed
    ...create, in the request's session...
    return idempotency.respond(body, JSONResponse(content, status_code=201, headers={"Location": ...}))

`respond` stores the key, the request's hash and the answer in the same session (so in the same
transaction as what the route created) and flushes at once. Two concurrent requests with one key
meet at the key's primary key: the loser's insert fails (PostgreSQL makes it wait for the winner's
commit; SQLite serialises writers), its whole transaction — the plan it made included — is rolled
back, and it answers with the winner's stored answer; if the winner has not committed yet, a 409
"in progress" with Retry-After. Failed requests (problem responses) store nothing: a retry runs again.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Annotated, Any

from fastapi import Depends, Header, Request, Response
from pydantic import BaseModel
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from api.deps import SessionDep
from api.errors import ApiError, MalformedHeaderError
from catalog.deployments import IdempotencyKeys, StoredAnswer

IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
#: Headers of the first answer that a replay repeats.
REPLAYED_HEADERS = ("location", "content-type", "etag")
_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")  # visible ASCII, as the key column holds at most 200
#: Seconds a client should wait before retrying a key whose first request is still running.
RETRY_AFTER_S = 1


class IdempotencyConflictError(ApiError):
    """The key was used for a different request, or its first request has not finished (409)."""

    title = "Idempotency key conflict"


def request_hash(method: str, path: str, body: Any) -> str:
    """SHA-256 of the method, path and canonical JSON of the parsed body (key order and whitespace do not matter)."""
    payload = body.model_dump(mode="json") if isinstance(body, BaseModel) else body
    canonical = json.dumps({"method": method, "path": path, "body": payload}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


class Idempotency:
    """One request's idempotency key (None without the header) on the request's session."""

    def __init__(self, session: Session, key: str | None, method: str, path: str) -> None:
        self._session = session
        self.key = key
        self._method = method
        self._path = path

    def replay(self, body: Any) -> Response | None:
        """The first answer to this key when it was for the same request; 409 when it was for another."""
        if self.key is None:
            return None
        stored = IdempotencyKeys(self._session).find(self.key)
        return None if stored is None else self._answer(stored, request_hash(self._method, self._path, body))

    def respond(self, body: Any, response: Response) -> Response:
        """Store `response` as this key's answer (same transaction as the route's writes) and return it;
        when a concurrent request with the key won, roll this one back and return the winner's answer."""
        if self.key is None:
            return response
        digest = request_hash(self._method, self._path, body)
        headers = {name: value for name, value in response.headers.items() if name.lower() in REPLAYED_HEADERS}
        try:
            IdempotencyKeys(self._session).save(
                key=self.key, request_hash=digest, method=self._method, path=self._path, status=response.status_code,
                headers=headers, body=bytes(response.body).decode("utf-8"),
            )
        except (IntegrityError, OperationalError):
            self._session.rollback()  # undo everything this request created: the winner's answer stands
            stored = IdempotencyKeys(self._session).find(self.key)
            if stored is None:
                raise IdempotencyConflictError(
                    f"A request with Idempotency-Key {self.key!r} is still being processed; retry in a moment.",
                    headers={"Retry-After": str(RETRY_AFTER_S)}, reason="in_progress",
                ) from None
            return self._answer(stored, digest)
        return response

    def _answer(self, stored: StoredAnswer, digest: str) -> Response:
        if stored.request_hash != digest or stored.method != self._method or stored.path != self._path:
            raise IdempotencyConflictError(
                f"Idempotency-Key {self.key!r} was used for a different request ({stored.method} {stored.path} "
                f"at {stored.created_at.isoformat()}); use a new key for a new request.",
                reason="different_request",
            )
        headers = {name: value for name, value in stored.headers.items() if name.lower() != "content-type"}
        headers[REPLAYED_HEADER] = "true"
        return Response(content=stored.body, status_code=stored.status, headers=headers,
                        media_type=stored.headers.get("content-type", "application/json"))


def _idempotency(
    request: Request,
    session: SessionDep,
    key: Annotated[
        str | None,
        Header(
            alias=IDEMPOTENCY_HEADER,
            description=(
                "A key of your choosing (e.g. a UUID, at most 200 visible ASCII characters): a retry with the same "
                "key and body returns the first answer and creates nothing new; the same key with another body is 409."
            ),
        ),
    ] = None,
) -> Idempotency:
    if key is not None and not _KEY.match(key):
        raise MalformedHeaderError(f"{IDEMPOTENCY_HEADER} must be 1 to 200 visible ASCII characters, got {key!r}.")
    return Idempotency(session, key, request.method, request.url.path)


IdempotencyDep = Annotated[Idempotency, Depends(_idempotency)]
