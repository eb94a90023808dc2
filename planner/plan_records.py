"""What the single-workload MILP (planner/optimizer.py) takes and gives: a candidate configuration
with its per-replica rate and price, the limits on the plan, and the solution's rows and constraint
slacks. Records only; the formulation and solving live in the optimizer."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from planner.confidence import grade_rank
from planner.errors import PlannerInputError
from planner.milp import ModelSize, SolverReport
from planner.packing import InstanceOffer
from planner.packing import cost_usd_per_hour as packed_cost_usd_per_hour
from planner.pins import Pin


def candidate_id(
    *, gpu: str, weights_precision: str, kv_precision: str, tp: int, batch_limit: int, chunk_tokens: int | None
) -> str:
    """Stable readable id: `h100-sxm/fp8/fp8/tp2/b64/c2048` (`.../nochunk` without chunked prefill)."""
    chunk = "nochunk" if chunk_tokens is None else f"c{chunk_tokens}"
    return f"{gpu}/{weights_precision}/{kv_precision}/tp{tp}/b{batch_limit}/{chunk}"


def _finite_positive(value: float) -> bool:
    return math.isfinite(value) and value > 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Candidate:
    """One serving configuration that holds the model and meets the SLOs below some rate.

    `cost_usd_per_hour`, `max_rps_at_slo` and `saturation_rps` are per replica; with
    `instance_offers` (instance mode) the replicas are bought as whole instances and
    `cost_usd_per_hour` is the per-replica floor, `row_cost_usd_per_hour` the exact cost of a row.
    """

    id: str
    gpu: str
    tp: int
    weights_precision: str
    kv_precision: str
    batch_limit: int
    chunk_tokens: int | None
    gpus_per_replica: int
    cost_usd_per_hour: float
    max_rps_at_slo: float
    saturation_rps: float
    instance_offers: tuple[InstanceOffer, ...] = ()
    #: Pipeline stages and expert-parallel degree of a replica (planner/pipeline.py): tp × pp GPUs, ep 1 or tp.
    pp: int = 1
    ep: int = 1

    def row_cost_usd_per_hour(self, replicas: int) -> float:
        """What `replicas` replicas of this candidate cost per hour: r·p, or whole instances (planner/packing.py)."""
        if self.instance_offers:
            return packed_cost_usd_per_hour(replicas, self.instance_offers)
        return replicas * self.cost_usd_per_hour

    def __post_init__(self) -> None:
        if not self.id:
            raise PlannerInputError("a candidate needs a non-empty id")
        if self.tp < 1 or self.gpus_per_replica < self.tp:
            raise PlannerInputError(
                f"candidate {self.id}: tp must be >= 1 and gpus_per_replica >= tp, "
                f"got tp {self.tp}, gpus_per_replica {self.gpus_per_replica}"
            )
        if self.pp < 1 or self.gpus_per_replica < self.tp * self.pp or self.ep not in (1, self.tp):
            raise PlannerInputError(
                f"candidate {self.id}: pp must be >= 1 with gpus_per_replica >= tp × pp, and ep 1 or tp, "
                f"got tp {self.tp}, pp {self.pp}, ep {self.ep}, gpus_per_replica {self.gpus_per_replica}"
            )
        if self.batch_limit < 1 or (self.chunk_tokens is not None and self.chunk_tokens < 1):
            raise PlannerInputError(
                f"candidate {self.id}: batch_limit and chunk_tokens must be >= 1, got {self.batch_limit} and {self.chunk_tokens}"
            )
        if not _finite_positive(self.cost_usd_per_hour):
            raise PlannerInputError(f"candidate {self.id}: cost must be finite and > 0, got {self.cost_usd_per_hour}")
        if not _finite_positive(self.max_rps_at_slo):
            raise PlannerInputError(
                f"candidate {self.id}: max_rps_at_slo must be finite and > 0 (drop candidates that cannot "
                f"meet the SLOs before planning), got {self.max_rps_at_slo}"
            )
        if not (math.isfinite(self.saturation_rps) and self.saturation_rps >= self.max_rps_at_slo):
            raise PlannerInputError(
                f"candidate {self.id}: saturation_rps must be finite and >= max_rps_at_slo "
                f"({self.max_rps_at_slo}), got {self.saturation_rps}"
            )


def _frozen_counts(counts: Mapping[str, int], what: str) -> Mapping[str, int]:
    for key, count in counts.items():
        if not (isinstance(count, int) and count >= 0):
            raise PlannerInputError(f"{what} for {key!r} must be a whole number >= 0, got {count!r}")
    return MappingProxyType(dict(counts))


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanConstraints:
    """Limits on a single-workload plan; None means no limit.

    `n_plus_one`: the arrival rate is still covered with any one replica of the plan lost.
    `mixed_fleet`: False chooses exactly one candidate; True allows any mix, the router
    splitting traffic in proportion to capacity. `inventory`: most GPUs of each type
    (types not listed are unlimited). `min_confidence`: GPUs whose calibration is graded below it
    (planner/confidence.py) are left out.
    """

    max_gpus: int | None = None
    budget_usd_per_hour: float | None = None
    min_replicas: int = 1
    n_plus_one: bool = False
    mixed_fleet: bool = False
    inventory: Mapping[str, int] = field(default_factory=dict)
    min_confidence: str | None = None
    #: Decisions the request fixed (planner/pins.py); the replica pin is a constraint here, the others narrow the grids.
    pin: Pin | None = None
    #: "gpu": GPUs bought one by one at a price per GPU-hour; "instance": replicas packed into whole
    #: instances of the provider's instance types, priced per instance-hour (planner/packing.py).
    unit: Literal["gpu", "instance"] = "gpu"
    #: Speculative decoding (planner/plan_speculative.py): "off" never, "on" always (the best draft
    #: method and length that meets the SLOs), "auto" where it lowers the TPOT and the simulator agrees.
    speculative: Literal["auto", "off", "on"] = "off"

    @property
    def pinned_replicas(self) -> int | None:
        return None if self.pin is None else self.pin.replicas

    def __post_init__(self) -> None:
        if self.min_confidence is not None:
            grade_rank(self.min_confidence)  # PlannerInputError for an unknown grade
        if self.max_gpus is not None and self.max_gpus < 1:
            raise PlannerInputError(f"max_gpus must be >= 1, got {self.max_gpus}")
        if self.budget_usd_per_hour is not None and not _finite_positive(self.budget_usd_per_hour):
            raise PlannerInputError(f"budget_usd_per_hour must be finite and > 0, got {self.budget_usd_per_hour}")
        if self.min_replicas < 0:
            raise PlannerInputError(f"min_replicas must be >= 0, got {self.min_replicas}")
        object.__setattr__(self, "inventory", _frozen_counts(self.inventory, "inventory"))
        if self.unit not in ("gpu", "instance"):
            raise PlannerInputError(f"unit must be 'gpu' or 'instance', got {self.unit!r}", constraint="unit")
        if self.speculative not in ("auto", "off", "on"):
            raise PlannerInputError(
                f"speculative must be 'auto', 'off' or 'on', got {self.speculative!r}", constraint="speculative"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRow:
    """Replicas of one chosen candidate and the share of traffic the router sends them."""

    candidate: Candidate
    replicas: int
    gpus: int
    cost_usd_per_hour: float
    capacity_rps: float  # replicas × max_rps_at_slo
    offered_rps: float  # λ × this row's capacity / the plan's capacity
    target_rho: float  # offered rate per replica / saturation_rps


@dataclass(frozen=True, slots=True, kw_only=True)
class ConstraintSlack:
    """One constraint at the optimum: its value, its limit, the slack and whether it binds.

    `binding` means the constraint leaves less room than one replica step: demand (or N+1)
    slack below the smallest chosen per-replica rate, GPU slack below the smallest GPUs per
    replica that could use it, budget slack below the cheapest such replica, min_replicas met
    exactly. It says the constraint is tight, not that it set the answer: a limit that made the
    plan switch configuration (say H100 inventory pushing it onto A100s) is tight only if the
    chosen rows touch it; re-solve with the limit relaxed to price it. Slack is ≥ 0 in the
    constraint's own direction.
    """

    family: str
    name: str
    value: float
    limit: float
    slack: float
    unit: str
    binding: bool


def _binds(slack: float, step: float) -> bool:
    """Less room than one step; a limit no addable replica touches (step = ∞) never binds."""
    return math.isfinite(step) and slack < step


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanSolution:
    """The cheapest plan (then the fewest GPUs at that cost), with its constraints and solver report."""

    rows: tuple[PlanRow, ...]
    arrival_rate_rps: float
    cost_usd_per_hour: float
    objective_usd_per_hour: float
    gpus_total: int
    replicas_total: int
    capacity_rps: float
    target_rho: float  # λ / Σ replicas·saturation_rps
    constraints: tuple[ConstraintSlack, ...]
    solver: SolverReport
    model_size: ModelSize

    @property
    def replicas(self) -> dict[str, int]:
        return {row.candidate.id: row.replicas for row in self.rows}

    @property
    def binding(self) -> tuple[ConstraintSlack, ...]:
        return tuple(slack for slack in self.constraints if slack.binding)
