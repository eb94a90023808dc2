"""A plan's rows and the MILP's candidates, built from the options the search priced: one
`FleetRow` per configuration in the plan, one `optimizer.Candidate` per option the MILP may use."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planner.candidates import (
    Option,
)
from planner.optimizer import Candidate
from planner.packing import InstanceUse, instance_uses
from planner.plan_result import (
    Configuration,
)
from planner.plan_search import Planner


@dataclass(frozen=True, slots=True, kw_only=True)
class FleetRow:
    gpu: str
    tp: int
    replicas: int
    gpus: int
    weights_precision: str
    kv_precision: str
    batch_limit: int
    chunk_tokens: int | None
    max_rps_at_slo: float  # per replica
    saturation_rps: float  # per replica
    offered_rps: float  # to the whole row
    target_rho: float  # per-replica rate / per-replica saturation
    cost_usd_per_hour: float
    #: Instance mode: the whole instances the row's replicas are packed into (planner/packing.py).
    instances: tuple[InstanceUse, ...] = ()
    #: The speculative draft its replicas verify, as its candidate id's suffix ("/eagle-k3"); "" without.
    draft: str = ""
    #: Pipeline stages and expert-parallel degree (planner/pipeline.py): a replica is tp × pp GPUs.
    pp: int = 1
    ep: int = 1


def _row(option: Option, replicas: int, mu: float, saturation: float, offered: float) -> FleetRow:
    group = option.group
    return FleetRow(
        gpu=option.group.gpu.slug,
        tp=option.group.tp,
        replicas=replicas,
        gpus=replicas * option.group.gpus_per_replica,
        weights_precision=option.group.precision.weights.slug,
        kv_precision=option.group.precision.kv_cache.slug,
        batch_limit=option.batch_limit,
        chunk_tokens=option.chunk_tokens,
        max_rps_at_slo=mu,
        saturation_rps=saturation,
        offered_rps=offered,
        target_rho=offered / replicas / saturation,  # per-replica rate / per-replica saturation
        cost_usd_per_hour=group.cost_usd_per_hour(replicas),
        instances=instance_uses(replicas, group.offers) if group.offers else (),
        draft=group.draft,
        pp=group.pp,
        ep=group.ep,
    )


def _configuration(option: Option) -> Configuration:
    return Configuration(**_config(option), pp=option.group.pp, ep=option.group.ep)


def _config(option: Option) -> dict[str, Any]:
    g = option.group
    return {
        "gpu": g.gpu.slug,
        "tp": g.tp,
        "weights_precision": g.precision.weights.slug,
        "kv_precision": g.precision.kv_cache.slug,
        "batch_limit": option.batch_limit,
        "chunk_tokens": option.chunk_tokens,
    }


def candidate_id_of(row: FleetRow) -> str:
    from planner.optimizer import candidate_id

    layout = ("" if row.pp == 1 else f"pp{row.pp}/") + ("" if row.ep == 1 else f"ep{row.ep}/")  # candidates.Group.layout
    plain = candidate_id(
        gpu=row.gpu,
        weights_precision=row.weights_precision,
        kv_precision=row.kv_precision,
        tp=row.tp,
        batch_limit=row.batch_limit,
        chunk_tokens=row.chunk_tokens,
    )
    if layout:
        plain = plain.replace(f"/tp{row.tp}/", f"/tp{row.tp}/{layout}", 1)
    return plain + row.draft


def _candidate(option: Option, mu: float, planner: Planner) -> Candidate:
    g = option.group
    return Candidate(
        id=option.id,
        gpu=g.gpu.slug,
        tp=g.tp,
        weights_precision=g.precision.weights.slug,
        kv_precision=g.precision.kv_cache.slug,
        batch_limit=option.batch_limit,
        chunk_tokens=option.chunk_tokens,
        gpus_per_replica=g.gpus_per_replica,
        cost_usd_per_hour=g.price_usd_per_hour,
        max_rps_at_slo=mu,
        saturation_rps=max(planner.saturation(option), mu),
        instance_offers=g.offers,
    )
