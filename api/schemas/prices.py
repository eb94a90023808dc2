"""Request and response bodies of `/v1/prices`: what one provider charges for one GPU, per GPU-hour.

Families as the other catalog resources: `PriceCreate` (POST, the whole record), `PriceUpdate`
(PUT, every member but the provider, GPU and region the path names), `PricePatch` (PATCH, only
the members sent), `PriceRead` (plus version, created_at, updated_at), `PricePage`; and
`PriceOverride`, a request's own prices for one GPU in a plan, fleet plan or what-if.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date

from pydantic import ConfigDict, Field

from api.schemas.catalog import MAX_PRICE, MAX_TEXT_LENGTH, Page, Slug, _Input, _partial, _Record
from catalog import prices as catalog_prices


class PriceFields(_Input):
    on_demand: float = Field(
        ge=0, le=MAX_PRICE, description="On-demand price in USD per GPU-hour (an instance's price ÷ its GPUs)."
    )
    reserved_1y: float | None = Field(
        default=None, ge=0, le=MAX_PRICE, description="Effective 1-year committed price in USD per GPU-hour; null if not known."
    )
    reserved_3y: float | None = Field(
        default=None, ge=0, le=MAX_PRICE, description="Effective 3-year committed price in USD per GPU-hour; null if not known."
    )
    spot: float | None = Field(
        default=None, ge=0, le=MAX_PRICE, description="Spot (interruptible) price in USD per GPU-hour; null if not offered."
    )
    as_of: date = Field(strict=False, description="Date the prices were read (YYYY-MM-DD).")
    source: str = Field(
        min_length=1,
        max_length=MAX_TEXT_LENGTH,
        description="Price list the numbers come from (page, URL, date); says which values are derived and how; at most 4,000 characters.",
    )


class _Identity(_Input):
    provider: Slug = Field(description="Who sells the GPU-hours: a slug such as runpod, aws, coreweave.")
    gpu: Slug = Field(description="The GPU's catalog slug.")
    region: Slug | None = Field(default=None, description="Region the price holds in; null for the provider's list price.")


class PriceCreate(PriceFields, _Identity):
    """A new price (POST /v1/prices). Prices are at most USD 1,000 per GPU-hour: ~70× the dearest
    GPU-hour listed today (~$14, B200), and small enough that replicas × price stays well inside the
    MILP solver's range."""


class PriceUpdate(PriceFields):
    """A full replacement of a price's members (PUT /v1/prices/{provider}/{gpu}); provider, GPU and region stay."""


PricePatch = _partial(PriceUpdate, "PricePatch", "Members of a price to change (PATCH /v1/prices/{provider}/{gpu}).")


class PriceRead(_Record, PriceCreate):
    """A stored price."""

    model_config = ConfigDict(strict=False)


class PricePage(Page[PriceRead]):
    """A page of prices, by provider, GPU and region."""


class PriceOverride(_Input):
    """USD per GPU-hour replacing the provider's price of one GPU for this request (any of them);
    a GPU the provider does not price needs `on_demand` here to be planned at all."""

    on_demand: float | None = Field(default=None, gt=0, le=MAX_PRICE, description="On-demand USD per GPU-hour.")
    reserved_1y: float | None = Field(default=None, ge=0, le=MAX_PRICE, description="One-year reserved USD per GPU-hour.")
    reserved_3y: float | None = Field(default=None, ge=0, le=MAX_PRICE, description="Three-year reserved USD per GPU-hour.")
    spot: float | None = Field(default=None, ge=0, le=MAX_PRICE, description="Spot USD per GPU-hour.")


def price_overrides(prices: Mapping[str, PriceOverride]) -> dict[str, catalog_prices.PriceOverride]:
    """A request's `prices` as the catalog's overrides."""
    return {gpu: catalog_prices.PriceOverride(**price.model_dump()) for gpu, price in prices.items()}


class PlanPriceRead(_Input):
    """The price one GPU of a plan was costed at, and where it came from."""

    gpu: str
    provider: str = Field(description="Whose price list: the request's `provider`, or the service's default provider.")
    region: str | None = Field(description="Region of the price; null for the provider's list price.")
    price_usd_per_hour: float = Field(description="USD per GPU-hour the plan's cost uses.")
    kind: str = Field(description="Which of the provider's prices: `on_demand`.")
    as_of: date | None = Field(
        strict=False, description="Date of the provider's price; null for a price the request gave in full."
    )
    source: str = Field(description="The provider's source, or `request` for a price the request gave.")
    override: bool = Field(description="Whether the request's `prices` replaced (part of) the provider's price.")
