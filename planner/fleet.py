"""The fleet plan: many workloads over a day of periods, on reserved, on-demand and spot GPUs.

One MILP chooses how many GPUs of each type to reserve (held and paid in every period), how
many to rent on demand (and on spot) in each period, and how many replicas of which candidate
each workload runs in each period. On paper, with w a workload, c ∈ C_w its candidates (GPU
k_c, g_c GPUs per replica, μ_c = max_rps_at_slo), p a period of h hours, d_wp the demand:

    minimise   Σ_k R_k·π^res_k·h·P + Σ_{k,p} (O_kp·π^od_k + S_kp·π^spot_k)·h
    subject to Σ_c r_wcp·μ_c ≥ d_wp                                 meet_demand__w__hp
               Σ_c r_wcp·μ_c − m_wp ≥ d_wp,  m_wp ≥ μ_c·u_wcp        n_plus_one__w__hp
               Σ_c r_wcp ≥ min_replicas                             min_replicas__w__hp
               Σ_{w, c on k} r_wcp·g_c ≤ R_k + O_kp + S_kp          gpus_held__k__hp
               R_k + O_kp + S_kp ≤ inventory_kp                     gpu_inventory__k__hp
               S_kp ≤ spot availability_k                           (a variable bound)
               total cost ≤ budget_usd_per_day · P·h / 24           budget

With separate prefill and decode pools allowed (a workload's topology; planner/fleet_pools.py), or
for a workload with traffic classes each arrangement of its classes (planner/fleet_classes.py; such a
workload has no candidates, so one option must carry it), each pool option o of w (fixed pools per
period, G_okp GPUs of type k in period p) is a binary z_wo:

               Σ_o z_wo ≤ 1                                        one_pool_option__w
               r_wcp + U_wcp·Σ_o z_wo ≤ U_wcp                      pools_exclusive__w__c__hp (big-M, U the replica bound)
               Σ_c r_wcp·μ_c + d_wp·Σ_o z_wo ≥ d_wp                meet_demand__w__hp (the pools carry all of it)
               Σ_c r_wcp + m·Σ_o z_wo ≥ m                          min_replicas__w__hp (m ≤ 1 with pools)
               ... + Σ_{w,o} z_wo·G_okp ≤ R_k + O_kp + S_kp         gpus_held__k__hp

Every workload may mix candidates (the router splits its traffic in proportion to capacity); a
workload's prefix-cache and draft-head variants are candidates too (planner/fleet_levers.py).
Costs come from the GPU prices, not from `Candidate.cost_usd_per_hour`. Pools shared between
workloads of the same model (`share_pools`) are not modelled in this version: each workload
runs its own replicas. An infeasible fleet is re-solved with the budget left out, then with
inventory made elastic, to name the workload, period and GPU type that fall short.

This module is the fleet plan's public face; the work is split by responsibility:
planner/fleet_spec.py (the records asked and answered), planner/fleet_formulation.py (presolve,
variables, rows, cover cuts), planner/fleet_rounding.py (integer fleets without the solver),
planner/fleet_solve.py (`solve_fleet` and its stages) and planner/fleet_report.py (periods,
costs, shadow prices, the infeasibility diagnosis).
"""

from planner.fleet_formulation import (
    Cover,
    FleetDecisions,
    add_cover_cost_cuts,
    build_fleet_problem,
    cheapest_cover,
    cover_cost_lower_bound,
    dominates,
    fleet_cost_usd,
    presolve,
    replica_bound,
    undominated,
)
from planner.fleet_report import diagnose_infeasible_fleet, lp_shadow_prices
from planner.fleet_rounding import cover_fleet, rounded_fleet, trim_idle_replicas
from planner.fleet_solve import FLEET_RELATIVE_GAP, RESTRICTED_SHARE, fleet_with_reservations_fixed, period_spec, solve_fleet
from planner.fleet_spec import (
    HOURS_PER_DAY,
    Checkpoint,
    DemandShadowPrice,
    FleetAssignment,
    FleetConstraints,
    FleetCost,
    FleetPeriod,
    FleetPlan,
    FleetSpec,
    FleetWorkload,
    GpuPrice,
    InventoryShadowPrice,
    ShadowPrices,
    SpotOffer,
    no_checkpoint,
)

__all__ = [
    "FLEET_RELATIVE_GAP",
    "HOURS_PER_DAY",
    "RESTRICTED_SHARE",
    "Checkpoint",
    "Cover",
    "DemandShadowPrice",
    "FleetAssignment",
    "FleetConstraints",
    "FleetCost",
    "FleetDecisions",
    "FleetPeriod",
    "FleetPlan",
    "FleetSpec",
    "FleetWorkload",
    "GpuPrice",
    "InventoryShadowPrice",
    "ShadowPrices",
    "SpotOffer",
    "add_cover_cost_cuts",
    "build_fleet_problem",
    "cheapest_cover",
    "cover_cost_lower_bound",
    "cover_fleet",
    "diagnose_infeasible_fleet",
    "dominates",
    "fleet_cost_usd",
    "fleet_with_reservations_fixed",
    "lp_shadow_prices",
    "no_checkpoint",
    "period_spec",
    "presolve",
    "replica_bound",
    "rounded_fleet",
    "solve_fleet",
    "trim_idle_replicas",
    "undominated",
]
