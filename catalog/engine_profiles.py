"""Engine profiles and low-precision factors: rows in, planner records out (planner/engines.py).

`EngineProfiles(session)` works inside the caller's transaction (flushes, never commits), like
`Catalog`. The reference data is catalog/data/engine_profiles.json (bench/engine_profiles.py writes
it); `load_reference` fills empty tables from it (the reference catalog load calls it).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from catalog.errors import CatalogError, InvalidRecordError
from catalog.models import EngineProfileRow, GpuRow, LowPrecisionFactorRow
from planner.engines import EngineProfile, LowPrecisionFactor
from planner.errors import PlannerInputError
from planner.specs import Efficiency

REFERENCE_PATH = Path(__file__).resolve().parent / "data" / "engine_profiles.json"
MS_PER_S = 1e3


class EngineProfiles:
    """The engine profiles and low-precision factors of one catalog database."""

    def __init__(self, session: Session) -> None:
        self.session = session

    def is_empty(self) -> bool:
        profiles = self.session.scalar(select(func.count()).select_from(EngineProfileRow)) or 0
        factors = self.session.scalar(select(func.count()).select_from(LowPrecisionFactorRow)) or 0
        return profiles == 0 and factors == 0

    def load_reference(self, path: Path = REFERENCE_PATH) -> bool:
        """Fill empty tables from `path` (profiles of GPUs the catalog lacks are skipped); False when not empty."""
        if not self.is_empty() or not path.exists():
            return False
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise CatalogError(f"cannot read reference data {path}: {error}", path=str(path)) from error
        self.save(document.get("profiles", []), document.get("low_precision", []))
        return True

    def save(self, profiles: Sequence[Mapping[str, Any]], factors: Sequence[Mapping[str, Any]]) -> None:
        """Add profile and factor records (the JSON's shape); a record the planner would refuse is InvalidRecordError."""
        gpu_ids = dict(self.session.execute(select(GpuRow.slug, GpuRow.id)).tuples().all())
        for record in profiles:
            if record["gpu"] not in gpu_ids:
                continue
            _profile(record)  # validate before writing
            self.session.add(
                EngineProfileRow(
                    gpu_id=gpu_ids[record["gpu"]],
                    engine=record["engine"],
                    engine_generation=record["engine_generation"],
                    memory=record["memory"],
                    compute=record["compute"],
                    step_overhead_ms=record["step_overhead_ms"],
                    memory_reserve_fraction=record["memory_reserve_fraction"],
                    memory_compute_overlap=record["memory_compute_overlap"],
                    points=record["points"],
                    sources=record["sources"],
                    source=record["source"],
                )
            )
        for record in factors:
            _factor(record)
            self.session.add(
                LowPrecisionFactorRow(
                    architecture=record["architecture"],
                    engine=record["engine"],
                    datatype=record["datatype"],
                    factor=record["factor"],
                    source=record["source"],
                )
            )
        self.session.flush()

    def export(self) -> dict[str, list[dict[str, Any]]]:
        """Every profile and factor as records (catalog/data/engine_profiles.json's shape), in a stable order."""
        query = select(EngineProfileRow, GpuRow.slug).join(GpuRow, GpuRow.id == EngineProfileRow.gpu_id)
        rows = self.session.execute(
            query.order_by(GpuRow.slug, EngineProfileRow.engine, EngineProfileRow.engine_generation)
        ).all()
        factors = self.session.scalars(
            select(LowPrecisionFactorRow).order_by(
                LowPrecisionFactorRow.architecture, LowPrecisionFactorRow.engine, LowPrecisionFactorRow.datatype
            )
        ).all()
        return {
            "profiles": [_record(row, slug) for row, slug in rows],
            "low_precision": [
                {
                    "architecture": r.architecture,
                    "engine": r.engine,
                    "datatype": r.datatype,
                    "factor": r.factor,
                    "source": r.source,
                }
                for r in factors
            ],
        }

    @staticmethod
    def problems(document: Any, gpus: set[str]) -> list[dict[str, str]]:
        """What is wrong with an `engine_profiles` import block (empty when it can be upserted)."""
        if not isinstance(document, Mapping):
            return [{"field": "engine_profiles", "message": "must be an object with profiles and low_precision"}]
        found: list[dict[str, str]] = []
        for plural, check in (("profiles", _profile), ("low_precision", _factor)):
            records = document.get(plural, [])
            if not isinstance(records, list):
                found.append({"field": f"engine_profiles.{plural}", "message": "must be a list"})
                continue
            for index, record in enumerate(records):
                try:
                    check(record if isinstance(record, Mapping) else {})
                except InvalidRecordError as error:
                    found.append({"field": f"engine_profiles.{plural}[{index}]", "message": str(error.detail)})
                    continue
                if plural == "profiles" and record["gpu"] not in gpus:
                    found.append({"field": f"engine_profiles.{plural}[{index}].gpu", "message": f"no GPU {record['gpu']!r}"})
        return found

    def upsert(self, document: Mapping[str, Any]) -> dict[str, int]:
        """Create or update each profile (by GPU, engine, generation) and factor (by architecture, engine, datatype)."""
        counts = {"created": 0, "updated": 0, "unchanged": 0}
        gpu_ids = dict(self.session.execute(select(GpuRow.slug, GpuRow.id)).tuples().all())
        for record in document.get("profiles", []):
            row = self.session.scalar(
                select(EngineProfileRow).where(
                    EngineProfileRow.gpu_id == gpu_ids[record["gpu"]],
                    EngineProfileRow.engine == record["engine"],
                    EngineProfileRow.engine_generation == record["engine_generation"],
                )
            )
            if row is None:
                self.save([record], [])
                counts["created"] += 1
                continue
            values = {key: record[key] for key in _PROFILE_VALUES}
            if all(getattr(row, key) == value for key, value in values.items()):
                counts["unchanged"] += 1
                continue
            for key, value in values.items():
                setattr(row, key, value)
            counts["updated"] += 1
        for record in document.get("low_precision", []):
            factor = self.session.scalar(
                select(LowPrecisionFactorRow).where(
                    LowPrecisionFactorRow.architecture == record["architecture"],
                    LowPrecisionFactorRow.engine == record["engine"],
                    LowPrecisionFactorRow.datatype == record["datatype"],
                )
            )
            if factor is None:
                self.save([], [record])
                counts["created"] += 1
            elif (factor.factor, factor.source) == (record["factor"], record["source"]):
                counts["unchanged"] += 1
            else:
                factor.factor, factor.source = record["factor"], record["source"]
                counts["updated"] += 1
        self.session.flush()
        return counts

    def profiles(self, gpus: Sequence[str] | None = None) -> tuple[EngineProfile, ...]:
        """The stored profiles (of `gpus` only, when given), as planner records."""
        query = select(EngineProfileRow, GpuRow.slug).join(GpuRow, GpuRow.id == EngineProfileRow.gpu_id)
        if gpus is not None:
            query = query.where(GpuRow.slug.in_(list(gpus)))
        rows = self.session.execute(
            query.order_by(GpuRow.slug, EngineProfileRow.engine, EngineProfileRow.engine_generation)
        ).all()
        return tuple(_profile(_record(row, slug)) for row, slug in rows)

    def factors(self) -> tuple[LowPrecisionFactor, ...]:
        rows = self.session.scalars(
            select(LowPrecisionFactorRow).order_by(
                LowPrecisionFactorRow.architecture, LowPrecisionFactorRow.engine, LowPrecisionFactorRow.datatype
            )
        ).all()
        return tuple(
            _factor(
                {
                    "architecture": r.architecture,
                    "engine": r.engine,
                    "datatype": r.datatype,
                    "factor": r.factor,
                    "source": r.source,
                }
            )
            for r in rows
        )


#: The values of a profile row an import may change (its key is GPU, engine and generation).
_PROFILE_VALUES = (
    "memory",
    "compute",
    "step_overhead_ms",
    "memory_reserve_fraction",
    "memory_compute_overlap",
    "points",
    "sources",
    "source",
)


def _record(row: EngineProfileRow, slug: str) -> dict[str, Any]:
    return {
        "gpu": slug,
        "engine": row.engine,
        "engine_generation": row.engine_generation,
        "memory": row.memory,
        "compute": row.compute,
        "step_overhead_ms": row.step_overhead_ms,
        "memory_reserve_fraction": row.memory_reserve_fraction,
        "memory_compute_overlap": row.memory_compute_overlap,
        "points": row.points,
        "sources": row.sources,
        "source": row.source,
    }


def _profile(record: Mapping[str, Any]) -> EngineProfile:
    try:
        return EngineProfile(
            gpu=record["gpu"],
            engine=record["engine"],
            generation=record["engine_generation"],
            efficiency=Efficiency(
                name="calibrated",
                memory=record["memory"],
                compute=record["compute"],
                step_overhead_s=record["step_overhead_ms"] / MS_PER_S,
                memory_reserve_fraction=record["memory_reserve_fraction"],
                include_comm=True,
                memory_compute_overlap=record["memory_compute_overlap"],
                source=record["source"],
            ),
            points=record["points"],
            sources=record["sources"],
            source=record["source"],
        )
    except (KeyError, TypeError, PlannerInputError) as error:
        raise InvalidRecordError(
            f"engine profile {record.get('gpu')}/{record.get('engine')}: {error}",
            errors=[{"field": "engine_profile", "message": str(error)}],
        ) from error


def _factor(record: Mapping[str, Any]) -> LowPrecisionFactor:
    try:
        return LowPrecisionFactor(
            architecture=record["architecture"],
            engine=record["engine"],
            datatype=record["datatype"],
            factor=record["factor"],
            source=record["source"],
        )
    except (KeyError, TypeError, PlannerInputError) as error:
        raise InvalidRecordError(
            f"low-precision factor {dict(record)}: {error}", errors=[{"field": "low_precision", "message": str(error)}]
        ) from error
