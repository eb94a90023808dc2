"""Planning inputs from the catalog: the one place the planning endpoints (plans, deployments'
re-plans, what-if, capacity, fleet plans) read specs, efficiencies, prices and instance types.
Each endpoint's service resolves its specs here, then runs the pure planner function under the
request's deadline; nothing here plans, and nothing in planner/ reads the catalog.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from api.deploy import published_draft_methods
from api.instance_plans import instance_pricing
from api.schemas.plan_response import EngineRead
from api.schemas.plans import DEFAULT_PRECISIONS, PlanRequest
from api.schemas.prices import price_overrides
from api.settings import DEFAULT_PRICE_PROVIDER
from catalog.engine_profiles import EngineProfiles
from catalog.errors import NotFoundError
from catalog.instances import InstanceTypes
from catalog.prices import PriceOverride, Prices, Pricing
from catalog.repository import Catalog, GpuSpecs
from planner.engines import (
    EngineChoice,
    EngineProfile,
    LowPrecisionFactor,
    check_generation,
    choose_profile,
    narrowed_by_pin,
    parse_engine,
    priced_on,
    runs_on,
)
from planner.errors import PlannerInputError
from planner.planning import PlanningInputs
from planner.specs import GpuSpec, InstanceTypeSpec, ModelSpec, Precision
from planner.speculative import check_draft_model

#: Efficiency names every GPU has; any other name is a stored profile that some GPUs may lack.
BUILT_IN_EFFICIENCIES = ("calibrated", "ideal")
#: Upper bound on GPU types gathered when a request names none (the catalog's page limit).
MAX_GPU_TYPES = 100


def priced(
    catalog: Catalog, gpus: Sequence[GpuSpec], provider: str, overrides: Mapping[str, PriceOverride] | None = None
) -> Pricing:
    """`gpus` at `provider`'s per-GPU prices with `overrides` (a request's `prices`, already
    converted by api.schemas.prices.price_overrides) on top; 404 for an unknown provider, 422 when
    nothing is priced, unpriced GPUs left out with a note (catalog.prices)."""
    return Prices(catalog.session).price_specs(gpus, provider, overrides)


def instance_types(catalog: Catalog, provider: str) -> tuple[InstanceTypeSpec, ...]:
    """Every instance type `provider` sells (catalog.instances)."""
    return tuple(InstanceTypes(catalog.session).instance_type_specs(provider))


def gpu_specs(catalog: Catalog, profile: str, named: Sequence[str] | None) -> GpuSpecs:
    """The named GPUs (else every catalogued one, up to MAX_GPU_TYPES) at efficiency `profile`.
    A named GPU lacking a stored profile is 404; unnamed ones lacking it are skipped (their slugs
    in `.skipped`), and a stored profile no GPU has is 404."""
    # one query for the GPUs (was one per GPU: ~7 ms of SQLAlchemy per request on SQLite, docs/plan-benchmark.md)
    if named is not None:
        return catalog.gpu_specs(profile, slugs=list(dict.fromkeys(named)))
    gpus = catalog.gpu_specs(profile, limit=MAX_GPU_TYPES)
    if not gpus and profile not in BUILT_IN_EFFICIENCIES:
        raise NotFoundError(
            f"no GPU has an efficiency profile named {profile!r}: use 'calibrated', 'ideal' or a profile stored "
            "with POST /v1/calibrations",
            kind="efficiency_profile",
            name=profile,
        )
    return gpus


def default_precisions(catalog: Catalog) -> tuple[Precision, ...]:
    """The default precisions the catalog has (bf16/bf16, fp8/fp8: api.schemas.plans); a 422
    naming them when it has none, for then what is missing is the catalog's, not the request's."""
    precisions = catalog.precisions(DEFAULT_PRECISIONS, skip_unknown=True)
    if not precisions:
        defaults = ", ".join(f"{weights}/{kv_cache}" for weights, kv_cache in DEFAULT_PRECISIONS)
        raise PlannerInputError(
            f"the catalog has none of the default precisions {defaults}: add their quantizations "
            "(POST /v1/quantizations) or name precisions in constraints.precisions",
            constraint="precisions",
            default_precisions=[f"{w}/{kv}" for w, kv in DEFAULT_PRECISIONS],
        )
    return precisions


def planning_inputs(
    body: PlanRequest, catalog: Catalog, *, default_provider: str = DEFAULT_PRICE_PROVIDER
) -> tuple[PlanningInputs, Pricing]:
    """Specs for the planner: the named (or every) GPU at the requested efficiencies and at the
    request's provider's prices (else `default_provider`'s) with its `prices` on top, the model,
    the allowed precisions; and which price each GPU got. Unknown slugs are 404; a named profile
    missing for a GPU the request names is 404, and GPUs the request does not name are skipped
    when they lack it. GPUs without a price are left out (the pricing's notes say which); an
    unknown provider is 404, nothing priced a 422 (catalog.prices)."""
    constraints = body.constraints
    model = catalog.model_spec(body.model)
    gpus = gpu_specs(catalog, body.efficiency_profile, constraints.gpus)
    for slug in [*constraints.inventory, *body.prices]:
        catalog.get_gpu(slug)  # 404 for an inventory or a price of a GPU nobody catalogued
    provider = body.provider or default_provider
    types: tuple[InstanceTypeSpec, ...] = ()
    if constraints.unit == "instance":  # priced per instance-hour, not from the per-GPU list (api/instance_plans.py)
        pricing, types = instance_pricing(catalog.session, gpus, provider, body.prices)
    else:
        pricing = priced(catalog, gpus, provider, price_overrides(body.prices))
    if gpus.skipped:  # rows the planner cannot use: named in the plan's cost notes, not a 500 for every plan
        pricing = dataclasses.replace(pricing, notes=(*gpus.skipped, *pricing.notes))
    if constraints.precisions is not None:
        precisions = catalog.precisions(list(dict.fromkeys((p.weights, p.kv_cache) for p in constraints.precisions)))
    else:
        precisions = default_precisions(catalog)
    inputs = PlanningInputs(
        model=model,
        gpus=pricing.specs,
        precisions=precisions,
        efficiency_profile=body.efficiency_profile,
        catalog_version=catalog.catalog_version(),
        other_gpus=_other_gpus(body, catalog, provider),
        other_precisions=_other_precisions(body, catalog, precisions),
        instance_types=types,
        draft_methods=published_draft_methods(model.slug),
        draft_model=_draft_model(body, catalog, model),
    )
    return inputs, pricing


def _draft_model(body: PlanRequest, catalog: Catalog, model: ModelSpec) -> ModelSpec | None:
    """The catalog model constraints.pin.draft_model names (404 when unknown), checked to draft for `model` (422)."""
    pin = body.constraints.pin
    if pin is None or pin.draft_model is None:
        return None
    draft = catalog.model_spec(pin.draft_model)
    check_draft_model(model, draft)
    return draft


def one_engine(engine: str | None, pinned: str | None) -> str | None:
    """The one engine an evaluate, simulate, capacity, what-if or fleet request prices on: its `engine` (one, optionally
    `engine@generation`) narrowed by constraints.pin.engine (planner/engines.py `narrowed_by_pin`: a bare pin matches
    every generation of its engine); None for neither. PlannerInputError naming the pin when they disagree."""
    narrowed = narrowed_by_pin(None if engine is None else (engine,), pinned)
    return None if narrowed is None else narrowed[0]


def engine_profiles(catalog: Catalog, engine: str) -> tuple[tuple[EngineProfile, ...], tuple[LowPrecisionFactor, ...]]:
    """The catalog's engine profiles and low-precision factors, once `engine` (one, optionally `engine@generation`) is
    checked: an unknown engine or a generation no profile of it has is a PlannerInputError (422) naming the known ones."""
    store = EngineProfiles(catalog.session)
    profiles = store.profiles()
    check_generation(engine, profiles)
    return profiles, store.factors()


def check_engines(catalog: Catalog, engines: Sequence[str]) -> None:
    """Every requested engine checked up front (engine_profiles' 422), so that a typo in a list is refused rather than
    taken for an engine that could not plan."""
    profiles = EngineProfiles(catalog.session).profiles()
    for engine in engines:
        check_generation(engine, profiles)


def engine_gpus(
    catalog: Catalog, gpus: Sequence[GpuSpec], engine: str, efficiency_profile: str
) -> tuple[tuple[GpuSpec, ...], dict[str, EngineChoice]]:
    """The GPUs `engine` runs on, each at its engine profile (calibrated plans only: an `ideal` or
    stored profile is the request's own choice and is kept, which the choice's reason says)."""
    profiles, factors = engine_profiles(catalog, engine)
    if efficiency_profile == "calibrated":
        return priced_on(gpus, engine, profiles, factors)
    kept = tuple(g for g in gpus if runs_on(engine, g))
    choices = {
        g.slug: EngineChoice(
            gpu=g.slug,
            engine=parse_engine(engine)[0],
            generation=None,
            source=g.efficiency.source,
            fallback=True,
            reason=f"efficiency_profile {efficiency_profile!r} requested: engine profiles are calibrations and do not apply",
            efficiency=g.efficiency,
            calibration_grade=g.calibration_grade,
        )
        for g in kept
    }
    return kept, choices


def engine_gpu(catalog: Catalog, gpu: GpuSpec, engine: str, efficiency_profile: str) -> tuple[GpuSpec, EngineChoice]:
    """One GPU at its profile under `engine` (engine_gpus), the choice's reason at the head of its efficiency's source;
    PlannerInputError when the engine does not run on the GPU."""
    choose_profile(gpu, engine, (), ())  # the engine must run on the GPU, whatever the profile
    gpus, choices = engine_gpus(catalog, [gpu], engine, efficiency_profile)
    choice = choices[gpu.slug]
    note = f"engine {engine}{' (fallback)' if choice.fallback else ''}: {choice.reason}. "
    efficiency = dataclasses.replace(gpus[0].efficiency, source=note + choice.efficiency.source)
    return dataclasses.replace(gpus[0], efficiency=efficiency), choice


def engine_read(engine: str, choices: Sequence[EngineChoice]) -> EngineRead:
    """The answer's `engine` section (api/schemas/plan_response.py EngineRead) for one requested engine priced on `choices`
    (the answer's GPUs, its own first): the engine as asked, each GPU's profile, generation and why."""
    profiles = [engine_profile_read(choice) for choice in choices]
    return EngineRead.model_validate(
        {
            "chosen": engine,
            "allowed": [engine],
            "reason": f"the only engine allowed ({engine})",
            "profile": profiles[0],
            "profiles": profiles,
        }
    )


def engine_profile_read(choice: EngineChoice) -> dict[str, Any]:
    """One GPU's `engine.profile` (api/schemas/plan_response.py EngineProfileRead)."""
    return {
        "gpu": choice.gpu,
        "engine": choice.engine,
        "generation": choice.generation,
        "source": choice.source,
        "fallback": choice.fallback,
        "reason": choice.reason,
        "at_bounds": list(choice.at_bounds),
        "calibration_grade": choice.calibration_grade,
    }


def engine_inputs(
    catalog: Catalog, efficiency_profile: str, inputs: PlanningInputs, engine: str
) -> tuple[PlanningInputs, dict[str, EngineChoice]]:
    """`inputs` on `engine` (engine_gpus); PlannerInputError naming `engine` when it runs on none of them."""
    gpus, choices = engine_gpus(catalog, inputs.gpus, engine, efficiency_profile)
    others, _ = engine_gpus(catalog, inputs.other_gpus, engine, efficiency_profile)
    if not gpus:
        raise PlannerInputError(
            f"{engine} runs on none of the GPUs this plan may use ({', '.join(g.slug for g in inputs.gpus)})",
            field="engine",
            engine=engine,
        )
    return dataclasses.replace(inputs, gpus=gpus, other_gpus=others), choices


def _other_gpus(body: PlanRequest, catalog: Catalog, provider: str) -> tuple[GpuSpec, ...]:
    """What the request did not allow, for an impossible request's advice ("allow h100-sxm"):
    the priced GPUs it does not name (none when it names none, or plans in instances)."""
    constraints = body.constraints
    if constraints.gpus is None or constraints.unit != "gpu":
        return ()
    named = set(constraints.gpus)
    others = [g for g in catalog.gpu_specs(body.efficiency_profile, limit=MAX_GPU_TYPES) if g.slug not in named]
    if not others:
        return ()
    try:
        return tuple(priced(catalog, others, provider, price_overrides(body.prices)).specs)
    except PlannerInputError:
        return ()  # none of them priced at this provider: nothing to suggest


def _other_precisions(body: PlanRequest, catalog: Catalog, allowed: Sequence[Precision]) -> tuple[Precision, ...]:
    """The default precisions the request's `constraints.precisions` left out (for the advice)."""
    if body.constraints.precisions is None:
        return ()
    chosen = {(p.weights.slug, p.kv_cache.slug) for p in allowed}
    return tuple(
        p for p in catalog.precisions(DEFAULT_PRECISIONS, skip_unknown=True) if (p.weights.slug, p.kv_cache.slug) not in chosen
    )
