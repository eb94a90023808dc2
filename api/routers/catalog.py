"""CRUD for the catalog: `/v1/gpus`, `/v1/models`, `/v1/quantizations`.

The three resources behave alike, so `_record_routes` adds get / create / replace / update /
delete to a resource's router; the list routes are written out because their filters differ.
operationIds are the function names: list_gpus, get_gpu, create_gpu, replace_gpu, update_gpu,
delete_gpu, and the same for models and quantizations.
"""

# No `from __future__ import annotations`: FastAPI reads the closures' annotations at runtime.

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Response, status
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from api.deps import AdminKeyDep, CatalogDep, IfMatchDep, ReaderDep, etag
from api.idempotency import IdempotencyDep
from api.problems import problem_responses
from api.schemas.catalog import (
    Datatype,
    GpuCreate,
    GpuPage,
    GpuPatch,
    GpuRead,
    GpuUpdate,
    ModelCreate,
    ModelPage,
    ModelPatch,
    ModelRead,
    ModelUpdate,
    QuantizationCreate,
    QuantizationPage,
    QuantizationPatch,
    QuantizationRead,
    QuantizationUpdate,
    changes,
    record,
)
from catalog.errors import VersionConflictError
from catalog.repository import Catalog

Limit = Annotated[int, Query(ge=1, le=500, description="Page size: at most this many records.")]
Offset = Annotated[int, Query(ge=0, le=2**31 - 1, description="Records to skip before the page starts.")]
SlugPath = Annotated[str, Path(min_length=1, max_length=64, description="The record's slug.")]

_ETAG_HEADER = {
    "ETag": {
        "description": 'The record\'s version as a strong entity tag, e.g. `"3"`; send it back in If-Match.',
        "schema": {"type": "string"},
    }
}


def etag_responses(success: int, *problems: int) -> dict[int | str, dict[str, Any]]:
    """The documented answers of a route returning one versioned record: `success` with its ETag
    header, and the problems it can answer (the catalog, instance and price routers share them)."""
    return {success: {"headers": _ETAG_HEADER}, **problem_responses(*problems)}


#: Tries of an unconditional write that keeps losing races; each lost try means another writer's
#: write landed, so this many bounds the wait behind a burst of that many concurrent writers.
UNCONDITIONAL_WRITE_TRIES = 64


def _write(catalog: Catalog, if_version: int | None, write: Callable[[], Any]) -> Any:
    """`write()`. An unconditional write (no If-Match) that loses a race to a concurrent write of
    the same record (it read version n, the other committed n + 1 first) is run again on the
    record as it now is: last writer wins, and only a write that named a version gets 412. A
    record deleted meanwhile is then 404, as it would have been a moment later."""
    for attempt in range(1 if if_version is not None else UNCONDITIONAL_WRITE_TRIES):
        if attempt:
            catalog.session.rollback()
        try:
            return write()
        except VersionConflictError:
            if if_version is not None or attempt == UNCONDITIONAL_WRITE_TRIES - 1:
                raise
    raise AssertionError("unreachable")


def with_etag(response: Response, stored: dict[str, Any]) -> dict[str, Any]:
    """`stored`, its version set as the response's ETag (what If-Match sends back)."""
    response.headers["ETag"] = etag(stored["version"])
    return stored


def _record_routes(
    router: APIRouter,
    *,
    singular: str,
    plural: str,
    label: str,
    create_schema: type[BaseModel],
    update_schema: type[BaseModel],
    patch_schema: type[BaseModel],
    read_schema: type[BaseModel],
) -> None:
    """Add get/create/replace/update/delete routes for one catalog resource to `router`."""
    handlers = _record_handlers(
        singular=singular,
        plural=plural,
        create_schema=create_schema,
        update_schema=update_schema,
        patch_schema=patch_schema,
        read_schema=read_schema,
    )
    _add_record_routes(router, handlers, singular=singular, label=label, read_schema=read_schema)


@dataclass(frozen=True, slots=True, kw_only=True)
class _RecordHandlers:
    """The five endpoint functions of one catalog resource, before they are routed."""

    get: Callable[..., Any]
    create: Callable[..., Any]
    replace: Callable[..., Any]
    update: Callable[..., Any]
    delete: Callable[..., Any]


def _record_handlers(
    *,
    singular: str,
    plural: str,
    create_schema: type[BaseModel],
    update_schema: type[BaseModel],
    patch_schema: type[BaseModel],
    read_schema: type[BaseModel],
) -> _RecordHandlers:
    """The endpoint functions of one resource: closures, so each body annotation names that
    resource's schema (FastAPI reads them at runtime to validate and document the body)."""

    def method(catalog: Catalog, verb: str) -> Callable[..., Any]:
        bound: Callable[..., Any] = getattr(catalog, f"{verb}_{singular}")  # Catalog.get_gpu, Catalog.create_model, ...
        return bound

    def get_record(slug: SlugPath, catalog: CatalogDep, _reader: ReaderDep, response: Response) -> Any:
        return with_etag(response, method(catalog, "get")(slug))

    def create_record(body: create_schema, catalog: CatalogDep, idempotency: IdempotencyDep, _admin: AdminKeyDep) -> Any:  # type: ignore[valid-type]
        if (replayed := idempotency.replay(body)) is not None:
            return replayed
        stored = method(catalog, "create")(record(body))
        headers = {"Location": f"/v1/{plural}/{stored['slug']}", "ETag": etag(stored["version"])}
        content = jsonable_encoder(read_schema.model_validate(stored))
        return idempotency.respond(body, JSONResponse(content, status_code=status.HTTP_201_CREATED, headers=headers))

    def replace_record(
        slug: SlugPath,
        body: update_schema,  # type: ignore[valid-type]
        catalog: CatalogDep,
        _admin: AdminKeyDep,
        if_version: IfMatchDep,
        response: Response,
    ) -> Any:
        stored = _write(
            catalog, if_version, lambda: method(catalog, "update")(slug, record(body, slug=slug), if_version=if_version)
        )
        return with_etag(response, stored)

    def update_record(
        slug: SlugPath,
        body: patch_schema,  # type: ignore[valid-type]
        catalog: CatalogDep,
        _admin: AdminKeyDep,
        if_version: IfMatchDep,
        response: Response,
    ) -> Any:
        return with_etag(
            response, _write(catalog, if_version, lambda: method(catalog, "update")(slug, changes(body), if_version=if_version))
        )

    def delete_record(slug: SlugPath, catalog: CatalogDep, _admin: AdminKeyDep, if_version: IfMatchDep) -> None:
        _write(catalog, if_version, lambda: method(catalog, "delete")(slug, if_version=if_version))

    return _RecordHandlers(
        get=get_record, create=create_record, replace=replace_record, update=update_record, delete=delete_record
    )


def _add_record_routes(
    router: APIRouter, handlers: _RecordHandlers, *, singular: str, label: str, read_schema: type[BaseModel]
) -> None:
    """Route one resource's handlers with their names, summaries, documented responses and descriptions."""
    router.add_api_route(
        "/{slug}", handlers.get, methods=["GET"], name=f"get_{singular}", response_model=read_schema,
        summary=f"Get one {label}", responses=etag_responses(200, 401, 404),
        description=f"The {label} with this slug; the ETag header carries its version.",
    )  # fmt: skip
    router.add_api_route(
        "", handlers.create, methods=["POST"], name=f"create_{singular}", response_model=read_schema,
        status_code=status.HTTP_201_CREATED, summary=f"Add a {label}", responses=etag_responses(201, 401, 403, 409, 422),
        description=(
            "Needs an admin key. 409 if the slug exists already; 422 lists every bad field. A retry with the "
            "same `Idempotency-Key` and body answers the first 201 again instead of 409."
        ),
    )  # fmt: skip
    router.add_api_route(
        "/{slug}", handlers.replace, methods=["PUT"], name=f"replace_{singular}", response_model=read_schema,
        summary=f"Replace a {label}", responses=etag_responses(200, 400, 401, 403, 404, 412, 422),
        description=(
            "Needs an admin key. Replaces every member but the slug. With `If-Match: \"<version>\"` "
            "the write happens only if nobody changed the record since it was read (412 otherwise)."
        ),
    )  # fmt: skip
    router.add_api_route(
        "/{slug}", handlers.update, methods=["PATCH"], name=f"update_{singular}", response_model=read_schema,
        summary=f"Change members of a {label}", responses=etag_responses(200, 400, 401, 403, 404, 412, 422),
        description=(
            "Needs an admin key. Changes only the members sent; nested blocks are replaced whole and "
            "an explicit null clears an optional member. Honours If-Match like PUT."
        ),
    )  # fmt: skip
    router.add_api_route(
        "/{slug}", handlers.delete, methods=["DELETE"], name=f"delete_{singular}",
        status_code=status.HTTP_204_NO_CONTENT, summary=f"Delete a {label}",
        responses=problem_responses(400, 401, 403, 404, 412), response_class=Response,
        description=(
            "Needs an admin key. Deleting a GPU deletes its efficiency profiles. "
            "With If-Match, only if the record is still at that version (412 otherwise)."
        ),
    )  # fmt: skip


gpus = APIRouter(prefix="/gpus", tags=["gpus"])


@gpus.get("", response_model=GpuPage, summary="List GPUs", responses=problem_responses(401, 422))
def list_gpus(
    catalog: CatalogDep,
    _reader: ReaderDep,
    vendor: Annotated[str | None, Query(max_length=32, description="Only GPUs of this vendor (nvidia, amd).")] = None,
    architecture: Annotated[str | None, Query(max_length=32, description="Only GPUs of this architecture (hopper, …).")] = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> Any:
    """GPUs ordered by slug, one page at a time; `total` counts every match."""
    page = catalog.list_gpus(vendor=vendor, architecture=architecture, limit=limit, offset=offset)
    return {"items": page.items, "total": page.total, "limit": limit, "offset": offset}


_record_routes(
    gpus, singular="gpu", plural="gpus", label="GPU",
    create_schema=GpuCreate, update_schema=GpuUpdate, patch_schema=GpuPatch, read_schema=GpuRead,
)  # fmt: skip

models = APIRouter(prefix="/models", tags=["models"])


@models.get("", response_model=ModelPage, summary="List models", responses=problem_responses(401, 422))
def list_models(
    catalog: CatalogDep,
    _reader: ReaderDep,
    moe: Annotated[bool | None, Query(description="true: only mixture-of-experts models; false: only dense ones.")] = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> Any:
    """Models ordered by slug, one page at a time; `total` counts every match."""
    page = catalog.list_models(moe=moe, limit=limit, offset=offset)
    return {"items": page.items, "total": page.total, "limit": limit, "offset": offset}


_record_routes(
    models, singular="model", plural="models", label="model",
    create_schema=ModelCreate, update_schema=ModelUpdate, patch_schema=ModelPatch, read_schema=ModelRead,
)  # fmt: skip

quantizations = APIRouter(prefix="/quantizations", tags=["quantizations"])


@quantizations.get(
    "", response_model=QuantizationPage, summary="List quantization schemes", responses=problem_responses(401, 422)
)
def list_quantizations(
    catalog: CatalogDep,
    _reader: ReaderDep,
    compute_dtype: Annotated[Datatype | None, Query(description="Only schemes computing in this datatype.")] = None,
    limit: Limit = 50,
    offset: Offset = 0,
) -> Any:
    """Quantization schemes ordered by slug, one page at a time; `total` counts every match."""
    page = catalog.list_quantizations(compute_dtype=compute_dtype, limit=limit, offset=offset)
    return {"items": page.items, "total": page.total, "limit": limit, "offset": offset}


_record_routes(
    quantizations, singular="quantization", plural="quantizations", label="quantization scheme",
    create_schema=QuantizationCreate, update_schema=QuantizationUpdate, patch_schema=QuantizationPatch,
    read_schema=QuantizationRead,
)  # fmt: skip

#: What api/app.py includes under /v1.
router = APIRouter()
for _resource in (gpus, models, quantizations):
    router.include_router(_resource)
