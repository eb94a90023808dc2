"""Schemathesis over the whole OpenAPI document, on SQLite and PostgreSQL (issue 22 §5): every
operation gets generated requests, valid and invalid, sent with the admin key so writes land, and
every answer is checked with all of schemathesis' checks: no 5xx, a status the document lists, a
body matching its schema and media type, documented headers in their formats, invalid requests
refused and valid ones accepted, 405 with `Allow` for undeclared methods.

Seeded (hypothesis derandomized), shrinking off, and bounded: FUZZ_CASES cases per database,
heavy operations fewer, and the service runs with a short request timeout and solver limit so a
large fuzzed plan answers 503 (documented) within a second or two instead of planning for 30 s.
"""

from __future__ import annotations

import time
import traceback
from typing import Any

import hypothesis
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, strategies
from schemathesis.generation import GenerationMode
from sqlalchemy.orm import Session

from api.app import create_app
from api.settings import Settings
from catalog.db import make_engine
from catalog.repository import Catalog
from tests.api.conftest import ADMIN_HEADERS, ADMIN_KEY

pytestmark = pytest.mark.slow

#: Examples per operation; the heavy planning operations get fewer (each may run to the timeout).
EXAMPLES_PER_OPERATION = 60
HEAVY_OPERATIONS = {
    "create_fleet_plan": 15,
    "what_if_sweep": 15,
    "create_plan": 30,
    "estimate_capacity": 30,
    "replan_deployment": 30,
    "put_deployment": 30,
    "simulate_configuration": 30,
    "create_calibration": 30,
}
#: Every check enabled. A request valid by the document's JSON Schema may still be refused with a
#: documented 412 (If-Match names another version) or 422: rules across fields (`params_active <=
#: params_total`), references to records that do not exist, and strict types (JSON Schema counts
#: 20.0 as an integer; the service does not) are beyond what JSON Schema says.
CONFIG = schemathesis.Config.from_dict(
    {
        "checks": {
            "positive_data_acceptance": {
                "expected-statuses": ["2XX", "3XX", "401", "403", "404", "409", "412", "422", "429", "5XX"]
            }
        },
    }
)
#: At least this many cases per database per run.
FUZZ_CASES = 2_000


def test_the_whole_api_keeps_its_contract(migrated_database_url: str) -> None:
    engine = make_engine(migrated_database_url)
    with Session(engine) as session, session.begin():
        Catalog(session).load_reference_catalog()  # real GPUs and models, so plans plan
    engine.dispose()
    app = create_app(
        Settings(
            database_url=migrated_database_url,
            admin_key=ADMIN_KEY,
            request_timeout_s=2.0,
            solver_time_limit_s=1.0,
            max_simulated_requests=20_000,
            log_level="critical",
        )
    )
    schema = schemathesis.openapi.from_asgi("/openapi.json", app, config=CONFIG)
    cases = 0
    failures: list[str] = []
    started = time.monotonic()
    try:
        for result in schema.get_all_operations():
            operation = result.ok()
            examples = HEAVY_OPERATIONS.get(operation.definition.raw.get("operationId", ""), EXAMPLES_PER_OPERATION)
            strategy = strategies.one_of(
                operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE)
            )

            @hypothesis.settings(
                max_examples=examples,
                derandomize=True,
                database=None,
                deadline=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @hypothesis.given(case=strategy)
            def fuzz(case: Any) -> None:
                nonlocal cases
                cases += 1
                case.call_and_validate(headers=ADMIN_HEADERS)

            try:
                fuzz()
            except (Exception, BaseExceptionGroup) as exc:  # noqa: BLE001 - every operation's failures are reported together
                failures.append(f"{operation.label}: {''.join(traceback.format_exception_only(exc)).strip()}")
    finally:
        app.state.engine.dispose()
    elapsed_s = time.monotonic() - started
    assert not failures, f"{len(failures)} operation(s) broke the contract:\n\n" + "\n\n".join(failures)
    print(f"{cases} cases in {elapsed_s:.0f} s")
    assert cases >= FUZZ_CASES, f"only {cases} cases in {elapsed_s:.0f} s"
