"""Replicas packed into whole cloud instances: what a plan costs when GPUs are bought by the instance.

An instance type t carries g_t GPUs of one type, n_t of them in one NVLink domain, at P_t per
instance-hour (planner/specs.py `InstanceTypeSpec`). A replica of tensor-parallel degree tp never
straddles instances: it fits when tp ≤ nvlink_domain, k_t = ⌊g_t / tp⌋ times per instance, and the
other g_t − k_t·tp GPUs of each instance are stranded. A row of r replicas on types {t} costs

    cost(r) = min Σ_t m_t·P_t   subject to   Σ_t m_t·k_t ≥ r,  m_t ∈ ℕ

(whole instances, possibly of several sizes: seven 1-GPU replicas may be one 8-GPU instance or
seven 1-GPU instances, whichever is cheaper). With b the type of least price per replica, P_b/k_b,
some optimum uses every other type fewer than k_b times: k_b instances of t (k_b·k_t replicas at
k_b·P_t) can always be swapped for k_t instances of b (the same replicas at k_t·P_b ≤ k_b·P_t). So
the optimum is found exactly by trying every count below k_b of the other types and filling the rest
with b — at most k_b^(T−1) tries, a few dozen for real price lists. cost(r) never falls as r grows
(a cover of r + 1 replicas covers r), and cost(r) ≥ r·P_b/k_b: the per-replica floor the search's
bounds use. The MILP gives each candidate one integer instance count per type with the same
covering constraint (planner/optimizer.py), so both price a row identically.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from planner.specs import InstanceTypeSpec


@dataclass(frozen=True, slots=True)
class InstanceOffer:
    """One instance type as replicas of one tp use it: `replicas_per_instance` = ⌊gpus / tp⌋ (≥ 1)."""

    instance: InstanceTypeSpec
    tp: int
    replicas_per_instance: int

    @property
    def usd_per_hour(self) -> float:
        return self.instance.usd_per_hour

    @property
    def usd_per_replica_hour(self) -> float:
        return self.instance.usd_per_hour / self.replicas_per_instance


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceUse:
    """Instances of one type in a plan row (the API's `plan.instances` entry)."""

    provider: str
    instance_type: str
    count: int
    gpus_per_instance: int
    gpus_used: int
    stranded_gpus: int
    usd_per_instance_hour: float
    usd_per_hour: float


def offers_for(gpu: str, tp: int, instance_types: Sequence[InstanceTypeSpec]) -> tuple[InstanceOffer, ...]:
    """The instance types carrying `gpu` that hold a whole replica of `tp` GPUs in one NVLink domain,
    less those another offer dominates (as many replicas or more per instance, for no more money)."""
    fitting = [InstanceOffer(t, tp, t.replicas_per_instance(tp)) for t in instance_types if t.gpu == gpu]
    fitting = [o for o in fitting if o.replicas_per_instance >= 1]
    kept = [o for o in fitting if not any(_dominates(other, o) for other in fitting if other is not o)]
    return tuple(sorted(kept, key=lambda o: (o.usd_per_replica_hour, -o.replicas_per_instance, o.instance.name)))


def _dominates(a: InstanceOffer, b: InstanceOffer) -> bool:
    """`a` holds as many replicas per instance for no more money, and is strictly better or, tied, named first."""
    if a.replicas_per_instance < b.replicas_per_instance or a.usd_per_hour > b.usd_per_hour:
        return False
    tied = a.replicas_per_instance == b.replicas_per_instance and a.usd_per_hour == b.usd_per_hour
    return not tied or a.instance.name < b.instance.name


def per_replica_floor(offers: Sequence[InstanceOffer]) -> float:
    """min_t P_t / k_t: no row of r replicas costs less than r times this."""
    return min(o.usd_per_replica_hour for o in offers)


@lru_cache(maxsize=65536)
def cover(replicas: int, offers: tuple[InstanceOffer, ...]) -> tuple[float, tuple[int, ...]]:
    """The cheapest whole instances holding `replicas` replicas (module docstring): (cost per hour,
    instances of each offer, in `offers` order). Ties go to fewer instances, then to the earlier offer."""
    if replicas <= 0:
        return 0.0, tuple(0 for _ in offers)
    best_index = min(range(len(offers)), key=lambda i: (offers[i].usd_per_replica_hour, -offers[i].replicas_per_instance))
    best = offers[best_index]
    others = [i for i in range(len(offers)) if i != best_index]
    found: tuple[float, int, tuple[int, ...]] | None = None
    for counts in itertools.product(range(best.replicas_per_instance), repeat=len(others)):
        held = sum(n * offers[i].replicas_per_instance for n, i in zip(counts, others, strict=True))
        fill = max(0, math.ceil((replicas - held) / best.replicas_per_instance))
        cost = fill * best.usd_per_hour + sum(n * offers[i].usd_per_hour for n, i in zip(counts, others, strict=True))
        instances = fill + sum(counts)
        if found is None or (cost, instances) < (found[0] * (1 + 1e-12), found[1]):
            full = [0] * len(offers)
            full[best_index] = fill
            for n, i in zip(counts, others, strict=True):
                full[i] = n
            found = (cost, instances, tuple(full))
    assert found is not None
    return found[0], found[2]


def cost_usd_per_hour(replicas: int, offers: tuple[InstanceOffer, ...]) -> float:
    """cost(r): the cheapest whole instances holding `replicas` replicas."""
    return cover(replicas, offers)[0]


def instance_uses(replicas: int, offers: tuple[InstanceOffer, ...]) -> tuple[InstanceUse, ...]:
    """The instances of each type a row of `replicas` replicas is packed into, with the GPUs it uses
    and strands: the first instances of a type are filled, any shortfall left on the last one."""
    _, counts = cover(replicas, offers)
    uses: list[InstanceUse] = []
    left = replicas
    for offer, count in zip(offers, counts, strict=True):
        if count == 0:
            continue
        held = min(left, count * offer.replicas_per_instance)
        left -= held
        gpus = count * offer.instance.gpus
        uses.append(
            InstanceUse(
                provider=offer.instance.provider,
                instance_type=offer.instance.name,
                count=count,
                gpus_per_instance=offer.instance.gpus,
                gpus_used=held * offer.tp,
                stranded_gpus=gpus - held * offer.tp,
                usd_per_instance_hour=offer.usd_per_hour,
                usd_per_hour=count * offer.usd_per_hour,
            )
        )
    return tuple(uses)
