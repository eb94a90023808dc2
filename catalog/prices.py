"""GPU prices by provider: the `gpu_prices` table's records, and the prices a plan is made with.

A price record is what one provider charges for one GPU, in USD per GPU-hour:
`{provider, gpu, region, on_demand, reserved_1y, reserved_3y, spot, as_of, source}` plus the
read-only `version`, `created_at`, `updated_at`. `region` null is the provider's list price (stored
as ""). A price is addressed by (provider, gpu, region). Writes bump the catalog version, like
every catalog write, inside the caller's transaction.

`Prices.price_specs` is the one place a plan's prices are chosen: every GPU at one provider,
a request's override on top, and a GPU neither prices left out with a note, never priced from
another provider.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from catalog.errors import (
    AlreadyExistsError,
    InvalidRecordError,
    NotFoundError,
    VersionConflictError,
)
from catalog.models import GpuPriceRow, GpuRow
from catalog.records import canonical_price, merged, raise_collected
from catalog.repository import (
    INT32_MAX,
    MAX_PAGE_SIZE,
    Catalog,
    Page,
    _now,
    _read_only,
    _storable,
)
from planner.errors import PlannerInputError
from planner.specs import GpuSpec

#: The stored region of a provider-wide list price (NULL would not be unique on either backend).
NO_REGION = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class PriceOverride:
    """A request's prices for one GPU, USD per GPU-hour; None keeps the provider's price."""

    on_demand: float | None = None
    reserved_1y: float | None = None
    reserved_3y: float | None = None
    spot: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChosenPrice:
    """The price a plan used for one GPU and where it came from."""

    gpu: str
    provider: str
    region: str | None
    on_demand_usd_per_hour: float
    reserved_1y_usd_per_hour: float | None
    reserved_3y_usd_per_hour: float | None
    spot_usd_per_hour: float | None
    as_of: str | None
    source: str
    override: bool

    def read(self) -> dict[str, Any]:
        """The JSON a plan response reports (the on-demand price: what a plan is costed at)."""
        return {
            "gpu": self.gpu,
            "provider": self.provider,
            "region": self.region,
            "price_usd_per_hour": self.on_demand_usd_per_hour,
            "kind": "on_demand",
            "as_of": self.as_of,
            "source": self.source,
            "override": self.override,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class Pricing:
    """GPU specs carrying one provider's prices, the price each used, and the GPUs left out."""

    provider: str
    specs: tuple[GpuSpec, ...]
    prices: dict[str, ChosenPrice]
    notes: tuple[str, ...]


def _price_record(row: GpuPriceRow, gpu_slug: str) -> dict[str, Any]:
    return {
        "provider": row.provider,
        "gpu": gpu_slug,
        "region": row.region or None,
        "on_demand": row.on_demand_usd_per_hour,
        "reserved_1y": row.reserved_1y_usd_per_hour,
        "reserved_3y": row.reserved_3y_usd_per_hour,
        "spot": row.spot_usd_per_hour,
        "as_of": row.as_of.isoformat(),
        "source": row.source,
    }


def _apply_price(row: GpuPriceRow, record: Mapping[str, Any], gpu_id: int) -> None:
    row.provider = record["provider"]
    row.gpu_id = gpu_id
    row.region = record["region"] or NO_REGION
    row.on_demand_usd_per_hour = record["on_demand"]
    row.reserved_1y_usd_per_hour = record["reserved_1y"]
    row.reserved_3y_usd_per_hour = record["reserved_3y"]
    row.spot_usd_per_hour = record["spot"]
    row.as_of = date.fromisoformat(record["as_of"])
    row.source = record["source"]


def _describe(provider: str, gpu: str, region: str | None) -> str:
    return f"price of {gpu} at {provider}" + (f" in {region}" if region else "")


class Prices:
    """The price table inside one session; the caller owns the transaction, as with `Catalog`."""

    def __init__(self, session: Session) -> None:
        self.session = session

    # ---- records ---------------------------------------------------------------------------------

    def list_prices(self, *, provider: str | None = None, gpu: str | None = None, limit: int = 50, offset: int = 0) -> Page:
        """Prices by provider, GPU slug and region, filtered by provider and/or GPU slug."""
        problems = [
            {"field": name, "message": f"must be an integer in [0, {bound}]"}
            for name, value, bound in (("limit", limit, MAX_PAGE_SIZE), ("offset", offset, INT32_MAX))
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= bound
        ]
        raise_collected("listing", problems)
        if not all(_storable(value) for value in (provider, gpu) if value is not None):
            return Page(items=[], total=0)
        filters = [GpuPriceRow.provider == provider] if provider is not None else []
        filters += [GpuRow.slug == gpu] if gpu is not None else []
        page = self.session.execute(
            select(GpuPriceRow, GpuRow.slug, func.count().over().label("total"))
            .join(GpuRow, GpuRow.id == GpuPriceRow.gpu_id)
            .where(*filters)
            .order_by(GpuPriceRow.provider, GpuRow.slug, GpuPriceRow.region)
            .limit(limit)
            .offset(offset)
        ).all()
        if page:
            total = page[0].total
        else:
            total = (
                self.session.scalar(
                    select(func.count()).select_from(GpuPriceRow).join(GpuRow, GpuRow.id == GpuPriceRow.gpu_id).where(*filters)
                )
                or 0
            )
        return Page(items=[{**_price_record(row, slug), **_read_only(row)} for row, slug, _ in page], total=total)

    def get_price(self, provider: str, gpu: str, region: str | None = None) -> dict[str, Any]:
        row, slug = self._row(provider, gpu, region)
        return {**_price_record(row, slug), **_read_only(row)}

    def create_price(self, record: Mapping[str, Any]) -> dict[str, Any]:
        canonical = canonical_price(record)
        gpu = self._gpu(canonical["gpu"])
        if self._find(canonical["provider"], gpu.id, canonical["region"]) is not None:
            raise AlreadyExistsError(
                f"a {_describe(canonical['provider'], canonical['gpu'], canonical['region'])} exists already",
                kind="price",
                provider=canonical["provider"],
                gpu=canonical["gpu"],
                region=canonical["region"],
            )
        now = _now()
        row = GpuPriceRow(created_at=now, updated_at=now)
        _apply_price(row, canonical, gpu.id)
        self.session.add(row)
        self._flush(canonical)
        Catalog(self.session)._bump_catalog_version()
        return {**_price_record(row, gpu.slug), **_read_only(row)}

    def update_price(
        self, provider: str, gpu: str, region: str | None, record: Mapping[str, Any], *, if_version: int | None = None
    ) -> dict[str, Any]:
        """Merge `record`'s members into the stored price (a full record replaces it); the
        provider, GPU and region identify the price and cannot change."""
        row, slug = self._row(provider, gpu, region)
        self._check_version(row, slug, if_version)
        stored = _price_record(row, slug)
        errors = [
            {"field": key, "message": f"cannot change {stored[key]!r} to {record[key]!r}: create a new price"}
            for key in ("provider", "gpu", "region")
            if isinstance(record, Mapping) and key in record and record[key] != stored[key]
        ]
        canonical = canonical_price(merged(stored, record), errors=errors)
        raise_collected("GPU price", errors)
        _apply_price(row, canonical, row.gpu_id)
        row.updated_at = _now()
        self._flush(canonical)
        Catalog(self.session)._bump_catalog_version()
        return {**_price_record(row, slug), **_read_only(row)}

    def delete_price(self, provider: str, gpu: str, region: str | None = None, *, if_version: int | None = None) -> None:
        row, slug = self._row(provider, gpu, region)
        self._check_version(row, slug, if_version)
        self.session.delete(row)
        self._flush({"provider": provider, "gpu": gpu, "region": region})
        Catalog(self.session)._bump_catalog_version()

    def providers(self) -> list[str]:
        """Every provider some price names, alphabetically."""
        return list(self.session.scalars(select(GpuPriceRow.provider).distinct().order_by(GpuPriceRow.provider)))

    def export_prices(self) -> list[dict[str, Any]]:
        """Every price record without read-only members, by provider, GPU and region."""
        return [
            _price_record(row, slug)
            for row, slug in self.session.execute(
                select(GpuPriceRow, GpuRow.slug)
                .join(GpuRow, GpuRow.id == GpuPriceRow.gpu_id)
                .order_by(GpuPriceRow.provider, GpuRow.slug, GpuPriceRow.region)
            ).all()
        ]

    def upsert_price(self, record: Mapping[str, Any]) -> str:
        """Create or replace one canonical price record (catalog import); "created", "updated" or
        "unchanged". The caller bumps the catalog version once for the whole import."""
        self.session.flush()  # GPUs created by this import need their ids
        gpu = self._gpu(record["gpu"])
        row = self._find(record["provider"], gpu.id, record["region"])
        if row is None:
            now = _now()
            row = GpuPriceRow(created_at=now, updated_at=now)
            _apply_price(row, record, gpu.id)
            self.session.add(row)
            return "created"
        if _price_record(row, gpu.slug) == dict(record):
            return "unchanged"
        _apply_price(row, record, gpu.id)
        row.updated_at = _now()
        return "updated"

    # ---- the prices a plan uses ------------------------------------------------------------------

    def price_specs(
        self, specs: Sequence[GpuSpec], provider: str, overrides: Mapping[str, PriceOverride] | None = None
    ) -> Pricing:
        """`specs` carrying `provider`'s prices (its list price, else its alphabetically first
                region), each overridden by the request's `overrides` where given. A GPU with neither a
                price there nor an override's on-demand price, or whose price the planner cannot use (above
        planner/specs.py's bound: stored before it), is left out with a note. NotFoundError for
                a provider no price names (the known ones listed); PlannerInputError when nothing is left."""
        overrides = overrides or {}
        known = self.providers()
        if provider not in known:
            raise NotFoundError(
                f"no prices for provider {provider!r}; known providers: {', '.join(known) or 'none (add one with POST /v1/prices)'}",
                kind="provider",
                slug=provider,
                known_providers=known,
            )
        slugs = [spec.slug for spec in specs]
        listed: dict[str, dict[str, Any]] = {}
        rows = self.session.execute(
            select(GpuPriceRow, GpuRow.slug)
            .join(GpuRow, GpuRow.id == GpuPriceRow.gpu_id)
            .where(GpuPriceRow.provider == provider, GpuRow.slug.in_(slugs))
            .order_by(GpuRow.slug, GpuPriceRow.region)
        ).all()
        for row, slug in rows:
            listed.setdefault(slug, _price_record(row, slug))  # "" sorts first: the list price wins
        kept: list[GpuSpec] = []
        chosen: dict[str, ChosenPrice] = {}
        notes: list[str] = []
        for spec in specs:
            price = _chosen(spec.slug, provider, listed.get(spec.slug), overrides.get(spec.slug))
            if price is None:
                notes.append(
                    f"{spec.slug} has no price at {provider}: left out of the plan (add one with POST /v1/prices, "
                    f"name another provider, or give prices.{spec.slug}.on_demand in the request)"
                )
                continue
            try:
                priced = dataclasses.replace(
                    spec,
                    price_usd_per_hour_on_demand=price.on_demand_usd_per_hour,
                    price_usd_per_hour_reserved_1y=price.reserved_1y_usd_per_hour,
                )
            except PlannerInputError as unusable:  # a price stored before the bounds, or by hand
                notes.append(
                    f"{spec.slug}'s price at {provider} is outside what the planner can use ({unusable.detail}): "
                    f"left out of the plan (correct it with PUT /v1/prices/{provider}/{spec.slug})"
                )
                continue
            kept.append(priced)
            chosen[spec.slug] = price
        if specs and not kept:
            raise PlannerInputError(
                f"none of the GPUs considered ({', '.join(slugs)}) has a price at {provider}: name a provider that "
                f"prices them (known: {', '.join(known)}), or give `prices` for them in the request",
                provider=provider,
                unpriced_gpus=slugs,
                known_providers=known,
            )
        return Pricing(provider=provider, specs=tuple(kept), prices=chosen, notes=tuple(notes))

    # ---- internals -------------------------------------------------------------------------------

    def _gpu(self, slug: str) -> GpuRow:
        row = self.session.scalar(select(GpuRow).where(GpuRow.slug == slug)) if _storable(slug) else None
        if row is None:
            raise InvalidRecordError("invalid GPU price record: gpu", errors=[{"field": "gpu", "message": f"no GPU {slug!r}"}])
        return row

    def _find(self, provider: str, gpu_id: int, region: str | None) -> GpuPriceRow | None:
        return self.session.scalar(
            select(GpuPriceRow)
            .where(GpuPriceRow.provider == provider, GpuPriceRow.gpu_id == gpu_id, GpuPriceRow.region == (region or NO_REGION))
            .execution_options(populate_existing=True)
        )

    def _row(self, provider: str, gpu: str, region: str | None) -> tuple[GpuPriceRow, str]:
        missing = NotFoundError(
            f"no {_describe(provider, gpu, region)}", kind="price", provider=str(provider), gpu=str(gpu), region=region
        )
        if not all(_storable(value) for value in (provider, gpu, region or NO_REGION)):
            raise missing
        gpu_id = self.session.scalar(select(GpuRow.id).where(GpuRow.slug == gpu))
        row = None if gpu_id is None else self._find(provider, gpu_id, region)
        if row is None:
            raise missing
        return row, gpu

    @staticmethod
    def _check_version(row: GpuPriceRow, gpu: str, if_version: int | None) -> None:
        if if_version is not None and row.version != if_version:
            raise VersionConflictError(
                f"{_describe(row.provider, gpu, row.region or None)} is at version {row.version}, not {if_version}",
                kind="price",
                provider=row.provider,
                gpu=gpu,
                region=row.region or None,
                expected_version=if_version,
                current_version=row.version,
            )

    def _flush(self, record: Mapping[str, Any]) -> None:
        Catalog(self.session)._flush(what=_describe(record["provider"], record["gpu"], record["region"]))


def _chosen(gpu: str, provider: str, listed: Mapping[str, Any] | None, override: PriceOverride | None) -> ChosenPrice | None:
    """The provider's price of `gpu` with the request's override on top; None when neither
    gives an on-demand price."""
    if listed is None and (override is None or override.on_demand is None):
        return None
    base: Mapping[str, Any] = listed or {
        "region": None,
        "on_demand": None,
        "reserved_1y": None,
        "reserved_3y": None,
        "spot": None,
        "as_of": None,
    }
    if override is None:
        return ChosenPrice(
            gpu=gpu,
            provider=provider,
            region=base["region"],
            on_demand_usd_per_hour=base["on_demand"],
            reserved_1y_usd_per_hour=base["reserved_1y"],
            reserved_3y_usd_per_hour=base["reserved_3y"],
            spot_usd_per_hour=base["spot"],
            as_of=base["as_of"],
            source=str(base["source"]),
            override=False,
        )

    def pick(name: str) -> Any:
        given = getattr(override, name)
        return base[name] if given is None else given

    replaced = [name for name in ("on_demand", "reserved_1y", "reserved_3y", "spot") if getattr(override, name) is not None]
    source = "request" if listed is None else f"request ({', '.join(replaced)}) over {provider}'s price: {listed['source']}"
    return ChosenPrice(
        gpu=gpu,
        provider=provider,
        region=base["region"],
        on_demand_usd_per_hour=pick("on_demand"),
        reserved_1y_usd_per_hour=pick("reserved_1y"),
        reserved_3y_usd_per_hour=pick("reserved_3y"),
        spot_usd_per_hour=pick("spot"),
        as_of=base["as_of"],
        source=source,
        override=True,
    )
