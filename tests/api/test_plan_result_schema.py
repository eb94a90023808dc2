"""The plan result's response models (api/schemas/plan_result.py) against what the planner emits:
every golden scenario (and variants that add each MILP constraint family, a mixed fleet, no
verification, an infeasible request) planned through the real app validates with every model
forbidding undeclared members; the models mirror planner/plan_result.py's records field for
field; a hand-built plan round-trips record → model → JSON unchanged; and the OpenAPI schema has no
untyped object anywhere in it."""

from __future__ import annotations

import copy
import dataclasses
import json
import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from pydantic import BaseModel

import planner.plan_result as records
from api.app import create_app
from api.schemas import plan_result as reads
from api.settings import Settings
from catalog.db import make_engine, make_session_factory
from catalog.migrate import upgrade
from catalog.repository import Catalog
from planner import advice
from tests.api.client import ApiClient
from tests.api.conftest import ADMIN_HEADERS, ADMIN_KEY
from tests.planner.test_plan_result import (
    sample_justification,
    sample_predicted,
    sample_provenance,
    sample_relaxations,
    sample_verification,
)

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
SCENARIOS = sorted(path.name.removesuffix(".request.json") for path in GOLDEN.glob("*.request.json"))
#: chat-8b with every MILP constraint family present (the h100-pcie inventory names a GPU it can use).
LIMITS = {"budget_usd_per_hour": 1000, "max_gpus": 64, "min_replicas": 2, "n_plus_one": True, "inventory": {"h100-pcie": 16}}
VARIANTS: dict[str, dict[str, Any]] = {
    "limits": {"constraints": LIMITS},
    "mixed-fleet": {"constraints": {"mixed_fleet": True, "inventory": {"h100-pcie": 2}}},
    "unverified": {"verify": False},
}
#: (record, model) pairs whose JSON members must be the same names.
MIRRORS: tuple[tuple[type, type[BaseModel]], ...] = (
    (records.Configuration, reads.ConfigurationRead),
    (records.Percentiles, reads.PercentilesRead),
    (records.FigureOfRecord, reads.FigureOfRecordRead),
    (records.FiguresOfRecord, reads.FiguresOfRecordRead),
    (records.Predicted, reads.PlanPredicted),
    (records.P99Intervals, reads.P99IntervalsRead),
    (records.SimulatedFigures, reads.SimulatedFiguresRead),
    (records.VerificationRow, reads.VerificationRowRead),
    (records.AddReplica, reads.AddReplicaRead),
    (records.NextCandidate, reads.NextCandidateRead),
    (records.Verification, reads.VerificationRead),
    (records.StepModelSection, reads.StepModelSectionRead),
    (records.MemorySection, reads.MemorySectionRead),
    (records.DecodeRoofline, reads.DecodeRooflineRead),
    (records.PrefillRoofline, reads.PrefillRooflineRead),
    (records.RooflineSection, reads.RooflineSectionRead),
    (records.LittlesLaw, reads.LittlesLawRead),
    (records.RhoPoint, reads.RhoPointRead),
    (records.QueueingSection, reads.QueueingSectionRead),
    (records.UnstableQueueing, reads.UnstableQueueingRead),
    (records.SloBinding, reads.SloBindingRead),
    (records.CapacityBinding, reads.CapacityBindingRead),
    (records.ConstraintBinding, reads.ConstraintBindingRead),
    (records.Alternative, reads.AlternativeRead),
    (records.SameConfiguration, reads.SameConfigurationRead),
    (records.SensitivityEntry, reads.SensitivityEntryRead),
    (records.Sensitivity, reads.SensitivityRead),
    (records.CandidatesSection, reads.CandidatesSectionRead),
    (records.Justification, reads.JustificationRead),
    (records.Provenance, reads.PlanProvenance),
    (records.Relaxation, reads.RelaxationRead),
)
#: The edge's unit conversion: the headline TTFT and TPOT in ms.
EDGE_NAMES = {"ttft_s": "ttft_ms", "tpot_s": "tpot_ms"}


@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    """Every golden scenario and each variant of chat-8b, planned through the real app."""
    url = f"sqlite:///{tmp_path_factory.mktemp('plan-result') / 'headroom.db'}"
    upgrade(url)
    engine = make_engine(url)
    with make_session_factory(engine)() as session:
        assert Catalog(session).load_reference_catalog()
        session.commit()
    engine.dispose()
    # the infeasible request's unhurried advice (below) takes ~10 s on a quiet machine; the service's 30 s
    # request timeout is not what this test is about, so a loaded machine gets room
    app: FastAPI = create_app(Settings(database_url=url, admin_key=ADMIN_KEY, request_timeout_s=300.0))
    client = ApiClient(app)
    requests = {name: json.loads((GOLDEN / f"{name}.request.json").read_text(encoding="utf-8")) for name in SCENARIOS}
    base = {key: value for key, value in requests["chat-8b"].items() if key != "name"}
    for name, change in VARIANTS.items():
        requests[name] = {**copy.deepcopy(base), **change}
    requests["infeasible"] = {**copy.deepcopy(base), "slo": {"ttft_ms": 1}}
    answers = {}
    # A module-scoped fixture is set up before the autouse function-scoped `unhurried_advice`
    # (tests/conftest.py), so it lifts the advice's wall clock itself: under a loaded CI machine the
    # infeasible request's advice otherwise stopped at MAX_ADVICE_S with no relaxation found.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(advice, "MAX_ADVICE_S", math.inf)
        for name, body in requests.items():
            response = client.post("/v1/plans", json=body, headers=ADMIN_HEADERS)
            assert response.status_code == (422 if name == "infeasible" else 201), f"{name}: {response.text}"
            answers[name] = response.json()
    yield answers
    client.close()
    app.state.engine.dispose()


def _json_names(record: type) -> set[str]:
    return {f.metadata.get("json", f.name) for f in dataclasses.fields(record)}


def _model_names(model: type[BaseModel]) -> set[str]:
    return {field.alias or name for name, field in model.model_fields.items()}


@pytest.mark.parametrize(("record", "model"), MIRRORS, ids=[model.__name__ for _, model in MIRRORS])
def test_each_response_model_mirrors_its_planner_record(record: type, model: type[BaseModel]) -> None:
    names = _json_names(record)
    if model in (reads.PlanPredicted, reads.FiguresOfRecordRead):
        names = {EDGE_NAMES.get(name, name) for name in names}
    assert _model_names(model) == names
    assert model.model_config.get("extra") == "forbid"


@pytest.mark.parametrize("scenario", [*SCENARIOS, *VARIANTS])
def test_what_the_planner_emits_validates_with_nothing_undeclared(planned: dict[str, dict[str, Any]], scenario: str) -> None:
    """Each section validates and dumps back to the very JSON the app answered (no member lost or renamed)."""
    plan = planned[scenario]
    sections: tuple[tuple[str, type[BaseModel]], ...] = (
        ("justification", reads.JustificationRead),
        ("predicted", reads.PlanPredicted),
        ("provenance", reads.PlanProvenance),
    )
    if scenario != "unverified":
        sections += (("verification", reads.VerificationRead),)
    else:
        assert plan["verification"] is None
    for key, model in sections:
        dumped = model.model_validate(plan[key]).model_dump(mode="json")
        assert _as_emitted(dumped, plan[key]) == plan[key], key


def _as_emitted(dumped: Any, emitted: Any) -> Any:
    """`dumped` without the members `emitted` leaves out, each of which must be its empty default."""
    if isinstance(dumped, dict) and isinstance(emitted, dict):
        left_out = {key: value for key, value in dumped.items() if key not in emitted}
        assert all(value in (None, [], 0) for value in left_out.values()), left_out
        return {key: _as_emitted(value, emitted[key]) for key, value in dumped.items() if key in emitted}
    if isinstance(dumped, list) and isinstance(emitted, list) and len(dumped) == len(emitted):
        return [_as_emitted(d, e) for d, e in zip(dumped, emitted, strict=True)]
    return dumped


def test_the_scenarios_cover_every_binding_kind_the_constraints_set(planned: dict[str, dict[str, Any]]) -> None:
    """The slack of every MILP family the variants set is in some binding list, so each has been validated
    (an inventory's slack appears where its GPU is among the MILP's candidates: in the mixed fleet)."""
    kinds = {entry["kind"] for plan in planned.values() if "justification" in plan for entry in plan["justification"]["binding"]}
    assert {"slo", "capacity", "meet_demand", "min_replicas", "max_gpus", "budget", "n_plus_one", "gpu_inventory"} <= kinds


def test_an_infeasible_answer_carries_relaxations_of_the_one_shape(planned: dict[str, dict[str, Any]]) -> None:
    relaxations = planned["infeasible"]["relaxations"]
    assert relaxations
    for relaxation in relaxations:
        assert reads.RelaxationRead.model_validate(relaxation).model_dump(mode="json", exclude_defaults=True) == {
            k: v for k, v in relaxation.items() if v is not None or k in ("current", "unit")
        }


def _as_json(record: Any) -> Any:
    return json.loads(json.dumps(records.as_dict(record)))


def test_a_hand_built_plan_round_trips_record_to_model_to_json_unchanged() -> None:
    justification = sample_justification()
    assert reads.justification_read(justification).model_dump(mode="json") == json.loads(
        json.dumps(dataclasses.asdict(justification))
    )
    verification = sample_verification()
    model = reads.verification_read(verification)
    assert model is not None
    assert model.model_dump(mode="json") == _as_json(verification)
    assert json.loads(model.model_dump_json())["adjustments"][1]["from"]["gpu"] == "a100-80gb-sxm"
    assert reads.verification_read(None) is None
    assert reads.provenance_read(sample_provenance()).model_dump(mode="json") == _as_json(sample_provenance())
    for relaxation in sample_relaxations():
        assert reads.RelaxationRead.model_validate(relaxation, from_attributes=True).model_dump(mode="json") == _as_json(
            relaxation
        )
    # and the JSON reads back as the same models
    assert reads.JustificationRead.model_validate(_as_json(justification)) == reads.justification_read(justification)
    assert reads.VerificationRead.model_validate(_as_json(verification)) == model


def test_each_binding_and_adjustment_validates_as_its_own_kind() -> None:
    justification = reads.justification_read(sample_justification())
    assert [type(entry).__name__ for entry in justification.binding] == [
        "SloBindingRead",
        "SloBindingRead",
        "CapacityBindingRead",
        "ConstraintBindingRead",
        "ConstraintBindingRead",
    ]
    assert isinstance(justification.queueing, reads.QueueingSectionRead)
    unstable = dataclasses.replace(sample_justification(), queueing=records.UnstableQueueing())
    assert reads.justification_read(unstable).model_dump(mode="json")["queueing"] == {"unstable": True}
    model = reads.verification_read(sample_verification())
    assert model is not None
    assert [type(a).__name__ for a in model.adjustments] == ["AddReplicaRead", "NextCandidateRead", "NextCandidateRead"]


def test_the_headline_prediction_is_in_ms_at_the_edge() -> None:
    """TTFT 0.3 s at the percentile is 300 ms; TPOT 0.03 s is 30 ms; E2E stays 6 s in seconds; the
    simulator's TTFT CI [0.28, 0.33] s is [280, 330] ms."""
    predicted = reads.predicted_read(sample_predicted())
    assert predicted.ttft_ms.at_percentile == pytest.approx(300.0)
    assert predicted.tpot_ms.at_percentile == pytest.approx(30.0)
    assert predicted.e2e_s.at_percentile == pytest.approx(6.0)
    assert predicted.of_record is not None
    assert (predicted.of_record.ttft_ms.ci_low, predicted.of_record.ttft_ms.ci_high) == (
        pytest.approx(280.0),
        pytest.approx(330.0),
    )
    assert predicted.of_record.e2e_s.model_dump() == {"value": 6.0, "method": "analytic", "ci_low": None, "ci_high": None}
    assert reads.PlanPredicted.model_validate(predicted.model_dump(mode="json")) == predicted


def _untyped(schema: Any, path: str = "#") -> Iterator[str]:
    """Paths of schema nodes that admit any value: `{}`, or an object with untyped extra members."""
    if isinstance(schema, dict):
        if schema == {} or (
            schema.get("type") == "object"
            and "properties" not in schema
            and not isinstance(schema.get("additionalProperties"), dict)
        ):
            yield path
        if schema.get("additionalProperties") in (True, {}):
            yield f"{path}.additionalProperties"
        for key, value in schema.items():
            if key not in ("default", "examples", "const", "enum"):
                yield from _untyped(value, f"{path}/{key}")
    elif isinstance(schema, list):
        for index, value in enumerate(schema):
            yield from _untyped(value, f"{path}/{index}")


@pytest.mark.parametrize(
    "model",
    [reads.JustificationRead, reads.VerificationRead, reads.PlanPredicted, reads.PlanProvenance, reads.RelaxationRead],
    ids=lambda m: m.__name__,
)
def test_the_openapi_schema_types_every_member(model: type[BaseModel]) -> None:
    """No dict[str, Any] on the way: the only maps are typed (SLO lines by metric, efficiencies by GPU)."""
    for mode in ("validation", "serialization"):
        schema = model.model_json_schema(mode=mode)
        assert list(_untyped(schema)) == [], mode


def test_the_justification_schema_names_its_maps_and_its_unions() -> None:
    schema = reads.JustificationRead.model_json_schema(mode="serialization")
    defs = schema["$defs"]
    assert defs["QueueingSectionRead"]["properties"]["slo_lines_s"]["additionalProperties"] == {"type": "number"}
    assert defs["QueueingSectionRead"]["properties"]["slo_lines_s"]["propertyNames"] == {"enum": ["ttft", "tpot", "e2e"]}
    binding = schema["properties"]["binding"]["items"]
    assert binding["discriminator"]["propertyName"] == "kind"
    assert set(binding["discriminator"]["mapping"]) == {
        "slo",
        "capacity",
        "meet_demand",
        "n_plus_one",
        "min_replicas",
        "max_gpus",
        "budget",
        "gpu_inventory",
    }
    provenance = reads.PlanProvenance.model_json_schema(mode="serialization")
    assert provenance["properties"]["efficiencies"]["additionalProperties"] == {"$ref": "#/$defs/EfficiencyRead"}
