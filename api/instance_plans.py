"""The catalog's side of a plan in whole instances (`constraints.unit: instance`): the provider's
instance types for the GPUs gathered, and those GPUs priced from them rather than per GPU.

A provider may sell a GPU only inside an instance (AWS sells the H100 SXM only as p5.48xlarge), so
in instance mode the per-GPU price list is not consulted: each GPU carries the least per-GPU price
of its instance types (instance price / GPUs), which only orders and bounds the search — the plan is
costed per instance-hour by the planner (planner/packing.py). GPUs none of the provider's instance
types carry are left out with a note, as unpriced GPUs are in GPU mode.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from sqlalchemy import distinct, select
from sqlalchemy.orm import Session

from catalog.instances import InstanceTypes
from catalog.models import InstanceTypeRow
from catalog.prices import Pricing
from planner.errors import PlannerInputError
from planner.specs import GpuSpec, InstanceTypeSpec


def providers_with_instance_types(session: Session) -> list[str]:
    return sorted(session.scalars(select(distinct(InstanceTypeRow.provider))).all())


def instance_pricing(
    session: Session, gpus: Sequence[GpuSpec], provider: str, overrides: Mapping[str, object]
) -> tuple[Pricing, tuple[InstanceTypeSpec, ...]]:
    """The GPUs `provider`'s instance types carry, each priced at its least per-GPU instance price,
    those instance types, and notes naming the GPUs left out. PlannerInputError naming
    `constraints.unit` when the provider has no instance type for any of them (the providers that
    have some are listed), naming `prices` when the request also overrides per-GPU prices."""
    if overrides:
        raise PlannerInputError(
            "`prices` override per-GPU-hour prices; a plan in whole instances (constraints.unit instance) is costed at the "
            "provider's instance prices: drop `prices` or plan with constraints.unit gpu",
            constraint="prices",
            field="prices",
        )
    types = InstanceTypes(session).instance_type_specs(provider, [g.slug for g in gpus])
    if not types:
        known = providers_with_instance_types(session)
        raise PlannerInputError(
            f"provider {provider!r} has no instance type for the GPUs this plan may use; constraints.unit instance needs one. "
            f"Providers with instance types: {', '.join(known) or 'none'} (name one in `provider`), or plan with constraints.unit gpu",
            constraint="unit",
            field="constraints.unit",
            provider=provider,
            providers_with_instance_types=known,
        )
    per_gpu: dict[str, float] = {}
    for t in types:
        per_gpu[t.gpu] = min(per_gpu.get(t.gpu, t.usd_per_hour / t.gpus), t.usd_per_hour / t.gpus)
    specs = tuple(dataclasses.replace(g, price_usd_per_hour_on_demand=per_gpu[g.slug]) for g in gpus if g.slug in per_gpu)
    notes = tuple(f"{g.slug}: {provider} sells it in no instance type; left out" for g in gpus if g.slug not in per_gpu)
    return Pricing(provider=provider, specs=specs, prices={}, notes=notes), types
