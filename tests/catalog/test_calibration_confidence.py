"""The calibration's confidence block: validated, stored, exported and read back, graded by the
migration in existing databases, and carried into the planner's GpuSpec."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from catalog import migrate
from catalog.db import make_engine, make_session_factory
from catalog.errors import InvalidRecordError
from catalog.records import canonical_gpu
from catalog.repository import REFERENCE_DATA_DIR, Catalog
from planner.confidence import UNGRADED, CalibrationEvidence, calibration_grade
from tests.catalog.records import h100

REFERENCE_GPUS = {gpu["slug"]: gpu for gpu in json.loads((REFERENCE_DATA_DIR / "gpus.json").read_text(encoding="utf-8"))}
GRADED = {
    "grade": "medium",
    "points": 36,
    "sources": 2,
    "out_of_sample_error": 0.112,
    "carried_over_from": None,
    "below_usual_range": False,
}


def test_every_reference_gpu_is_graded_by_the_rule_from_its_own_evidence() -> None:
    for slug, gpu in REFERENCE_GPUS.items():
        block = gpu["efficiency"]["confidence"]
        evidence = CalibrationEvidence(
            points=block["points"],
            sources=block["sources"],
            out_of_sample_error=block["out_of_sample_error"],
            carried_over_from=block["carried_over_from"],
            below_usual_range=block["below_usual_range"],
        )
        assert block["grade"] == calibration_grade(evidence), slug


def test_the_flagged_and_carried_over_calibrations_are_low() -> None:
    """MI300X's source says LOW CONFIDENCE; mi325x and a100-40gb copy another GPU's fit."""
    assert "LOW CONFIDENCE" in REFERENCE_GPUS["mi300x"]["efficiency"]["source"]
    for slug, donor in (("mi300x", None), ("mi325x", "mi300x"), ("a100-40gb-sxm", "a100-80gb-sxm")):
        block = REFERENCE_GPUS[slug]["efficiency"]["confidence"]
        assert (block["grade"], block["carried_over_from"]) == ("low", donor)


def test_a_confidence_block_is_checked_member_by_member() -> None:
    record = h100()
    record["efficiency"] = {
        "memory": 0.7,
        "compute": 0.5,
        "confidence": {"grade": "certain", "points": -1, "sources": 2, "spread": 1},
    }
    with pytest.raises(InvalidRecordError) as raised:
        canonical_gpu(record)
    fields = {error["field"] for error in raised.value.extensions["errors"]}
    assert fields == {"efficiency.confidence.grade", "efficiency.confidence.points", "efficiency.confidence.spread"}


def test_sources_never_exceed_points() -> None:
    record = h100()
    record["efficiency"] = {"memory": 0.7, "compute": 0.5, "confidence": {**GRADED, "points": 1}}
    with pytest.raises(InvalidRecordError) as raised:
        canonical_gpu(record)
    assert [error["field"] for error in raised.value.extensions["errors"]] == ["efficiency.confidence.sources"]


def test_confidence_is_stored_read_back_and_planned_with(catalog: Catalog) -> None:
    record = h100()
    record["efficiency"] = {"memory": 0.7, "compute": 0.5, "confidence": GRADED}
    catalog.create_gpu(record)
    assert catalog.get_gpu("h100-sxm")["efficiency"]["confidence"] == GRADED
    assert catalog.gpu_spec("h100-sxm").calibration_grade == "medium"
    catalog.update_gpu("h100-sxm", {"efficiency": {"memory": 0.7, "compute": 0.5}})
    assert catalog.get_gpu("h100-sxm")["efficiency"]["confidence"] is None
    assert catalog.gpu_spec("h100-sxm").calibration_grade == UNGRADED


def test_the_reference_grades_survive_export_and_import(catalog: Catalog, tmp_path: Path) -> None:
    assert catalog.load_reference_catalog()
    exported = catalog.export_catalog()
    assert {gpu["slug"]: gpu["efficiency"]["confidence"] for gpu in exported["gpus"]} == {
        slug: gpu["efficiency"]["confidence"] for slug, gpu in REFERENCE_GPUS.items()
    }
    url = f"sqlite:///{tmp_path / 'second.db'}"
    migrate.upgrade(url)
    engine = make_engine(url)
    try:
        with make_session_factory(engine)() as session:
            second = Catalog(session)
            second.import_catalog(json.loads(json.dumps(exported)))
            assert second.export_catalog()["gpus"] == exported["gpus"]
            assert second.gpu_spec("mi300x").calibration_grade == "low"
    finally:
        engine.dispose()


def test_upgrade_grades_an_existing_database_from_the_reference_data(database_url: str) -> None:
    """A database graded nothing before 0007 (its columns dropped by the downgrade) gets the reference
    grades back on upgrade, except on a GPU whose calibration was changed: that evidence is not its own."""
    migrate.upgrade(database_url)
    engine = make_engine(database_url)
    try:
        with make_session_factory(engine)() as session:
            catalog = Catalog(session)
            catalog.load_reference_catalog()
            changed = {**catalog.get_gpu("l40s")["efficiency"], "memory": 0.9}
            catalog.update_gpu("l40s", {"efficiency": changed})
            session.commit()
        migrate.downgrade(database_url, "0006_gpu_prices")
        migrate.upgrade(database_url, "0007_calibration_confidence")
        # read through the ORM, which maps today's columns (0013's scale-out network among them): no
        # migration after 0007 touches the grades, so what 0007 restored is what head holds
        migrate.upgrade(database_url)
        with make_session_factory(engine)() as session:
            catalog = Catalog(session)
            for slug, gpu in REFERENCE_GPUS.items():
                expected = None if slug == "l40s" else gpu["efficiency"]["confidence"]
                assert catalog.get_gpu(slug)["efficiency"]["confidence"] == expected, slug
    finally:
        engine.dispose()
