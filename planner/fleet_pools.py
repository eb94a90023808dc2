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

The fleet's constraints are plan_disagg's (`constraints`): each pool is floored at min_replicas, and
under N+1 each pool of a period with demand carries a priced spare replica (`spare_replicas`), so
the pools meet the demand with a replica lost from either, more than the fleet's N+1 asks (one
replica of the workload lost); a period without demand takes no spare, as an aggregated workload's
N+1 asks none there (planner/fleet_formulation.py `replica_bound`). An E2E target is the workload's
SLO, which plan_disagg sizes the decode pool for.
"""

from __future__ import annotations

from collections.abc import Sequence

from planner.disagg import KvLink
from planner.errors import InfeasiblePlanError, UnstableLoadError
from planner.fleet_spec import Checkpoint, FleetConstraints, PoolConfig, PoolOption, no_checkpoint
from planner.pipeline import PP_DEGREES
from planner.plan_disagg import PoolCandidate, plan_disaggregated
from planner.plan_records import PlanConstraints
from planner.specs import GpuSpec, ModelSpec, Precision
from planner.workload import Slo, Workload

#: The rate pools are sized at in a period without demand: one request an hour.
IDLE_RATE_RPS = 1.0 / 3600.0


def _config(c: PoolCandidate) -> PoolConfig:
    return PoolConfig(
        role=c.role,
        gpu=c.gpu,
        tp=c.tp,
        pp=c.pp,
        replicas=c.replicas,
        weights_precision=c.weights,
        kv_precision=c.kv_cache,
        batch_limit=c.batch_limit,
        chunk_tokens=c.chunk_tokens,
        rho=c.rho,
        binding=c.binding,
        spare_replicas=c.spare_replicas,
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
    constraints: FleetConstraints | None = None,
    checkpoint: Checkpoint = no_checkpoint,
) -> tuple[PoolOption, ...]:
    """The pool options of the module docstring for one workload (its shape in `workload`, its rate
    ignored), one pair of pools per period of `demand_rps`, each pool within the fleet's N+1 and
    min_replicas (None: the defaults). Raises PlannerInputError without a TTFT target (a disaggregated plan splits it)."""
    constraints = FleetConstraints() if constraints is None else constraints
    groups: list[tuple[str, tuple[GpuSpec, ...]]] = [(f"pools-{g.slug}", (g,)) for g in gpus]
    if len(gpus) > 1:
        groups.append(("pools-any-gpus", tuple(gpus)))
    options: list[PoolOption] = []
    seen: set[tuple[tuple[PoolConfig, PoolConfig], ...]] = set()

    def sizing(demand: float) -> tuple[float, bool]:
        """The rate a period's pools are sized at and whether they carry the N+1 spare."""
        return (demand, constraints.n_plus_one) if demand > 0 else (IDLE_RATE_RPS, False)

    for option_id, group in groups:
        sized: dict[tuple[float, bool], tuple[PoolConfig, PoolConfig] | None] = {}
        for demand in demand_rps:
            rate, spare = sizing(demand)
            if (rate, spare) not in sized:
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
                        constraints=PlanConstraints(min_replicas=constraints.min_replicas, n_plus_one=spare),
                        pp_degrees=PP_DEGREES,  # stages where no in-node tp holds the model, as a single plan's pools
                    )
                except (InfeasiblePlanError, UnstableLoadError):
                    sized[rate, spare] = None
                else:
                    sized[rate, spare] = (_config(plan.prefill), _config(plan.decode))
        pairs = [sized[sizing(d)] for d in demand_rps]
        if any(pair is None for pair in pairs):
            continue
        periods = tuple(pair for pair in pairs if pair is not None)
        if periods in seen:
            continue
        seen.add(periods)
        options.append(PoolOption(id=option_id, periods=periods))
    return tuple(options)
