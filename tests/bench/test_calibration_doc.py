"""`python -m bench.fidelity` writes the whole of docs/calibration.md, its confidence section included."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from bench import fidelity
from bench.confidence import CONFIDENCE_HEADING, evidence_table, with_confidence_section

#: Two GPUs keep the end-to-end run to seconds (each has a fit of its own; l4 and mi325x are carried over from them).
GPUS = ("l40s", "mi300x")


def _blocks(grade: str) -> dict[str, dict[str, Any]]:
    return {
        "l40s": {
            "grade": grade,
            "points": 6,
            "sources": 1,
            "out_of_sample_error": 0.2,
            "carried_over_from": None,
            "below_usual_range": False,
        }
    }


def test_fidelity_writes_the_calibration_doc_with_its_confidence_section(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    load = fidelity.load_measurements

    def two_gpus(catalog: Any, path: Path = fidelity.MEASUREMENTS) -> tuple[dict[str, Any], list[Any]]:
        document, measurements = load(catalog, path)
        return document, [m for m in measurements if m.gpu.slug in GPUS]

    monkeypatch.setattr(fidelity, "load_measurements", two_gpus)
    monkeypatch.setattr(fidelity, "CALIBRATION_DOC", tmp_path / "calibration.md")
    monkeypatch.setattr(fidelity, "FIDELITY_DOC", tmp_path / "fidelity-performance.md")
    assert fidelity.main(["--date", "2026-12-04"]) == 0

    doc = (tmp_path / "calibration.md").read_text(encoding="utf-8")
    assert doc.count(CONFIDENCE_HEADING) == 1
    assert doc.index("## Fitted values") < doc.index(CONFIDENCE_HEADING) < doc.index("## Sources")
    section = doc[doc.index(CONFIDENCE_HEADING) : doc.index("## Sources")]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| GPU")]
    # Each GPU with a fit of its own, and each GPU carried over from one of them.
    carried = {slug for slug, donor in fidelity.CARRY_OVER.items() if donor in GPUS}
    assert "mi325x" in carried
    assert sorted(row.split(" | ")[0].removeprefix("| ") for row in rows) == sorted({*GPUS, *carried})
    # A calibration carried over from another GPU is graded low whatever its donor's evidence (planner/confidence.py).
    assert "| mi325x | low | 0 | 0 | — | mi300x |" in section


def test_the_confidence_section_is_replaced_not_repeated() -> None:
    text = "# Calibration\n\n## Fitted values\n\nx\n\n## Sources\n\ny\n"
    once = with_confidence_section(text, _blocks("medium"))
    assert once.index("## Fitted values") < once.index(CONFIDENCE_HEADING) < once.index("## Sources")
    again = with_confidence_section(once, _blocks("low"))
    assert again.count(CONFIDENCE_HEADING) == 1
    assert "| l40s | low |" in again and "| l40s | medium |" not in again
    assert again == with_confidence_section(text, _blocks("low"))


def test_the_shipped_doc_shows_the_grades_the_catalog_ships() -> None:
    gpus = json.loads(fidelity.GPUS_JSON.read_text(encoding="utf-8"))
    shipped = {gpu["slug"]: gpu["efficiency"]["confidence"] for gpu in gpus if (gpu.get("efficiency") or {}).get("confidence")}
    doc = fidelity.CALIBRATION_DOC.read_text(encoding="utf-8")
    assert shipped and doc.count(CONFIDENCE_HEADING) == 1
    for line in evidence_table(shipped):
        assert line in doc
