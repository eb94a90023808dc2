"""`Idempotency-Key` on POSTs (and PUTs) that create something: a retry with the same key and the
same body gets the first answer again (status, body, Location) and creates nothing; the same key
with another body is a 409 problem.

A route takes `IdempotencyDep` and calls it twice:

    if (replayed := idempotency.replay(body)) is not None:
        return replayed
    ...create, in the request's session...
    return idempotency.respond(body, JSONResponse(content, status_code=201, headers={"Location": ...}))

Keys belong to the caller: the scope is the API key's id (the bootstrap admin key has a scope of
its own, a request without a key is "anonymous"), so two callers never meet on a key, and a
problem never describes another caller's request. A key answers retries for the idempotency
window (`HEADROOM_IDEMPOTENCY_WINDOW_S`, default 24 h) from its first request; after that it is
free again.

`replay` claims the key before any work (a row without an answer, committed at once): a
concurrent request with the key waits for the first one's answer and replays it (up to its own
request timeout; then 409 "in progress" with Retry-After), instead of racing it to create the
same thing. `respond` stores the answer in the work's own transaction, so the claim turns into an
answer exactly when the work commits. A request that fails drops its claim (a retry runs again);
a claim left by a process that died is taken over once it is older than `LEASE_TIMEOUTS` request
timeouts, since no request runs that long. Failed requests (problem responses) store nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any

from fastapi import Depends, Header, Request, Response
from pydantic import BaseModel
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session

from api.deps import SessionDep, SettingsDep
from api.errors import ApiError, MalformedHeaderError
from api.settings import Settings
from catalog.deployments import IdempotencyKeys, StoredAnswer

IDEMPOTENCY_HEADER = "Idempotency-Key"
REPLAYED_HEADER = "Idempotent-Replayed"
#: Headers of the first answer that a replay repeats.
REPLAYED_HEADERS = ("location", "content-type", "etag")
_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")  # visible ASCII, as the key column holds at most 200
#: Seconds a client should wait before retrying a key whose first request is still running.
RETRY_AFTER_S = 1
#: How often a request waiting for the first request with its key looks for the answer.
POLL_INTERVAL_S = 0.05
#: A claim older than this many request timeouts belongs to a request that can no longer answer
#: (it would have timed out, and its transaction with it): a process killed mid-request.
LEASE_TIMEOUTS = 2
ANONYMOUS_SCOPE = "anonymous"
BOOTSTRAP_ADMIN_SCOPE = "bootstrap-admin"
#: The public id inside a stored API key (catalog.repository issues `hr_<16 hex>_<secret>`).
_STORED_KEY_ID = re.compile(r"^hr_([0-9a-f]{16})_")


class IdempotencyConflictError(ApiError):
    """The key was used for a different request, or its first request has not finished (409)."""

    title = "Idempotency key conflict"


def request_hash(method: str, path: str, body: Any) -> str:
    """SHA-256 of the method, path and canonical JSON of the parsed body (key order and whitespace do not matter)."""
    payload = body.model_dump(mode="json") if isinstance(body, BaseModel) else body
    canonical = json.dumps(
        {"method": method, "path": path, "body": payload}, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode()).hexdigest()


def caller_scope(authorization: str | None, settings: Settings) -> str:
    """Whose keys a request's are: "key:<id>" for a stored API key, the bootstrap admin key's own
    scope, or "anonymous". Routes taking a key have already authenticated it."""
    scheme, _, token = (authorization or "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        return ANONYMOUS_SCOPE
    token = token.strip()
    admin = settings.admin_key
    if admin is not None and hmac.compare_digest(
        hashlib.sha256(token.encode()).digest(), hashlib.sha256(admin.encode()).digest()
    ):
        return BOOTSTRAP_ADMIN_SCOPE
    match = _STORED_KEY_ID.match(token)
    return f"key:{match.group(1)}" if match else ANONYMOUS_SCOPE


class Idempotency:
    """One request's idempotency key (None without the header) on the request's session."""

    def __init__(
        self,
        session: Session,
        key: str | None,
        method: str,
        path: str,
        *,
        scope: str,
        window_s: float,
        wait_s: float,
        lease_s: float,
    ) -> None:
        self._session = session
        self.key = key
        self.scope = scope
        self._method = method
        self._path = path
        self._window = timedelta(seconds=window_s)
        self._wait_s = wait_s
        self._lease = timedelta(seconds=lease_s)
        self._token: str | None = None  # set while this request holds the key's claim

    def replay(self, body: Any) -> Response | None:
        """None when this request may run (it now holds the key); the first answer when the key
        was answered for the same request (waiting for it while it is in progress); 409 when the
        key was used for another request."""
        if self.key is None:
            return None
        digest = request_hash(self._method, self._path, body)
        keys = IdempotencyKeys(self._session)
        token = secrets.token_hex(16)
        give_up_at = time.monotonic() + self._wait_s
        while True:
            now = datetime.now(UTC)
            try:
                stored = keys.claim(
                    scope=self.scope,
                    key=self.key,
                    request_hash=digest,
                    method=self._method,
                    path=self._path,
                    claim_token=token,
                    since=now - self._window,
                )
                if stored is None or (
                    stored.status is None
                    and stored.created_at < now - self._lease
                    and self._same(stored, digest)
                    and keys.take_over(stored, claim_token=token)
                ):
                    self._session.commit()
                    self._token = token
                    return None
            except IntegrityError:  # a concurrent request claimed the key first: read its claim
                self._session.rollback()
                continue
            self._session.rollback()
            if not self._same(stored, digest):
                raise IdempotencyConflictError(
                    f"Idempotency-Key {self.key!r} was used for a different request (another method, path or body) "
                    "within the idempotency window; use a new key for a new request.",
                    reason="different_request",
                )
            if stored.status is not None:
                return self._replayed(stored)
            if time.monotonic() >= give_up_at:
                raise IdempotencyConflictError(
                    f"A request with Idempotency-Key {self.key!r} is still being processed; retry in a moment.",
                    headers={"Retry-After": str(RETRY_AFTER_S)},
                    reason="in_progress",
                )
            time.sleep(POLL_INTERVAL_S)

    def respond(self, body: Any, response: Response) -> Response:
        """Store `response` as this key's answer (same transaction as the route's writes) and return it."""
        if self.key is None or self._token is None:
            return response
        headers = {name: value for name, value in response.headers.items() if name.lower() in REPLAYED_HEADERS}
        answered = IdempotencyKeys(self._session).answer(
            scope=self.scope,
            key=self.key,
            claim_token=self._token,
            status=response.status_code,
            headers=headers,
            body=bytes(response.body).decode("utf-8"),
        )
        self._token = None
        if not answered:  # the claim was taken over (this request outlived its lease): the other one's work stands
            self._session.rollback()
            raise IdempotencyConflictError(
                f"A later request with Idempotency-Key {self.key!r} took over after this one ran too long; "
                "retry in a moment for its answer.",
                headers={"Retry-After": str(RETRY_AFTER_S)},
                reason="in_progress",
            )
        return response

    def release(self) -> None:
        """After a failure: undo the request's work and drop its claim, so a retry runs again."""
        if self.key is None or self._token is None:
            return
        token, self._token = self._token, None
        try:
            self._session.rollback()
            IdempotencyKeys(self._session).release(scope=self.scope, key=self.key, claim_token=token)
            self._session.commit()
        except SQLAlchemyError:  # the database is what failed: the claim lapses after its lease instead
            self._session.rollback()

    def _same(self, stored: StoredAnswer, digest: str) -> bool:
        return stored.request_hash == digest and stored.method == self._method and stored.path == self._path

    @staticmethod
    def _replayed(stored: StoredAnswer) -> Response:
        headers = {name: value for name, value in stored.headers.items() if name.lower() != "content-type"}
        headers[REPLAYED_HEADER] = "true"
        return Response(
            content=stored.body,
            status_code=stored.status or 200,
            headers=headers,
            media_type=stored.headers.get("content-type", "application/json"),
        )


def _idempotency(
    request: Request,
    session: SessionDep,
    settings: SettingsDep,
    key: Annotated[
        str | None,
        Header(
            alias=IDEMPOTENCY_HEADER,
            description=(
                "A key of your choosing (e.g. a UUID, at most 200 visible ASCII characters), scoped to your API key: "
                "a retry with the same key and body within the idempotency window (24 h unless the service sets "
                "HEADROOM_IDEMPOTENCY_WINDOW_S) returns the first answer and creates nothing new; the same key with "
                "another body is 409."
            ),
        ),
    ] = None,
) -> Iterator[Idempotency]:
    if key is not None and not _KEY.match(key):
        raise MalformedHeaderError(f"{IDEMPOTENCY_HEADER} must be 1 to 200 visible ASCII characters, got {key!r}.")
    idempotency = Idempotency(
        session,
        key,
        request.method,
        request.url.path,
        scope=caller_scope(request.headers.get("authorization"), settings),
        window_s=settings.idempotency_window_s,
        wait_s=settings.request_timeout_s,
        lease_s=LEASE_TIMEOUTS * settings.request_timeout_s,
    )
    try:
        yield idempotency
    except BaseException:
        idempotency.release()
        raise


IdempotencyDep = Annotated[Idempotency, Depends(_idempotency, scope="function")]
