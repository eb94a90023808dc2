"""CRUD for GPU prices by provider: `/v1/prices`.

A price is addressed by provider and GPU in the path and `region` in the query (absent: the
provider's list price). Writes need an admin key and honour If-Match like the other catalog
resources. operationIds: list_prices, get_price, create_price, replace_price, update_price,
delete_price.
"""

# No `from __future__ import annotations`: FastAPI reads the routes' annotations at runtime.

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response, status
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse

from api.deps import AdminKeyDep, IfMatchDep, PricesDep, ReaderDep, etag
from api.idempotency import IdempotencyDep
from api.problems import problem_responses
from api.routers.catalog import Limit, Offset, etag_responses, with_etag
from api.schemas.catalog import changes, record
from api.schemas.prices import (
    PriceCreate,
    PricePage,
    PricePatch,
    PriceRead,
    PriceUpdate,
)

ProviderPath = Annotated[str, Path(min_length=1, max_length=64, description="The provider's slug, e.g. runpod.")]
GpuPath = Annotated[str, Path(min_length=1, max_length=64, description="The GPU's catalog slug.")]
RegionQuery = Annotated[
    str | None, Query(min_length=1, max_length=64, description="The price's region; absent for the provider's list price.")
]

router = APIRouter(prefix="/prices", tags=["prices"])


def _location(stored: dict[str, Any]) -> str:
    region = f"?region={stored['region']}" if stored["region"] else ""
    return f"/v1/prices/{stored['provider']}/{stored['gpu']}{region}"


@router.get("", response_model=PricePage, summary="List GPU prices", responses=problem_responses(401, 422))
def list_prices(
    prices: PricesDep,
    _reader: ReaderDep,
    provider: Annotated[str | None, Query(max_length=64, description="Only this provider's prices.")] = None,
    gpu: Annotated[str | None, Query(max_length=64, description="Only prices of this GPU slug.")] = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> Any:
    """Prices ordered by provider, GPU and region, one page at a time; `total` counts every match."""
    page = prices.list_prices(provider=provider, gpu=gpu, limit=limit, offset=offset)
    return {"items": page.items, "total": page.total, "limit": limit, "offset": offset}


@router.post(
    "", response_model=PriceRead, status_code=status.HTTP_201_CREATED, summary="Add a GPU price",
    responses=etag_responses(201, 401, 403, 409, 422),
)  # fmt: skip
def create_price(body: PriceCreate, prices: PricesDep, idempotency: IdempotencyDep, _admin: AdminKeyDep) -> Any:
    """Needs an admin key. 409 if the provider already prices that GPU in that region; 422 lists
    every bad field (an unknown GPU among them)."""
    if (replayed := idempotency.replay(body)) is not None:
        return replayed
    stored = prices.create_price(record(body))
    headers = {"Location": _location(stored), "ETag": etag(stored["version"])}
    content = jsonable_encoder(PriceRead.model_validate(stored))
    return idempotency.respond(body, JSONResponse(content, status_code=status.HTTP_201_CREATED, headers=headers))


@router.get("/{provider}/{gpu}", response_model=PriceRead, summary="Get one GPU price", responses=etag_responses(200, 401, 404))
def get_price(
    provider: ProviderPath, gpu: GpuPath, prices: PricesDep, _reader: ReaderDep, response: Response, region: RegionQuery = None
) -> Any:
    """The provider's price of the GPU (in `region`, if given); the ETag header carries its version."""
    return with_etag(response, prices.get_price(provider, gpu, region))


@router.put(
    "/{provider}/{gpu}", response_model=PriceRead, summary="Replace a GPU price",
    responses=etag_responses(200, 400, 401, 403, 404, 412, 422),
)  # fmt: skip
def replace_price(
    provider: ProviderPath,
    gpu: GpuPath,
    body: PriceUpdate,
    prices: PricesDep,
    _admin: AdminKeyDep,
    if_version: IfMatchDep,
    response: Response,
    region: RegionQuery = None,
) -> Any:
    """Needs an admin key. Replaces every member but provider, GPU and region; with
    `If-Match: "<version>"` only if nobody changed the price since it was read (412 otherwise)."""
    stored = prices.update_price(provider, gpu, region, record(body), if_version=if_version)
    return with_etag(response, stored)


@router.patch(
    "/{provider}/{gpu}", response_model=PriceRead, summary="Change members of a GPU price",
    responses=etag_responses(200, 400, 401, 403, 404, 412, 422),
)  # fmt: skip
def update_price(
    provider: ProviderPath,
    gpu: GpuPath,
    body: PricePatch,  # type: ignore[valid-type]
    prices: PricesDep,
    _admin: AdminKeyDep,
    if_version: IfMatchDep,
    response: Response,
    region: RegionQuery = None,
) -> Any:
    """Needs an admin key. Changes only the members sent; an explicit null clears an optional
    price. Honours If-Match like PUT."""
    stored = prices.update_price(provider, gpu, region, changes(body), if_version=if_version)
    return with_etag(response, stored)


@router.delete(
    "/{provider}/{gpu}", status_code=status.HTTP_204_NO_CONTENT, summary="Delete a GPU price",
    responses=problem_responses(400, 401, 403, 404, 412), response_class=Response,
)  # fmt: skip
def delete_price(
    provider: ProviderPath,
    gpu: GpuPath,
    prices: PricesDep,
    _admin: AdminKeyDep,
    if_version: IfMatchDep,
    region: RegionQuery = None,
) -> None:
    """Needs an admin key. With If-Match, only if the price is still at that version (412 otherwise)."""
    prices.delete_price(provider, gpu, region, if_version=if_version)
