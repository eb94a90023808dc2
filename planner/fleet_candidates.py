"""Candidate tables for the fleet MILP: for one workload shape (model, length mix, SLO), the
configurations worth offering the solver and each one's per-replica `max_rps_at_slo`.

The per-replica rate at the SLO does not depend on the demand, so a table is computed once per
shape (not per period) and shared by every workload with the same shape (`CandidateTables`).

Only undominated candidates matter to the fleet MILP, because its costs come from GPU prices
alone (planner/fleet.py): a candidate on GPU type k with g GPUs per replica is dominated by one
on k with g' GPUs, g' dividing g, when (g/g')·μ' ≥ μ (`planner.fleet.dominates`). So for each
GPU type and tp only the option with the largest μ survives, and a larger tp survives only if
it beats every divisor tp scaled up. The search finds exactly those, and skips most of the
queueing model's root-finds (the expensive step, ≈ 10 predictions each) with bounds that are
exact, not heuristic. With θ the rate an option must beat to survive:

    μ ≤ saturation ≤ the closed-form bound of planner/candidates.py   (skip when bound ≤ θ, then when saturation ≤ θ)
    the SLOs fail at rate θ  ⇒  μ < θ                                 (one prediction; p99s never fall as the rate rises)

Options are taken per (GPU, tp) in decreasing order of the closed-form bound, so the first
root-find usually sets a θ the rest cannot reach. (GPU, precision, tp) groups whose step model
and KV capacity are identical (fp16 and bf16 on most GPUs) are searched once.

The small pieces of planner/planning.py this needs (the cached μ and saturation, and serving
from an option) are private there, so they are re-implemented here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from planner.candidates import BATCH_LIMITS, CHUNK_BUDGETS, TP_DEGREES, Drop, Option, enumerate_groups, enumerate_options
from planner.errors import ConvergenceError, InfeasiblePlanError, PlannerInputError
from planner.fleet import undominated
from planner.optimizer import Candidate
from planner.queueing import max_rps_at_slo, predict, saturation_rps
from planner.specs import GpuSpec, ModelSpec, Precision
from planner.step_model import StepModel
from planner.workload import Serving, Slo, Workload

#: Upper bound on queueing root-finds for one table, so a pathological request stays bounded;
#: reaching it is reported (`exhaustive: false`). The same bound as planner/planning.py's search.
MAX_ROOT_FINDS = 400


@dataclass(frozen=True, slots=True, kw_only=True)
class CandidateGrid:
    """The search grids: tensor-parallel degrees, batch limits and chunked-prefill budgets
    (None = no chunking). Defaults are planner/candidates.py's (DESIGN.md "The optimisation")."""

    tp_degrees: tuple[int, ...] = TP_DEGREES
    batch_limits: tuple[int, ...] = BATCH_LIMITS
    chunk_budgets: tuple[int | None, ...] = CHUNK_BUDGETS

    def __post_init__(self) -> None:
        for name in ("tp_degrees", "batch_limits", "chunk_budgets"):
            values = tuple(getattr(self, name))
            object.__setattr__(self, name, values)
            if not values:
                raise PlannerInputError(f"{name} needs at least one value", constraint=name)
            if any(v is not None and (not isinstance(v, int) or v < 1) for v in values):
                raise PlannerInputError(f"{name} must be whole numbers >= 1, got {values}", constraint=name)


@dataclass(frozen=True, slots=True, kw_only=True)
class SloRefusal:
    """An option the queueing model refused: no rate meets the SLO on it (or the root-find failed)."""

    option_id: str
    constraint: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CandidateTable:
    """The undominated candidates of one workload shape, and what the search did to find them."""

    candidates: tuple[Candidate, ...]
    options_enumerated: int
    groups: int  # (GPU, precision, tp) groups that hold the model within the SLO floors
    groups_searched: int  # after merging groups with identical physics
    drops: tuple[Drop, ...]  # groups dropped before any queueing, with the reason
    slo_refusals: tuple[SloRefusal, ...]
    root_finds: int
    rate_checks: int  # single predictions at the rate an option had to beat
    exhaustive: bool  # False when MAX_ROOT_FINDS stopped the search


# --- cached queueing calls (pure functions of hashable inputs; shared across requests) -----------


@lru_cache(maxsize=8192)
def _saturation(sm: StepModel, mix: Workload, serving: Serving, capacity: int) -> float:
    return saturation_rps(sm, mix, serving, kv_capacity_tokens=capacity)


@lru_cache(maxsize=8192)
def _max_rps(sm: StepModel, mix: Workload, serving: Serving, slo: Slo, capacity: int) -> float | SloRefusal:
    """μ, or why no rate meets the SLO on this configuration (option id filled in by the caller)."""
    try:
        return max_rps_at_slo(sm, mix, serving, slo, kv_capacity_tokens=capacity)
    except InfeasiblePlanError as exc:
        return SloRefusal(option_id="", constraint=str(exc.extensions.get("constraint", "slo")), reason=exc.detail)
    except ConvergenceError as exc:
        return SloRefusal(option_id="", constraint="queueing",
                          reason=f"the queueing model did not converge on this configuration ({exc.detail})")


def clear_caches() -> None:
    """Forget every cached queueing result (benchmarks measuring a cold start call this)."""
    _saturation.cache_clear()
    _max_rps.cache_clear()
    _meets_slo_at.cache_clear()


@lru_cache(maxsize=65536)
def _meets_slo_at(sm: StepModel, mix: Workload, serving: Serving, slo: Slo, capacity: int, rate_rps: float) -> bool:
    """Whether every target of `slo` holds at per-replica rate `rate_rps` (False when unstable)."""
    prediction = predict(sm, mix.at_rate(rate_rps), serving, kv_capacity_tokens=capacity, percentile=slo.percentile)
    if prediction.unstable:
        return False
    for metric, target in (("ttft", slo.ttft_s), ("tpot", slo.tpot_s), ("e2e", slo.e2e_s)):
        latency = getattr(prediction, metric)
        if target is not None and latency is not None and latency.at_percentile_s > target:
            return False
    return True


def _serving(option: Option) -> Serving:
    return Serving(replicas=1, batch_limit=option.batch_limit, chunk_tokens=option.chunk_tokens)


# --- the search ---------------------------------------------------------------------------------


@dataclass(slots=True)
class _Search:
    mix: Workload
    slo: Slo
    max_root_finds: int
    root_finds: int = 0
    rate_checks: int = 0
    exhaustive: bool = True
    refusals: list[SloRefusal] = field(default_factory=list)

    def saturation(self, option: Option) -> float:
        return _saturation(option.group.step_model, self.mix, _serving(option), option.group.kv_capacity_tokens)

    def best_above(self, options: Sequence[Option], threshold_rps: float) -> tuple[Option, float, float] | None:
        """The option with the largest μ among `options` if that μ exceeds `threshold_rps`, with its
        μ and saturation; None when none beats it."""
        best: tuple[Option, float, float] | None = None
        theta = threshold_rps
        for option in sorted(options, key=lambda o: -o.saturation_bound_rps):
            if not option.saturation_bound_rps > theta:
                break  # sorted: no later option's bound exceeds θ either
            saturation = self.saturation(option)
            if not saturation > theta:
                continue
            group = option.group
            if theta > 0:
                self.rate_checks += 1
                if not _meets_slo_at(group.step_model, self.mix, _serving(option), self.slo, group.kv_capacity_tokens, theta):
                    continue
            if self.root_finds >= self.max_root_finds:
                self.exhaustive = False
                break
            hits = _max_rps.cache_info().hits
            value = _max_rps(group.step_model, self.mix, _serving(option), self.slo, group.kv_capacity_tokens)
            if _max_rps.cache_info().hits == hits:
                self.root_finds += 1
            if isinstance(value, SloRefusal):
                self.refusals.append(SloRefusal(option_id=option.id, constraint=value.constraint, reason=value.reason))
                continue
            if value > theta:
                best, theta = (option, value, max(saturation, value)), value
        return best


def _candidate(option: Option, mu_rps: float, saturation: float) -> Candidate:
    group = option.group
    return Candidate(
        id=option.id,
        gpu=group.gpu.slug,
        tp=group.tp,
        weights_precision=group.precision.weights.slug,
        kv_precision=group.precision.kv_cache.slug,
        batch_limit=option.batch_limit,
        chunk_tokens=option.chunk_tokens,
        gpus_per_replica=group.tp,
        cost_usd_per_hour=group.price_usd_per_hour,
        max_rps_at_slo=mu_rps,
        saturation_rps=saturation,
    )


def candidate_table(
    *,
    model: ModelSpec,
    gpus: Sequence[GpuSpec],
    precisions: Sequence[Precision],
    workload: Workload,
    slo: Slo,
    grid: CandidateGrid = CandidateGrid(),
    max_root_finds: int = MAX_ROOT_FINDS,
) -> CandidateTable:
    """The undominated candidates for serving `model` to `workload`'s length mix within `slo`.

    `workload`'s arrival rate is ignored (μ is per replica and does not depend on it). Every
    candidate that planner/candidates.py enumerates and that no kept candidate dominates is
    kept, unless MAX_ROOT_FINDS stops the search first (`exhaustive` False). An empty table is
    an answer: `drops` and `slo_refusals` say why.
    """
    mix = workload.at_rate(1.0)
    groups, drops = enumerate_groups(model=model, gpus=gpus, precisions=precisions, workload=mix, slo=slo,
                                     tp_degrees=grid.tp_degrees)
    distinct: dict[tuple[str, int, StepModel, int], list[Option]] = {}
    enumerated = 0
    for group in groups:
        options = enumerate_options(group, mix, batch_limits=grid.batch_limits, chunk_budgets=grid.chunk_budgets)
        enumerated += len(options)
        key = (group.gpu.slug, group.tp, group.step_model, group.kv_capacity_tokens)
        if key not in distinct:  # identical physics (e.g. fp16 and bf16): same μ for every option
            distinct[key] = options
    search = _Search(mix=mix, slo=slo, max_root_finds=max_root_finds)
    found: list[Candidate] = []
    for gpu in dict.fromkeys(group.gpu.slug for group in groups):
        by_tp: dict[int, list[Option]] = {}
        for (slug, tp, _, _), options in distinct.items():
            if slug == gpu:
                by_tp.setdefault(tp, []).extend(options)
        kept: list[Candidate] = []
        for tp in sorted(by_tp):
            # A (gpu, tp) option must beat every kept divisor tp scaled up to tp GPUs, else it is dominated.
            theta = max((tp // c.tp * c.max_rps_at_slo for c in kept if tp % c.tp == 0), default=0.0)
            best = search.best_above(by_tp[tp], theta)
            if best is not None:
                kept.append(_candidate(*best))
        found.extend(kept)
    return CandidateTable(
        candidates=undominated(found),
        options_enumerated=enumerated,
        groups=len(groups),
        groups_searched=len(distinct),
        drops=tuple(drops),
        slo_refusals=tuple(search.refusals),
        root_finds=search.root_finds,
        rate_checks=search.rate_checks,
        exhaustive=search.exhaustive,
    )


def no_candidates_error(workload_name: str, table: CandidateTable) -> InfeasiblePlanError:
    """The 422 answer for a workload no allowed configuration can serve within its SLOs: the
    reasons, most common constraint first."""
    reasons: dict[str, list[str]] = {}
    for drop in table.drops:
        reasons.setdefault(drop.constraint, []).append(f"{drop.gpu} {drop.weights_precision}/{drop.kv_precision}"
                                                       + ("" if drop.tp is None else f" tp{drop.tp}") + f": {drop.reason}")
    for refusal in table.slo_refusals:
        reasons.setdefault(refusal.constraint, []).append(f"{refusal.option_id}: {refusal.reason}")
    ranked = sorted(reasons.items(), key=lambda item: -len(item[1]))
    constraint = ranked[0][0] if ranked else "candidates"
    examples = [example for _, found in ranked for example in found[:2]][:6]
    summary = "; ".join(examples) if examples else "nothing to plan with"
    return InfeasiblePlanError(
        f"workload {workload_name!r}: no allowed configuration holds the model and meets its SLOs ({summary}); "
        "allow more GPU types, precisions or tensor-parallel degrees, or relax its SLOs",
        constraint=constraint,
        workload=workload_name,
        refused_by={name: len(found) for name, found in ranked},
        examples=examples,
    )


class CandidateTables:
    """Candidate tables for many workloads on one set of GPUs, precisions and grids, computed
    once per distinct (model, length mix, SLO): identical workload shapes share the work."""

    def __init__(
        self,
        *,
        gpus: Sequence[GpuSpec],
        precisions: Sequence[Precision],
        grid: CandidateGrid = CandidateGrid(),
        max_root_finds: int = MAX_ROOT_FINDS,
    ) -> None:
        if not gpus:
            raise PlannerInputError("no GPU types to plan with: allow at least one", constraint="gpus")
        if not precisions:
            raise PlannerInputError("no precisions to plan with: allow at least one", constraint="precisions")
        self._gpus = tuple(gpus)
        self._precisions = tuple(precisions)
        self._grid = grid
        self._max_root_finds = max_root_finds
        self._tables: dict[tuple[ModelSpec, Workload, Slo], CandidateTable] = {}

    def table(self, model: ModelSpec, workload: Workload, slo: Slo) -> CandidateTable:
        key = (model, workload.at_rate(1.0), slo)
        if key not in self._tables:
            self._tables[key] = candidate_table(model=model, gpus=self._gpus, precisions=self._precisions,
                                                workload=workload, slo=slo, grid=self._grid,
                                                max_root_finds=self._max_root_finds)
        return self._tables[key]

    @property
    def computed(self) -> int:
        """Distinct tables computed so far."""
        return len(self._tables)
