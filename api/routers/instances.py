"""CRUD for cloud instance types by provider: `/v1/instance-types`.

An instance type is addressed by provider and instance name in the path and `region` in the query
(absent: the provider's list price). Reads need a reader key; writes need an admin key and honour
If-Match like the other catalog resources (api/routers/prices.py, which this follows). operationIds:
list_instance_types, get_instance_type, create_instance_type, replace_instance_type,
update_instance_type, delete_instance_type.
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations at runtime.

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response, status
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse

from api.deps import AdminKeyDep, IfMatchDep, InstanceTypesDep, ReaderDep, etag
from api.idempotency import IdempotencyDep
from api.problems import problem_responses
from api.routers.catalog import Limit, Offset, etag_responses, with_etag
from api.schemas.catalog import changes, record
from api.schemas.instances import (
    InstanceTypeCreate,
    InstanceTypePage,
    InstanceTypePatch,
    InstanceTypeRead,
    InstanceTypeUpdate,
)

ProviderPath = Annotated[str, Path(min_length=1, max_length=64, description="The provider's slug, e.g. aws.")]
NamePath = Annotated[str, Path(min_length=1, max_length=64, description="The instance name in lowercase, e.g. p5.48xlarge.")]
RegionQuery = Annotated[
    str | None,
    Query(min_length=1, max_length=64, description="The instance type's region; absent for the provider's list price."),
]

router = APIRouter(prefix="/instance-types", tags=["instance-types"])


def _location(stored: dict[str, Any]) -> str:
    region = f"?region={stored['region']}" if stored["region"] else ""
    return f"/v1/instance-types/{stored['provider']}/{stored['name']}{region}"


@router.get("", response_model=InstanceTypePage, summary="List cloud instance types", responses=problem_responses(401, 422))
def list_instance_types(
    instance_types: InstanceTypesDep,
    _reader: ReaderDep,
    provider: Annotated[str | None, Query(max_length=64, description="Only this provider's instance types.")] = None,
    gpu: Annotated[str | None, Query(max_length=64, description="Only instance types carrying this GPU slug.")] = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> Any:
    """Instance types ordered by provider, name and region, one page at a time; `total` counts every match."""
    page = instance_types.list_instance_types(provider=provider, gpu=gpu, limit=limit, offset=offset)
    return {"items": page.items, "total": page.total, "limit": limit, "offset": offset}


@router.post(
    "", response_model=InstanceTypeRead, status_code=status.HTTP_201_CREATED, summary="Add a cloud instance type",
    responses=etag_responses(201, 401, 403, 409, 422),
)  # fmt: skip
def create_instance_type(
    body: InstanceTypeCreate, instance_types: InstanceTypesDep, idempotency: IdempotencyDep, _admin: AdminKeyDep
) -> Any:
    """Needs an admin key. 409 if the provider already lists that instance in that region; 422 lists
    every bad field (an unknown GPU, or an NVLink domain larger than the instance, among them)."""
    if (replayed := idempotency.replay(body)) is not None:
        return replayed
    stored = instance_types.create_instance_type(record(body))
    headers = {"Location": _location(stored), "ETag": etag(stored["version"])}
    content = jsonable_encoder(InstanceTypeRead.model_validate(stored))
    return idempotency.respond(body, JSONResponse(content, status_code=status.HTTP_201_CREATED, headers=headers))


@router.get(
    "/{provider}/{name}", response_model=InstanceTypeRead, summary="Get one cloud instance type",
    responses=etag_responses(200, 401, 404),
)  # fmt: skip
def get_instance_type(
    provider: ProviderPath,
    name: NamePath,
    instance_types: InstanceTypesDep,
    _reader: ReaderDep,
    response: Response,
    region: RegionQuery = None,
) -> Any:
    """The provider's instance type (its price in `region`, if given); the ETag header carries its version."""
    return with_etag(response, instance_types.get_instance_type(provider, name, region))


@router.put(
    "/{provider}/{name}", response_model=InstanceTypeRead, summary="Replace a cloud instance type",
    responses=etag_responses(200, 400, 401, 403, 404, 412, 422),
)  # fmt: skip
def replace_instance_type(
    provider: ProviderPath,
    name: NamePath,
    body: InstanceTypeUpdate,
    instance_types: InstanceTypesDep,
    _admin: AdminKeyDep,
    if_version: IfMatchDep,
    response: Response,
    region: RegionQuery = None,
) -> Any:
    """Needs an admin key. Replaces every member but provider, name and region; with
    `If-Match: "<version>"` only if nobody changed the instance type since it was read (412 otherwise)."""
    stored = instance_types.update_instance_type(provider, name, region, record(body), if_version=if_version)
    return with_etag(response, stored)


@router.patch(
    "/{provider}/{name}", response_model=InstanceTypeRead, summary="Change members of a cloud instance type",
    responses=etag_responses(200, 400, 401, 403, 404, 412, 422),
)  # fmt: skip
def update_instance_type(
    provider: ProviderPath,
    name: NamePath,
    body: InstanceTypePatch,  # type: ignore[valid-type]
    instance_types: InstanceTypesDep,
    _admin: AdminKeyDep,
    if_version: IfMatchDep,
    response: Response,
    region: RegionQuery = None,
) -> Any:
    """Needs an admin key. Changes only the members sent; an explicit null clears an optional
    member. Honours If-Match like PUT."""
    stored = instance_types.update_instance_type(provider, name, region, changes(body), if_version=if_version)
    return with_etag(response, stored)


@router.delete(
    "/{provider}/{name}", status_code=status.HTTP_204_NO_CONTENT, summary="Delete a cloud instance type",
    responses=problem_responses(400, 401, 403, 404, 412), response_class=Response,
)  # fmt: skip
def delete_instance_type(
    provider: ProviderPath,
    name: NamePath,
    instance_types: InstanceTypesDep,
    _admin: AdminKeyDep,
    if_version: IfMatchDep,
    region: RegionQuery = None,
) -> None:
    """Needs an admin key. With If-Match, only if the instance type is still at that version (412 otherwise)."""
    instance_types.delete_instance_type(provider, name, region, if_version=if_version)
