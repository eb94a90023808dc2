"""The benchmark scripts' fleet requests stay inside what one request may ask (the size bounds of
api/schemas/fleet_plans.py): a scenario that grows past a bound would make its benchmark answer 422
instead of measuring anything, which is how `distinct` broke when MAX_DISTINCT_SHAPES arrived."""

from __future__ import annotations

import pytest

from api.schemas.fleet_plans import MAX_DISTINCT_SHAPES, FleetPlanRequest
from bench import fleet_api_benchmark


@pytest.mark.parametrize("name", sorted(fleet_api_benchmark.SCENARIOS))
def test_every_fleet_api_benchmark_scenario_is_a_request_the_service_accepts(name: str) -> None:
    body = fleet_api_benchmark.SCENARIOS[name]()
    request = FleetPlanRequest.model_validate(body)
    assert request.field_errors() == []
    assert 1 <= request.distinct_shapes() <= MAX_DISTINCT_SHAPES


def test_the_distinct_scenario_gives_every_workload_a_shape_of_its_own() -> None:
    request = FleetPlanRequest.model_validate(fleet_api_benchmark.distinct_scenario())
    assert request.distinct_shapes() == len(request.workloads) == MAX_DISTINCT_SHAPES
