"""Request and response bodies of `/v1/instance-types`: what one provider charges for one whole
cloud instance (its GPUs, NVLink domain, network, vCPUs and RAM), per instance-hour.

Families as the other catalog resources: `InstanceTypeCreate` (POST, the whole record),
`InstanceTypeUpdate` (PUT, every member but the provider, name and region the path names),
`InstanceTypePatch` (PATCH, only the members sent), `InstanceTypeRead` (plus version, created_at,
updated_at), `InstanceTypePage`.
"""

from __future__ import annotations

from datetime import date

from pydantic import ConfigDict, Field

from api.schemas.catalog import MAX_PRICE, MAX_TEXT_LENGTH, Page, Slug, _Input, _partial, _Record
from catalog.instances import MAX_INSTANCE_GPUS, MAX_NETWORK_GBIT_PER_S, MAX_RAM_GIB

#: The dearest instance-hour a record can state: the planner's $1,000 per GPU-hour bound times the
#: most GPUs an instance carries; catalog.instances checks the tighter per-GPU bound on each record.
MAX_INSTANCE_PRICE = MAX_PRICE * MAX_INSTANCE_GPUS


class InstanceTypeFields(_Input):
    gpu: Slug = Field(description="The catalog slug of the GPU the instance carries.")
    gpus: int = Field(ge=1, le=MAX_INSTANCE_GPUS, description="GPUs in one instance (1–72).")
    nvlink_domain: int = Field(
        ge=1,
        le=MAX_INSTANCE_GPUS,
        description="GPUs of the instance that share one NVLink/Infinity-Fabric domain (1 for PCIe-only GPUs); at most `gpus`. "
        "A replica of tensor-parallel degree tp fits into the instance only when tp is at most this.",
    )
    network_gbit_per_s: float | None = Field(
        default=None,
        gt=0,
        le=MAX_NETWORK_GBIT_PER_S,
        description="Scale-out network per instance in Gbit/s; null if not published.",
    )
    vcpus: int | None = Field(default=None, ge=1, le=2**31 - 1, description="vCPUs per instance; null if not published.")
    ram_gib: float | None = Field(
        default=None, gt=0, le=MAX_RAM_GIB, description="Host memory per instance in GiB; null if not published."
    )
    on_demand_usd_per_hour: float = Field(
        gt=0, le=MAX_INSTANCE_PRICE, description="On-demand price in USD per instance-hour (the whole instance, not per GPU)."
    )
    reserved_1y_usd_per_hour: float | None = Field(
        default=None,
        gt=0,
        le=MAX_INSTANCE_PRICE,
        description="Effective 1-year committed price in USD per instance-hour; null if not known.",
    )
    as_of: date = Field(strict=False, description="Date the price was read (YYYY-MM-DD).")
    source: str = Field(
        min_length=1,
        max_length=MAX_TEXT_LENGTH,
        description="Price list and instance documentation the numbers come from (page, URL, date); at most 4,000 characters.",
    )


class _Identity(_Input):
    provider: Slug = Field(description="Who sells the instance: a slug such as aws, gcp, azure, oracle, coreweave, lambda.")
    name: Slug = Field(description="The provider's instance name in lowercase, e.g. p5.48xlarge or standard_nd96isr_h100_v5.")
    region: Slug | None = Field(default=None, description="Region the price holds in; null for the provider's list price.")


class InstanceTypeCreate(InstanceTypeFields, _Identity):
    """A new instance type (POST /v1/instance-types)."""


class InstanceTypeUpdate(InstanceTypeFields):
    """A full replacement of an instance type's members (PUT /v1/instance-types/{provider}/{name}); provider, name and region stay."""


InstanceTypePatch = _partial(
    InstanceTypeUpdate, "InstanceTypePatch", "Members of an instance type to change (PATCH /v1/instance-types/{provider}/{name})."
)


class InstanceTypeRead(_Record, InstanceTypeCreate):
    """A stored instance type."""

    model_config = ConfigDict(strict=False)


class InstanceTypePage(Page[InstanceTypeRead]):
    """A page of instance types, by provider, name and region."""
