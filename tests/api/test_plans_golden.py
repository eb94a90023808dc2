"""Golden plans: canonical scenarios planned through the real app on the shipped reference catalog,
compared with the reviewed answers in tests/golden/ on their stable fields (the decisions, the
cost, the predicted percentiles, the verification outcome).

After a deliberate change, `HEADROOM_UPDATE_GOLDEN=1 .venv/bin/python -m pytest tests/api/test_plans_golden.py`
rewrites the `.response.json` files; review their diff like code.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI

from api.app import create_app
from api.settings import Settings
from catalog.db import make_engine, make_session_factory
from catalog.migrate import upgrade
from catalog.repository import Catalog
from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS, ADMIN_KEY

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
SCENARIOS = sorted(path.name.removesuffix(".request.json") for path in GOLDEN.glob("*.request.json"))
UPDATE = os.environ.get("HEADROOM_UPDATE_GOLDEN") == "1"
#: Relative tolerance on every number: far above floating-point noise, far below any change a reviewer should see.
RELATIVE_TOLERANCE = 1e-3
PLAN_FIELDS = ("gpu", "tp", "replicas", "gpus_total", "precision", "batch_limit", "chunk_tokens", "target_rho")


@pytest.fixture(scope="module")
def golden_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiClient]:
    url = f"sqlite:///{tmp_path_factory.mktemp('golden') / 'headroom.db'}"
    upgrade(url)
    engine = make_engine(url)
    with make_session_factory(engine)() as session:
        assert Catalog(session).load_reference_catalog()
        session.commit()
    engine.dispose()
    app: FastAPI = create_app(Settings(database_url=url, admin_key=ADMIN_KEY))
    client = ApiClient(app)
    yield client
    client.close()
    app.state.engine.dispose()


def _rounded(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {key: _rounded(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_rounded(item) for item in value]
    return value


def stable_fields(plan: dict[str, Any]) -> dict[str, Any]:
    """What a reviewed diff should show: decisions, cost, predictions, verification outcome."""
    verification = plan["verification"]
    return _rounded(
        {
            "plan": {key: plan["plan"][key] for key in PLAN_FIELDS},
            "cost": {key: plan["cost"][key] for key in ("usd_per_hour", "usd_per_month", "usd_per_million_output_tokens")},
            "predicted": {key: plan["predicted"][key] for key in ("ttft_ms", "tpot_ms", "e2e_s", "output_tokens_per_s")},
            "binding": sorted(
                b["constraint"] for b in plan["justification"]["binding"] if b["binding"] and b["kind"] in ("slo", "capacity")
            ),
            "verification": None
            if verification is None
            else {
                "meets_slo": verification["meets_slo"],
                "adjustments": [a["action"] for a in verification.get("adjustments", [])],
            },
        }
    )


def assert_close(actual: Any, expected: Any, path: str = "") -> None:
    if isinstance(expected, float) or isinstance(actual, float):
        assert isinstance(actual, int | float) and isinstance(expected, int | float), f"{path}: {actual!r} vs {expected!r}"
        assert math.isclose(actual, expected, rel_tol=RELATIVE_TOLERANCE, abs_tol=1e-9), f"{path}: {actual} vs golden {expected}"
    elif isinstance(expected, dict):
        assert isinstance(actual, dict) and actual.keys() == expected.keys(), f"{path}: keys {actual} vs {expected}"
        for key in expected:
            assert_close(actual[key], expected[key], f"{path}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), f"{path}: {actual} vs {expected}"
        for index, (a, e) in enumerate(zip(actual, expected, strict=True)):
            assert_close(a, e, f"{path}[{index}]")
    else:
        assert actual == expected, f"{path}: {actual!r} vs golden {expected!r}"


def test_there_are_the_five_canonical_scenarios() -> None:
    assert {"chat-8b", "rag-70b", "batch-summarisation", "moe-mixtral", "strict-tpot-70b"} <= set(SCENARIOS)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_golden_plan(golden_client: ApiClient, scenario: str) -> None:
    request = json.loads((GOLDEN / f"{scenario}.request.json").read_text(encoding="utf-8"))
    response = golden_client.post("/v1/plans", json=request, headers=ADMIN_HEADERS)
    assert response.status_code == 201, response.text
    plan = response.json()
    slo = request["slo"]
    predicted = plan["predicted"]
    for metric, key, scale in (("ttft_ms", "ttft_ms", 1.0), ("tpot_ms", "tpot_ms", 1.0), ("e2e_s", "e2e_s", 1.0)):
        if metric in slo:
            assert predicted[key]["at_percentile"] <= slo[metric] * scale
    if plan["verification"] is not None:
        assert plan["verification"]["meets_slo"] is True
    actual = stable_fields(plan)
    golden = GOLDEN / f"{scenario}.response.json"
    if UPDATE or not golden.exists():
        golden.write_text(json.dumps(actual, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        if not UPDATE:
            pytest.fail(f"wrote a new golden {golden.name}: review it and commit it")
    assert_close(actual, json.loads(golden.read_text(encoding="utf-8")))
