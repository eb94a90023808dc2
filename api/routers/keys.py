"""`GET /v1/keys` (list_api_keys) and `DELETE /v1/keys/{key_id}` (revoke_api_key): the admin's view
of the API keys issued with `headroom keys create`. A revoked key answers 401 from its next request.
The service's HEADROOM_ADMIN_KEY is not stored, so it is neither listed nor revocable here."""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations at runtime.

from typing import Any

from fastapi import APIRouter, Response, status

from api.deps import AdminKeyDep, KeysDep
from api.problems import problem_responses
from api.schemas.keys import ApiKeyList
from catalog.api_keys import StoredApiKey, key_id_of
from catalog.errors import NotFoundError

router = APIRouter(tags=["keys"])


def _read(key: StoredApiKey) -> dict[str, Any]:
    return {
        "id": key.id,
        "prefix": key.prefix,
        "role": key.role,
        "created_at": key.created_at,
        "last_used_at": key.last_used_at,
        "revoked_at": key.revoked_at,
        "revoked": key.revoked_at is not None,
    }


@router.get(
    "/keys",
    response_model=ApiKeyList,
    name="list_api_keys",
    summary="API keys: prefix, role, created, last used, revoked",
    responses=problem_responses(401, 403),
)
def list_api_keys(keys: KeysDep, _admin: AdminKeyDep) -> dict[str, Any]:
    listed = keys.list()
    return {"items": [_read(key) for key in listed], "total": len(listed)}


@router.delete(
    "/keys/{key_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    name="revoke_api_key",
    summary="Revoke an API key",
    response_class=Response,
    responses=problem_responses(401, 403, 404),
)
def revoke_api_key(key_id: str, keys: KeysDep, _admin: AdminKeyDep) -> Response:
    """The key answers 401 from its next request and stays listed with `revoked_at`. `key_id` is the
    id GET /v1/keys lists (its prefix `hr_<id>` is accepted too). Revoking twice is not an error."""
    if keys.revoke(key_id_of(key_id)) is None:
        raise NotFoundError(f"no API key with id {key_id!r}", kind="api_key", id=key_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
