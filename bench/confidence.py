"""Grade every catalog GPU's calibration from its evidence and write the grades into the catalog.

    .venv/bin/python -m bench.confidence                   # print the evidence and grades
    .venv/bin/python -m bench.confidence --write-catalog   # also write them into catalog/data/gpus.json and docs/calibration.md

The evidence of a GPU (planner/confidence.py CalibrationEvidence): the points and distinct sources
its own fit used (bench/fidelity.py `fit_gpu`, points marked `"fit": false` left out), the median
magnitude of its points' leave-one-source-out and leave-one-model-out errors (bench/fidelity.py;
`out_of_sample_error` says which count), whether its efficiencies are carried over from another GPU
(bench/fidelity.py CARRY_OVER) and whether its fit lies below the usual range (LOW CONFIDENCE).
A carried-over GPU reports its donor's points and sources only through `carried_over_from`: it has
none of its own. The grade is `planner.confidence.calibration_grade` of that evidence.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.fidelity import (
    CALIBRATION_DOC,
    CARRY_OVER,
    GPUS_JSON,
    Measurement,
    below_plausible,
    by_gpu,
    fit_gpu,
    fittable_gpus,
    fitted_measurements,
    leave_one_model_out,
    leave_one_source_out,
    load_measurements,
    open_reference_catalog,
    render_calibration_doc,
)
from planner.calibration import CalibrationFit
from planner.confidence import (
    FITTED_PARAMETERS,
    INDEPENDENT_SOURCES,
    NOISE_ERROR,
    OUTLIER_ERROR,
    CalibrationEvidence,
    calibration_grade,
)


def _median_error(points: Sequence[Measurement], predictions: Mapping[str, float]) -> float:
    return statistics.median(abs(predictions[m.record["id"]] / m.point.value - 1.0) for m in points)


def out_of_sample_error(points: Sequence[Measurement], loso: Mapping[str, float], lomo: Mapping[str, float]) -> float:
    """Median |error| of a GPU's points held out by source and by model, the worse of the two.

    A scheme counts only where the GPU has points of at least two of its groups (sources, models):
    holding out a GPU's only source leaves the GPU no point of its own, so its points are then
    predicted from the other GPUs' fits, which measures how unlike the other GPUs it is, not how
    well its own fit generalises. Where neither scheme keeps points of the GPU (one source, one
    model), the error of that cross-GPU prediction is all there is, and is what is reported."""
    schemes = [
        (predictions, len({group(m) for m in points}))
        for predictions, group in ((loso, lambda m: m.record["source"]), (lomo, lambda m: m.model.slug))
    ]
    own = [predictions for predictions, groups in schemes if groups >= 2] or [predictions for predictions, _ in schemes]
    return max(_median_error(points, predictions) for predictions in own)


def gpu_evidence(
    all_gpus: Sequence[str],
    measurements: Sequence[Measurement],
    fits: Mapping[str, CalibrationFit],
    loso: Mapping[str, float],
    lomo: Mapping[str, float],
) -> dict[str, CalibrationEvidence]:
    """The evidence behind every GPU that ships a calibration (its own fit or a CARRY_OVER donor's)."""
    fitted_by_gpu = by_gpu(fitted_measurements(measurements))
    evidence: dict[str, CalibrationEvidence] = {}
    for slug in all_gpus:
        if slug in fits:
            points = fitted_by_gpu[slug]
            evidence[slug] = CalibrationEvidence(
                points=len(points),
                sources=len({m.record["source"] for m in points}),
                out_of_sample_error=out_of_sample_error(points, loso, lomo),
                below_usual_range=bool(below_plausible(fits[slug])),
            )
        elif CARRY_OVER.get(slug) in fits:
            donor = CARRY_OVER[slug]
            evidence[slug] = CalibrationEvidence(
                points=0,
                sources=0,
                out_of_sample_error=None,
                carried_over_from=donor,
                below_usual_range=bool(below_plausible(fits[donor])),
            )
    return evidence


def confidence_block(evidence: CalibrationEvidence) -> dict[str, Any]:
    """The catalog's `efficiency.confidence` block: the grade and the evidence it was given for."""
    error = evidence.out_of_sample_error
    return {
        "grade": calibration_grade(evidence),
        "points": evidence.points,
        "sources": evidence.sources,
        "out_of_sample_error": None if error is None else round(error, 4),
        "carried_over_from": evidence.carried_over_from,
        "below_usual_range": evidence.below_usual_range,
    }


def write_catalog_confidence(blocks: Mapping[str, Mapping[str, Any]], path: Path = GPUS_JSON) -> None:
    """Set `efficiency.confidence` of each listed GPU, leaving everything else in the file as it is."""
    gpus = json.loads(path.read_text(encoding="utf-8"))
    for gpu in gpus:
        if gpu["slug"] in blocks and gpu.get("efficiency") is not None:
            gpu["efficiency"]["confidence"] = dict(blocks[gpu["slug"]])
    path.write_text(json.dumps(gpus, indent=2) + "\n", encoding="utf-8")


def evidence_table(blocks: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The Markdown table docs/calibration.md shows."""
    lines = [
        "| GPU | grade | points | sources | out-of-sample error | carried over from | below usual range |",
        "|---|---|---|---|---|---|---|",
    ]
    for slug, block in sorted(blocks.items()):
        error = block["out_of_sample_error"]
        lines.append(
            f"| {slug} | {block['grade']} | {block['points']} | {block['sources']} | "
            f"{'—' if error is None else f'{error:.1%}'} | {block['carried_over_from'] or '—'} | "
            f"{'yes' if block['below_usual_range'] else 'no'} |"
        )
    return lines


CONFIDENCE_HEADING = "## Confidence of each calibration"


def confidence_section(blocks: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """docs/calibration.md's section on the grades: the rule, why its thresholds, the evidence."""
    return [
        CONFIDENCE_HEADING,
        "",
        "Generated with the rest of this page by `bench/fidelity.py` (`bench/confidence.py --write-catalog` rewrites this",
        "section alone and the grades in catalog/data/gpus.json). Each GPU's efficiency block carries",
        "`confidence: {grade, points, sources, out_of_sample_error, carried_over_from, below_usual_range}`; plans name the",
        "grade of every GPU they run on, warn when the plan or a priced alternative rests on a **low** grade, and",
        "`constraints.min_confidence` leaves lower-graded GPUs out. The rule (`planner/confidence.py`, first match wins):",
        "",
        "- **low**: no published point of its own (carried over from another GPU: an assumption, not a measurement); fitted",
        "  η below the range every other GPU fits (LOW CONFIDENCE: the points pay a cost the model has no term for); no more",
        f"  points than the fit's {FITTED_PARAMETERS} parameters (the fit interpolates, its residuals say nothing); or an",
        f"  out-of-sample error above {OUTLIER_ERROR:.0%} — twice the fit's soft-L1 noise scale, where the fit's own loss",
        "  already treats a residual as an outlier.",
        f"- **high**: at least {INDEPENDENT_SOURCES} independent sources (one source cannot show its own method's bias) and an",
        f"  out-of-sample error within {NOISE_ERROR:.0%}, the fit's noise scale (f_scale): held-out points predicted as well as the",
        "  scatter the fit tolerates between sources.",
        "- **medium**: otherwise.",
        "",
        "Out-of-sample error: the median |predicted / measured − 1| of the GPU's fitted points predicted by fits that never",
        "saw the point's source (leave-one-source-out) or its model (leave-one-model-out), the worse of the two. A scheme",
        "counts only where the GPU has at least two of its groups: holding out a GPU's only source leaves it no point, and",
        "its points are then predicted from the other GPUs' fits; with one source and one model (l40s) that cross-GPU",
        "error is all there is, and is what is reported.",
        "",
        *evidence_table(blocks),
        "",
    ]


def with_confidence_section(text: str, blocks: Mapping[str, Mapping[str, Any]]) -> str:
    """docs/calibration.md's text with its confidence section put in (or replaced), before Sources."""
    section = "\n".join(confidence_section(blocks)) + "\n"
    if CONFIDENCE_HEADING in text:
        start = text.index(CONFIDENCE_HEADING)
        end = text.index("\n## ", start) + 1
        return text[:start] + section + text[end:]
    at = text.index("## Sources")
    return text[:at] + section + text[at:]


def write_calibration_doc_section(blocks: Mapping[str, Mapping[str, Any]], path: Path = CALIBRATION_DOC) -> None:
    """Put (or replace) the confidence section in docs/calibration.md, before its Sources section."""
    path.write_text(with_confidence_section(path.read_text(encoding="utf-8"), blocks), encoding="utf-8")


def confidence_blocks(
    all_gpus: Sequence[str],
    measurements: Sequence[Measurement],
    fits: Mapping[str, CalibrationFit],
    loso: Mapping[str, float],
    lomo: Mapping[str, float],
) -> dict[str, dict[str, Any]]:
    """Every shipped calibration's `efficiency.confidence` block, by GPU."""
    evidence = gpu_evidence(all_gpus, measurements, fits, loso, lomo)
    return {slug: confidence_block(e) for slug, e in evidence.items()}


def calibration_doc(
    document: Mapping[str, Any],
    measurements: Sequence[Measurement],
    fits: Mapping[str, CalibrationFit],
    efficiency: Mapping[str, Mapping[str, Any]],
    confidence: Mapping[str, Mapping[str, Any]],
    today: str,
) -> str:
    """The whole of docs/calibration.md: bench/fidelity.py's fit and residuals with the confidence grades."""
    return with_confidence_section(render_calibration_doc(document, measurements, fits, efficiency, today), confidence)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--write-catalog",
        action="store_true",
        help="write efficiency.confidence into catalog/data/gpus.json and the grades into docs/calibration.md",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as directory:
        catalog = open_reference_catalog(Path(directory))
        _, measurements = load_measurements(catalog)
        catalog.session.close()
    fits = {gpu: fit_gpu(points) for gpu, points in fittable_gpus(measurements).items()}
    all_gpus = [gpu["slug"] for gpu in json.loads(GPUS_JSON.read_text(encoding="utf-8"))]
    blocks = confidence_blocks(
        all_gpus, measurements, fits, leave_one_source_out(measurements), leave_one_model_out(measurements)
    )
    if args.write_catalog:
        write_catalog_confidence(blocks)
        write_calibration_doc_section(blocks)
    print("\n".join(evidence_table(blocks)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
