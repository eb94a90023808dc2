"""Separate prefill and decode pools in the fleet MILP: a pool option is all-or-nothing, exclusive
with the workload's aggregated replicas, and counted in every period's GPU rows (inventory, cost)."""

from __future__ import annotations

import dataclasses

import pytest

from planner.errors import InfeasiblePlanError, PlannerInputError
from planner.fleet_pools import pool_options
from planner.fleet_solve import solve_fleet
from planner.fleet_spec import FleetConstraints, FleetSpec, FleetWorkload, GpuPrice, PoolConfig, PoolOption
from tests.planner.test_capacity_disagg import H100
from tests.planner.test_fleet import candidate
from tests.planner.test_plan_disagg import A100, FP16_ALL, LINK, LLAMA_2_70B, SLO, workload

#: $1 per GPU-hour for either type, reserved at the on-demand price (so nothing turns on reservations).
PRICES = {"h100-sxm": GpuPrice(on_demand_usd_per_hour=1.0, reserved_usd_per_hour=1.0)}
PRICES_AB = {**PRICES, "a100-80gb": GpuPrice(on_demand_usd_per_hour=1.0, reserved_usd_per_hour=1.0)}


def pool(role: str, gpu: str, replicas: int, tp: int = 1, spare: int = 0) -> PoolConfig:
    return PoolConfig(
        role=role,
        gpu=gpu,
        tp=tp,
        replicas=replicas,
        weights_precision="fp16",
        kv_precision="fp16",
        batch_limit=None if role == "prefill" else 64,
        chunk_tokens=8192 if role == "prefill" else None,
        rho=0.5,
        binding="ttft",
        spare_replicas=spare,
    )


def option(gpu: str, prefill: int, decode: int, periods: int = 2, name: str | None = None, spare: int = 0) -> PoolOption:
    pair = (pool("prefill", gpu, prefill, spare=spare), pool("decode", gpu, decode, spare=spare))
    return PoolOption(id=name or f"pools-{gpu}", periods=(pair,) * periods)


#: One aggregated candidate serving 1 req/s per 1-GPU replica: 10 req/s needs 10 GPUs.
ONE_RPS = candidate("h100-sxm", 1.0)


def spec(*options: PoolOption, candidates=(ONE_RPS,), prices=PRICES, **kwargs) -> FleetSpec:  # type: ignore[no-untyped-def]
    return FleetSpec(
        workloads=(FleetWorkload(name="w", candidates=candidates, demand_rps=(10.0, 10.0), pool_options=options),),
        prices=prices,
        **kwargs,
    )


def test_cheaper_pools_replace_the_replicas_entirely() -> None:
    """Pools of 2 + 4 H100s against 10 one-GPU replicas: the pools win and no replica runs beside them;
    the fleet costs 6 GPUs × $1 × 2 h."""
    plan = solve_fleet(spec(option("h100-sxm", 2, 4)))
    for period in plan.periods:
        assert period.assignments == ()
        (served,) = period.pools
        assert (served.option, served.prefill.gpus, served.decode.gpus, served.offered_rps) == ("pools-h100-sxm", 2, 4, 10.0)
        assert dict(period.gpus_used) == {"h100-sxm": 6}
    assert plan.cost.total_usd == pytest.approx(12.0)
    assert plan.cost.per_workload_usd["w"] == pytest.approx(12.0)


def test_dearer_pools_are_left_for_the_replicas() -> None:
    plan = solve_fleet(spec(option("h100-sxm", 4, 8)))
    assert all(period.pools == () for period in plan.periods)
    assert all(sum(a.gpus for a in period.assignments) == 10 for period in plan.periods)
    assert plan.cost.total_usd == pytest.approx(20.0)


def test_inventory_rows_count_both_pools_gpus() -> None:
    """The A100 pools (2 + 4 = 6 GPUs) are cheapest, but only 5 A100s exist: the H100 pools (7) run,
    still cheaper than 10 replicas; with 6 A100s the A100 pools run."""
    options = (option("a100-80gb", 2, 4), option("h100-sxm", 3, 4))
    short = solve_fleet(spec(*options, prices=PRICES_AB, inventory={"a100-80gb": 5}))
    assert {p.option for period in short.periods for p in period.pools} == {"pools-h100-sxm"}
    enough = solve_fleet(spec(*options, prices=PRICES_AB, inventory={"a100-80gb": 6}))
    assert {p.option for period in enough.periods for p in period.pools} == {"pools-a100-80gb"}
    assert enough.cost.total_usd == pytest.approx(12.0)


def test_a_pools_only_workload_and_its_shortfall() -> None:
    """Without aggregated candidates the pools must run; an inventory below them is infeasible."""
    plan = solve_fleet(spec(option("h100-sxm", 2, 4), candidates=()))
    assert all(len(period.pools) == 1 for period in plan.periods)
    with pytest.raises(InfeasiblePlanError):
        solve_fleet(spec(option("h100-sxm", 2, 4), candidates=(), inventory={"h100-sxm": 5}))


def test_pools_not_sized_for_n_plus_one_or_the_replica_floor_are_refused() -> None:
    with pytest.raises(PlannerInputError, match="no N\\+1 spare"):
        spec(option("h100-sxm", 2, 4), constraints=FleetConstraints(n_plus_one=True))
    with pytest.raises(PlannerInputError, match="1 < 2 replicas"):
        spec(option("h100-sxm", 1, 4), constraints=FleetConstraints(min_replicas=2))
    spec(option("h100-sxm", 3, 5, spare=1), constraints=FleetConstraints(n_plus_one=True, min_replicas=2))  # sized for both
    with pytest.raises(PlannerInputError):  # one pair of pools per period
        FleetWorkload(name="w", candidates=(ONE_RPS,), demand_rps=(1.0,), pool_options=(option("h100-sxm", 1, 1),))


def test_n_plus_one_pools_with_their_spares_replace_the_spared_replicas() -> None:
    """Under N+1 the replicas need 10 + 1 one-GPU replicas per period; pools of 3 + 5 H100s with a spare each (8)
    are cheaper and run alone; pools of 6 + 6 (12) are left for the replicas; a pools-only workload runs its pools."""
    n_plus_one = FleetConstraints(n_plus_one=True)
    cheap = solve_fleet(spec(option("h100-sxm", 3, 5, spare=1), constraints=n_plus_one))
    for period in cheap.periods:
        assert period.assignments == ()
        (served,) = period.pools
        assert (served.prefill.spare_replicas, served.decode.spare_replicas) == (1, 1)
    assert cheap.cost.total_usd == pytest.approx(16.0)  # 8 GPUs × $1 × 2 h
    dear = solve_fleet(spec(option("h100-sxm", 6, 6, spare=1), constraints=n_plus_one))
    assert all(period.pools == () for period in dear.periods)
    assert dear.cost.total_usd == pytest.approx(22.0)  # 11 replicas × $1 × 2 h
    alone = solve_fleet(spec(option("h100-sxm", 6, 6, spare=1), candidates=(), constraints=n_plus_one))
    assert alone.cost.total_usd == pytest.approx(24.0)


def test_pool_options_carry_n_plus_one_spares_and_the_replica_floor() -> None:
    """plan_disagg sizes each period's pools within the fleet's constraints: under N+1 every pool of a period with
    demand has its spare and no fewer GPUs than without; the idle period takes none; min_replicas floors every pool."""
    common = {
        "gpus": [H100],
        "model": LLAMA_2_70B,
        "precisions": [FP16_ALL],
        "tps": [2, 4, 8],
        "workload": workload(1.0),
        "slo": SLO,
        "link": LINK,
        "demand_rps": [0.0, 5.0, 20.0],
    }
    (plain,) = pool_options(**common)  # type: ignore[arg-type]
    (spared,) = pool_options(**common, constraints=FleetConstraints(n_plus_one=True))  # type: ignore[arg-type]
    assert all(p.spare_replicas == 0 for p in spared.periods[0])
    for before, after in zip(plain.periods[1:], spared.periods[1:], strict=True):
        assert all(p.spare_replicas == 1 for p in after)
        assert sum(p.gpus for p in after) >= sum(p.gpus for p in before)
    assert sum(p.gpus for pair in spared.periods for p in pair) > sum(p.gpus for pair in plain.periods for p in pair)
    (floored,) = pool_options(**common, constraints=FleetConstraints(min_replicas=2))  # type: ignore[arg-type]
    assert all(p.replicas >= 2 for pair in floored.periods for p in pair)
    assert any(p.replicas < 2 for pair in plain.periods for p in pair)  # else the floor would not bind


def test_pool_options_are_sized_for_an_e2e_target() -> None:
    """An E2E target tighter than the pools' predicted E2E without it (planner/plan_disagg.py bounds the decode pool):
    the options are offered and hold no fewer GPUs."""
    common = {
        "gpus": [H100],
        "model": LLAMA_2_70B,
        "precisions": [FP16_ALL],
        "tps": [2, 4, 8],
        "workload": workload(1.0),
        "link": LINK,
        "demand_rps": [5.0],
    }
    (plain,) = pool_options(**common, slo=SLO)  # type: ignore[arg-type]
    (bounded,) = pool_options(**common, slo=dataclasses.replace(SLO, e2e_s=13.0))  # type: ignore[arg-type]
    assert sum(p.gpus for p in bounded.periods[0]) >= sum(p.gpus for p in plain.periods[0])
    assert bounded.periods != plain.periods  # the target binds: the 70B pools without it decode a p99 output past 13 s


def test_pool_options_are_plan_disagg_pools_per_period() -> None:
    """Each GPU type alone and both together; each period's pools are plan_disagg's cheapest at its
    demand, so more demand never holds fewer GPUs; an idle period keeps one replica per pool."""
    options = pool_options(
        gpus=[H100, A100],
        model=LLAMA_2_70B,
        precisions=[FP16_ALL],
        tps=[2, 4, 8],
        workload=workload(1.0),
        slo=SLO,
        link=LINK,
        demand_rps=[0.0, 5.0, 20.0],
    )
    ids = {o.id for o in options}
    assert {"pools-h100-sxm", "pools-a100-80gb-sxm"} <= ids
    for o in options:
        idle, low, high = (sum(p.gpus for p in pair) for pair in o.periods)
        assert all(p.replicas == 1 for p in o.periods[0])
        assert idle <= low <= high
    mixed = [o for o in options if o.id == "pools-any-gpus"]
    if mixed:  # offered only when it differs from both single-type options
        assert len(mixed[0].gpu_types) == 2


def test_an_option_runs_in_every_period_or_none() -> None:
    """Demand 10 then 1 req/s: pools of 6 GPUs in both periods (12 GPU-hours) against 10 + 1 replicas
    (11): the replicas win, though pools in the busy period and a replica in the quiet one (7) would be
    cheaper — an option is one topology for the whole horizon."""
    busy_then_quiet = FleetSpec(
        workloads=(
            FleetWorkload(name="w", candidates=(ONE_RPS,), demand_rps=(10.0, 1.0), pool_options=(option("h100-sxm", 2, 4),)),
        ),
        prices=PRICES,
    )
    plan = solve_fleet(busy_then_quiet)
    assert all(period.pools == () for period in plan.periods)
    assert plan.cost.total_usd == pytest.approx(11.0)
