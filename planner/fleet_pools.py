"""Separate prefill and decode pools as options of the fleet MILP (planner/fleet_formulation.py
`add_pool_option_constraints`).

For a workload whose topology allows pools, each option is the cheapest pair of pools
planner/plan_disagg.py plans at each period's demand (analytic, not simulated: the fleet's
aggregated candidates are sized by the queueing model alone too), on

    each GPU type alone (both pools on it), and, with several types, all of them together
    (plan_disagg's MILP then picks the cheapest (prefill GPU, decode GPU) pair, heterogeneous or not)

so that when one type's inventory runs out the MILP may take another's pools. Options whose
pools are the same in every period are offered once. An option holds pools in every period: a
period without demand keeps each pool at the size that serves one request an hour (one replica
each, as min_replicas keeps an aggregated replica). An option that some period's demand cannot
be served by (no pair within plan_disagg's 64 replicas per pool) is not offered.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.disagg import KvLink
from planner.errors import InfeasiblePlanError, PlannerInputError, UnstableLoadError
from planner.fleet_spec import Checkpoint, PoolConfig, PoolOption, no_checkpoint
from planner.plan_disagg import PoolCandidate, plan_disaggregated
from planner.specs import GpuSpec, ModelSpec, Precision
from planner.workload import Slo, Workload

#: The rate pools are sized at in a period without demand: one request an hour.
IDLE_RATE_RPS = 1.0 / 3600.0


def _config(c: PoolCandidate) -> PoolConfig:
    return PoolConfig(
        role=c.role,
        gpu=c.gpu,
        tp=c.tp,
        replicas=c.replicas,
        weights_precision=c.weights,
        kv_precision=c.kv_cache,
        batch_limit=c.batch_limit,
        chunk_tokens=c.chunk_tokens,
        rho=c.rho,
        binding=c.binding,
    )


def pool_options(
    *,
    gpus: Sequence[GpuSpec],
    model: ModelSpec,
    precisions: Sequence[Precision],
    tps: Sequence[int],
    workload: Workload,
    slo: Slo,
    link: KvLink,
    demand_rps: Sequence[float],
    checkpoint: Checkpoint = no_checkpoint,
) -> tuple[PoolOption, ...]:
    """The pool options of the module docstring for one workload (its shape in `workload`, its rate
    ignored), one pair of pools per period of `demand_rps`. Raises PlannerInputError without a TTFT
    target (a disaggregated plan splits it) or with an E2E target (the pools are not sized for one)."""
    if slo.e2e_s is not None:
        raise PlannerInputError("separate pools are not sized for an E2E target yet", constraint="slo.e2e")
    groups: list[tuple[str, tuple[GpuSpec, ...]]] = [(f"pools-{g.slug}", (g,)) for g in gpus]
    if len(gpus) > 1:
        groups.append(("pools-any-gpus", tuple(gpus)))
    options: list[PoolOption] = []
    seen: set[tuple[tuple[PoolConfig, PoolConfig], ...]] = set()
    for option_id, group in groups:
        sized: dict[float, tuple[PoolConfig, PoolConfig] | None] = {}
        for demand in demand_rps:
            rate = demand if demand > 0 else IDLE_RATE_RPS
            if rate not in sized:
                checkpoint()
                try:
                    plan = plan_disaggregated(
                        gpus=group,
                        model=model,
                        precisions=precisions,
                        tps=tps,
                        workload=workload.at_rate(rate),
                        slo=slo,
                        link=link,
                        verify=False,
                    )
                except (InfeasiblePlanError, UnstableLoadError):
                    sized[rate] = None
                else:
                    sized[rate] = (_config(plan.prefill), _config(plan.decode))
        pairs = [sized[d if d > 0 else IDLE_RATE_RPS] for d in demand_rps]
        if any(pair is None for pair in pairs):
            continue
        periods = tuple(pair for pair in pairs if pair is not None)
        if periods in seen:
            continue
        seen.add(periods)
        options.append(PoolOption(id=option_id, periods=periods))
    return tuple(options)
