"""What a fleet plan is made of, read from the catalog in the request's thread: the GPUs, models,
precisions and prices the request names (404 for an unknown slug or efficiency profile), with the
request's price overrides applied (`fleet_inputs`), and the notes to tell the caller about them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from api.inputs import BUILT_IN_EFFICIENCIES, engine_gpus, engine_read, priced
from api.schemas.fleet_plans import FleetPlanRequest
from api.schemas.plan_response import EngineRead
from api.schemas.plans import DEFAULT_PRECISIONS
from api.schemas.prices import price_overrides
from api.settings import DEFAULT_PRICE_PROVIDER
from catalog.errors import NotFoundError
from catalog.prices import ChosenPrice
from catalog.repository import Catalog, Page
from planner.confidence import meets
from planner.errors import PlannerInputError
from planner.fleet_spec import GpuPrice, SpotOffer
from planner.specs import GpuSpec, ModelSpec, Precision
from planner.speculative import check_draft_model

_PAGE = 500

SHARE_POOLS_NOTE = (
    "share_pools is accepted but not modelled in this version: each workload runs its own replicas, "
    "so workloads of the same model never share one (the plan may cost more than a pooled one)."
)


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetInputs:
    """What the catalog and the request give the planner, and what to tell the caller about it."""

    gpus: tuple[GpuSpec, ...]
    precisions: tuple[Precision, ...]
    prices: dict[str, GpuPrice]
    price_sources: dict[str, str]
    chosen_prices: dict[str, ChosenPrice]
    spot: dict[str, SpotOffer]
    catalog_version: int
    notes: tuple[str, ...]
    #: The answer's `engine` section (api/inputs.py engine_read) when the request named an engine.
    engine: EngineRead | None = None


def _pages(list_page: Callable[..., Page]) -> Iterator[str]:
    """Every slug a catalog listing (`list_gpus`, `list_quantizations`) pages through."""
    offset = 0
    while True:
        page = list_page(limit=_PAGE, offset=offset)
        yield from (str(record["slug"]) for record in page.items)
        offset += len(page.items)
        if not page.items or offset >= page.total:
            return


def resolve_inputs(body: FleetPlanRequest, catalog: Catalog, default_provider: str = DEFAULT_PRICE_PROVIDER) -> FleetInputs:
    """GPU specs (at the request's provider's prices, else `default_provider`'s, with the
    request's overrides on top), precisions, prices and spot offers, with the same defaults as
    /v1/plans: every catalog GPU, precisions bf16/bf16 and fp8/fp8. NotFoundError for any unknown
    GPU slug the request names (constraints, inventory, prices, spot) or an unknown provider, or a
    stored efficiency profile missing for a GPU it names (unnamed GPUs lacking it are skipped).
    GPUs the provider does not price are left out with a note (catalog.prices)."""
    notes: list[str] = []
    named = set(body.inventory) | set(body.prices) | set(body.spot)
    for slug in sorted(named):
        catalog.get_gpu(slug)  # 404 for a slug the catalog lacks
    named_gpus = body.constraints.gpus is not None
    allowed = list(dict.fromkeys(body.constraints.gpus)) if body.constraints.gpus is not None else list(_pages(catalog.list_gpus))
    gpus: list[GpuSpec] = []
    prices: dict[str, GpuPrice] = {}
    sources: dict[str, str] = {}
    specs: list[GpuSpec] = []
    for slug in allowed:
        try:
            specs.append(catalog.gpu_spec(slug, body.efficiency_profile))
        except NotFoundError:
            if named_gpus or body.efficiency_profile in BUILT_IN_EFFICIENCIES:
                raise
    engine = None
    if body.engine is not None:  # each GPU at its engine profile; GPUs the engine does not run on are left out
        on_engine, choices = engine_gpus(catalog, specs, body.engine, body.efficiency_profile)
        specs = list(on_engine)
        if specs:
            engine = engine_read(body.engine, [choices[g.slug] for g in specs])
    pricing = priced(catalog, specs, body.provider or default_provider, price_overrides(body.prices))
    notes.extend(pricing.notes)
    for slug, price in body.prices.items():
        if price.reserved_3y is not None or price.spot is not None:
            notes.append(f"prices.{slug}: reserved_3y and spot are not used by fleet plans (spot offers are `spot`)")
    for spec in pricing.specs:
        slug = spec.slug
        chosen = pricing.prices[slug]
        on_demand = chosen.on_demand_usd_per_hour
        reserved = chosen.reserved_1y_usd_per_hour
        if not meets(spec.calibration_grade, body.constraints.min_confidence):
            notes.append(
                f"{slug} left out: its calibration is graded {spec.calibration_grade}, below the minimum "
                f"confidence {body.constraints.min_confidence}"
            )
            continue
        if on_demand <= 0:
            notes.append(f"{slug} has no on-demand price: left out (give one in `prices`)")
            continue
        if reserved is None:
            reserved = on_demand
            notes.append(f"{slug} has no reserved price: reserving it is priced at its on-demand price")
        gpus.append(spec)
        prices[slug] = GpuPrice(on_demand_usd_per_hour=on_demand, reserved_usd_per_hour=reserved)
        sources[slug] = "request" if chosen.override else "catalog"
    spot: dict[str, SpotOffer] = {}
    for slug, offer in body.spot.items():
        if slug not in prices:
            notes.append(f"spot offer for {slug} ignored: that GPU type is not allowed or has no price")
            continue
        spot[slug] = SpotOffer(discount_fraction=offer.discount, max_gpus=offer.max_gpus)
    if body.constraints.precisions is not None:
        precisions = tuple(catalog.precision(p.weights, p.kv_cache) for p in body.constraints.precisions)
    else:
        known = set(_pages(catalog.list_quantizations))
        precisions = tuple(catalog.precision(w, kv) for w, kv in DEFAULT_PRECISIONS if w in known and kv in known)
    if body.share_pools:
        notes.append(SHARE_POOLS_NOTE)
    return FleetInputs(
        gpus=tuple(gpus),
        precisions=precisions,
        prices=prices,
        price_sources=sources,
        chosen_prices=pricing.prices,
        spot=spot,
        catalog_version=catalog.catalog_version(),
        notes=tuple(notes),
        engine=engine,
    )


def fleet_inputs(
    body: FleetPlanRequest, catalog: Catalog, default_provider: str = DEFAULT_PRICE_PROVIDER
) -> tuple[FleetInputs, dict[str, ModelSpec]]:
    """The specs a fleet plan is made of (`resolve_inputs`) and its models, read from the catalog;
    NotFoundError, or PlannerInputError when no GPU type or no precision is left to plan with."""
    inputs = resolve_inputs(body, catalog, default_provider)
    models = {slug: catalog.model_spec(slug) for slug in dict.fromkeys(w.model for w in body.workloads)}
    for index, w in enumerate(body.workloads):
        if w.draft_model is None:
            continue
        draft = models.get(w.draft_model) or catalog.model_spec(w.draft_model)  # 404 for a slug the catalog lacks
        try:
            check_draft_model(models[w.model], draft)
        except PlannerInputError as error:  # a plan's constraints.pin.draft_model is a fleet workload's draft_model
            raise PlannerInputError(
                error.detail, constraint="draft_model", field=f"workloads[{index}].draft_model", workload=w.name
            ) from None
        models[w.draft_model] = draft
    if not inputs.gpus:
        if body.constraints.gpus is None:  # the caller constrained nothing: what is missing is the catalog's
            raise PlannerInputError(
                "the catalog has no GPU type priced at this provider that the planner can use: add "
                "one (POST /v1/gpus, POST /v1/prices) or give prices in the request",
                constraint="gpus",
            )
        raise PlannerInputError("no GPU types to plan with: allow at least one", constraint="gpus")
    if not inputs.precisions:
        if body.constraints.precisions is None:
            defaults = ", ".join(f"{w}/{kv}" for w, kv in DEFAULT_PRECISIONS)
            raise PlannerInputError(
                f"the catalog has none of the default precisions {defaults}: add their quantizations "
                "(POST /v1/quantizations) or name precisions in constraints.precisions",
                constraint="precisions",
            )
        raise PlannerInputError("no precisions to plan with: allow at least one", constraint="precisions")
    return inputs, models
