"""Cloud instance types: the `instance_types` table's records, and the instances a plan can buy.

A GPU can rarely be rented alone: clouds sell whole instances (8 H100s sharing an NVSwitch, one
L4 with 4 vCPUs). An instance-type record is what one provider charges for one such instance, in
USD per instance-hour:
`{provider, name, region, gpu, gpus, nvlink_domain, network_gbit_per_s, vcpus, ram_gib,
on_demand_usd_per_hour, reserved_1y_usd_per_hour, as_of, source}` plus the read-only `version`,
`created_at`, `updated_at`. `name` is the provider's instance name in lowercase (Azure's
`Standard_ND96isr_H100_v5` is `standard_nd96isr_h100_v5`: Azure size names are case-insensitive).
`region` null is the provider's list price (stored as ""). An instance type is addressed by
(provider, name, region). Writes bump the catalog version, like every catalog write, inside the
caller's transaction. Deleting the GPU deletes its instance types (the foreign key cascades).

`InstanceTypes.instance_type_specs` is what a plan packs replicas into: one spec per instance name
of one provider, at its list price, else its alphabetically first region (as `Prices.price_specs`
chooses a GPU's price).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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
from catalog.models import GpuRow, InstanceTypeRow
from catalog.records import MAX_TEXT_LENGTH, _Checker, _run, merged, raise_collected
from catalog.repository import (
    INT32_MAX,
    MAX_PAGE_SIZE,
    Catalog,
    Page,
    _now,
    _read_only,
    _storable,
)
from planner.specs import MAX_PRICE_USD_PER_HOUR, InstanceTypeSpec

#: The stored region of a provider-wide list price (NULL would not be unique on either backend).
NO_REGION = ""

#: Most GPUs one instance carries: 72, the GB200/GB300 NVL72 rack, the largest NVLink domain sold
#: as one unit (NVIDIA GB200 NVL72 datasheet; AWS sells it whole as u-p6e-gb200x72).
MAX_INSTANCE_GPUS = 72
#: Scale-out network: at most 100,000 Gbit/s, ~30× the largest per-instance network sold today
#: (3,200 Gbit/s of EFA on p5.48xlarge, AWS instance docs); a typo guard the planner does not use.
MAX_NETWORK_GBIT_PER_S = 100_000.0
#: Host RAM: at most 65,536 GiB, twice the largest EC2 instance (u7in-32tb, 32 TiB; AWS docs).
MAX_RAM_GIB = 65_536.0


def canonical_instance_type(record: object, *, path: str = "", errors: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """An instance-type record in canonical form (see catalog.records): `gpus` GPUs of type `gpu`
    in one instance, `nvlink_domain` of them sharing one NVLink/Infinity-Fabric domain, sold by
    `provider` at `on_demand_usd_per_hour` per instance-hour (at most $1,000 per GPU-hour, the
    planner's bound on a GPU's price, times `gpus`)."""

    def build(check: _Checker) -> dict[str, Any]:
        gpus = check.integer("gpus", ge=1, le=MAX_INSTANCE_GPUS)
        domain = check.integer("nvlink_domain", ge=1, le=MAX_INSTANCE_GPUS)
        bound = MAX_PRICE_USD_PER_HOUR * (gpus or MAX_INSTANCE_GPUS)
        canonical = {
            "provider": check.slug("provider"),
            "name": check.slug("name"),
            "region": check.slug("region", nullable=True),
            "gpu": check.slug("gpu"),
            "gpus": gpus,
            "nvlink_domain": domain,
            "network_gbit_per_s": check.number("network_gbit_per_s", nullable=True, gt=0, le=MAX_NETWORK_GBIT_PER_S),
            "vcpus": check.integer("vcpus", nullable=True, ge=1, le=INT32_MAX),
            "ram_gib": check.number("ram_gib", nullable=True, gt=0, le=MAX_RAM_GIB),
            "on_demand_usd_per_hour": check.number("on_demand_usd_per_hour", gt=0, le=bound),
            "reserved_1y_usd_per_hour": check.number("reserved_1y_usd_per_hour", nullable=True, gt=0, le=bound),
            "as_of": check.iso_date("as_of"),
            "source": check.text("source", max_length=MAX_TEXT_LENGTH),
        }
        if gpus is not None and domain is not None and domain > gpus:
            check.error("nvlink_domain", f"must be at most gpus ({gpus}), got {domain}")
        return canonical

    return _run("instance type", record, path, build, errors)


def _instance_record(row: InstanceTypeRow, gpu_slug: str) -> dict[str, Any]:
    return {
        "provider": row.provider,
        "name": row.name,
        "region": row.region or None,
        "gpu": gpu_slug,
        "gpus": row.gpus,
        "nvlink_domain": row.nvlink_domain,
        "network_gbit_per_s": row.network_gbit_per_s,
        "vcpus": row.vcpus,
        "ram_gib": row.ram_gib,
        "on_demand_usd_per_hour": row.on_demand_usd_per_hour,
        "reserved_1y_usd_per_hour": row.reserved_1y_usd_per_hour,
        "as_of": row.as_of.isoformat(),
        "source": row.source,
    }


def _apply_instance(row: InstanceTypeRow, record: Mapping[str, Any], gpu_id: int) -> None:
    row.provider = record["provider"]
    row.name = record["name"]
    row.region = record["region"] or NO_REGION
    row.gpu_id = gpu_id
    row.gpus = record["gpus"]
    row.nvlink_domain = record["nvlink_domain"]
    row.network_gbit_per_s = record["network_gbit_per_s"]
    row.vcpus = record["vcpus"]
    row.ram_gib = record["ram_gib"]
    row.on_demand_usd_per_hour = record["on_demand_usd_per_hour"]
    row.reserved_1y_usd_per_hour = record["reserved_1y_usd_per_hour"]
    row.as_of = date.fromisoformat(record["as_of"])
    row.source = record["source"]


def _describe(provider: str, name: str, region: str | None) -> str:
    return f"instance type {name} at {provider}" + (f" in {region}" if region else "")


class InstanceTypes:
    """The instance-type table inside one session; the caller owns the transaction, as with `Catalog`."""

    def __init__(self, session: Session) -> None:
        self.session = session

    #: The record validator, for `Catalog.import_catalog` (which cannot import this module at load).
    canonical = staticmethod(canonical_instance_type)

    # ---- records ---------------------------------------------------------------------------------

    def list_instance_types(
        self, *, provider: str | None = None, gpu: str | None = None, limit: int = 50, offset: int = 0
    ) -> Page:
        """Instance types by provider, name and region, filtered by provider and/or GPU slug."""
        problems = [
            {"field": name, "message": f"must be an integer in [0, {bound}]"}
            for name, value, bound in (("limit", limit, MAX_PAGE_SIZE), ("offset", offset, INT32_MAX))
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= bound
        ]
        raise_collected("listing", problems)
        if not all(_storable(value) for value in (provider, gpu) if value is not None):
            return Page(items=[], total=0)
        filters = [InstanceTypeRow.provider == provider] if provider is not None else []
        filters += [GpuRow.slug == gpu] if gpu is not None else []
        page = self.session.execute(
            select(InstanceTypeRow, GpuRow.slug, func.count().over().label("total"))
            .join(GpuRow, GpuRow.id == InstanceTypeRow.gpu_id)
            .where(*filters)
            .order_by(InstanceTypeRow.provider, InstanceTypeRow.name, InstanceTypeRow.region)
            .limit(limit)
            .offset(offset)
        ).all()
        if page:
            total = page[0].total
        else:
            total = (
                self.session.scalar(
                    select(func.count())
                    .select_from(InstanceTypeRow)
                    .join(GpuRow, GpuRow.id == InstanceTypeRow.gpu_id)
                    .where(*filters)
                )
                or 0
            )
        return Page(items=[{**_instance_record(row, slug), **_read_only(row)} for row, slug, _ in page], total=total)

    def get_instance_type(self, provider: str, name: str, region: str | None = None) -> dict[str, Any]:
        row, slug = self._row(provider, name, region)
        return {**_instance_record(row, slug), **_read_only(row)}

    def create_instance_type(self, record: Mapping[str, Any]) -> dict[str, Any]:
        canonical = canonical_instance_type(record)
        gpu = self._gpu(canonical["gpu"])
        if self._find(canonical["provider"], canonical["name"], canonical["region"]) is not None:
            raise AlreadyExistsError(
                f"an {_describe(canonical['provider'], canonical['name'], canonical['region'])} exists already",
                kind="instance_type",
                provider=canonical["provider"],
                name=canonical["name"],
                region=canonical["region"],
            )
        now = _now()
        row = InstanceTypeRow(created_at=now, updated_at=now)
        _apply_instance(row, canonical, gpu.id)
        self.session.add(row)
        self._flush(canonical)
        Catalog(self.session)._bump_catalog_version()
        return {**_instance_record(row, gpu.slug), **_read_only(row)}

    def update_instance_type(
        self, provider: str, name: str, region: str | None, record: Mapping[str, Any], *, if_version: int | None = None
    ) -> dict[str, Any]:
        """Merge `record`'s members into the stored instance type (a full record replaces it); the
        provider, name and region identify it and cannot change."""
        row, slug = self._row(provider, name, region)
        self._check_version(row, if_version)
        stored = _instance_record(row, slug)
        errors = [
            {"field": key, "message": f"cannot change {stored[key]!r} to {record[key]!r}: create a new instance type"}
            for key in ("provider", "name", "region")
            if isinstance(record, Mapping) and key in record and record[key] != stored[key]
        ]
        canonical = canonical_instance_type(merged(stored, record), errors=errors)
        raise_collected("instance type", errors)
        gpu = self._gpu(canonical["gpu"])
        _apply_instance(row, canonical, gpu.id)
        row.updated_at = _now()
        self._flush(canonical)
        Catalog(self.session)._bump_catalog_version()
        return {**_instance_record(row, gpu.slug), **_read_only(row)}

    def delete_instance_type(self, provider: str, name: str, region: str | None = None, *, if_version: int | None = None) -> None:
        row, _ = self._row(provider, name, region)
        self._check_version(row, if_version)
        self.session.delete(row)
        self._flush({"provider": provider, "name": name, "region": region})
        Catalog(self.session)._bump_catalog_version()

    def export_instance_types(self) -> list[dict[str, Any]]:
        """Every instance-type record without read-only members, by provider, name and region."""
        return [
            _instance_record(row, slug)
            for row, slug in self.session.execute(
                select(InstanceTypeRow, GpuRow.slug)
                .join(GpuRow, GpuRow.id == InstanceTypeRow.gpu_id)
                .order_by(InstanceTypeRow.provider, InstanceTypeRow.name, InstanceTypeRow.region)
            ).all()
        ]

    def upsert_instance_type(self, record: Mapping[str, Any]) -> str:
        """Create or replace one canonical instance-type record (catalog import); "created",
        "updated" or "unchanged". The caller bumps the catalog version once for the whole import."""
        self.session.flush()  # GPUs created by this import need their ids
        gpu = self._gpu(record["gpu"])
        row = self._find(record["provider"], record["name"], record["region"])
        if row is None:
            now = _now()
            row = InstanceTypeRow(created_at=now, updated_at=now)
            _apply_instance(row, record, gpu.id)
            self.session.add(row)
            return "created"
        if _instance_record(row, self._slug_of(row)) == dict(record):
            return "unchanged"
        _apply_instance(row, record, gpu.id)
        row.updated_at = _now()
        return "updated"

    # ---- the instances a plan buys ---------------------------------------------------------------

    def instance_type_specs(self, provider: str, gpus: Sequence[str] | None = None) -> tuple[InstanceTypeSpec, ...]:
        """One spec per instance name `provider` sells (of the GPU slugs `gpus`, when given): its
        list price, else its alphabetically first region; ordered by name. Empty when the provider
        sells none of them."""
        if not _storable(provider) or (gpus is not None and not all(_storable(slug) for slug in gpus)):
            return ()
        filters = [InstanceTypeRow.provider == provider]
        filters += [GpuRow.slug.in_(list(gpus))] if gpus is not None else []
        chosen: dict[str, tuple[InstanceTypeRow, str]] = {}
        for row, slug in self.session.execute(
            select(InstanceTypeRow, GpuRow.slug)
            .join(GpuRow, GpuRow.id == InstanceTypeRow.gpu_id)
            .where(*filters)
            .order_by(InstanceTypeRow.name, InstanceTypeRow.region)
        ).all():
            chosen.setdefault(row.name, (row, slug))  # "" sorts first: the list price wins
        return tuple(
            InstanceTypeSpec(
                provider=row.provider,
                name=row.name,
                gpu=slug,
                gpus=row.gpus,
                nvlink_domain=row.nvlink_domain,
                usd_per_hour=row.on_demand_usd_per_hour,
                region=row.region,
            )
            for row, slug in chosen.values()
        )

    # ---- internals -------------------------------------------------------------------------------

    def _gpu(self, slug: str) -> GpuRow:
        row = self.session.scalar(select(GpuRow).where(GpuRow.slug == slug)) if _storable(slug) else None
        if row is None:
            raise InvalidRecordError(
                "invalid instance type record: gpu", errors=[{"field": "gpu", "message": f"no GPU {slug!r}"}]
            )
        return row

    def _slug_of(self, row: InstanceTypeRow) -> str:
        return str(self.session.scalar(select(GpuRow.slug).where(GpuRow.id == row.gpu_id)))

    def _find(self, provider: str, name: str, region: str | None) -> InstanceTypeRow | None:
        return self.session.scalar(
            select(InstanceTypeRow)
            .where(
                InstanceTypeRow.provider == provider,
                InstanceTypeRow.name == name,
                InstanceTypeRow.region == (region or NO_REGION),
            )
            .execution_options(populate_existing=True)
        )

    def _row(self, provider: str, name: str, region: str | None) -> tuple[InstanceTypeRow, str]:
        missing = NotFoundError(
            f"no {_describe(provider, name, region)}", kind="instance_type", provider=str(provider), name=str(name), region=region
        )
        if not all(_storable(value) for value in (provider, name, region or NO_REGION)):
            raise missing
        row = self._find(provider, name, region)
        if row is None:
            raise missing
        return row, self._slug_of(row)

    @staticmethod
    def _check_version(row: InstanceTypeRow, if_version: int | None) -> None:
        if if_version is not None and row.version != if_version:
            raise VersionConflictError(
                f"{_describe(row.provider, row.name, row.region or None)} is at version {row.version}, not {if_version}",
                kind="instance_type",
                provider=row.provider,
                name=row.name,
                region=row.region or None,
                expected_version=if_version,
                current_version=row.version,
            )

    def _flush(self, record: Mapping[str, Any]) -> None:
        Catalog(self.session)._flush(what=_describe(record["provider"], record["name"], record["region"]))
