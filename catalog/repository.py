"""The catalog repository: records in, records and planner specs out; ORM rows stay in here.

`Catalog(session)` works inside the caller's transaction: it flushes (so constraint violations
surface as typed errors at the call) but never commits. After any error from a write, the
caller rolls back; validation and look-up errors are raised before anything is written, and
the catalog version is bumped last, so a rolled-back write leaves no trace.

Conventions:
- Records are the contract's plain dicts (docs/TEAM-CONTRACTS.md) plus read-only `version`
  (row version for If-Match, 1 on create, +1 per update), `created_at` and `updated_at`
  (ISO 8601 UTC strings).
- `update_*` merges top-level members into the stored record (a full record replaces it; a
  nested block such as `peak_tflops` is replaced as a whole; an explicit null clears an
  optional member). The slug cannot change.
- Deleting a GPU deletes its efficiency profiles and prices (they describe that GPU and mean
  nothing without it). Deleting a model or a quantization scheme deletes nothing else: profiles only
  name them as provenance.
- Every create, update, delete, profile save and import increments the catalog version once,
  in the same transaction; reads do not. API keys are not catalog content: they live in
  catalog/api_keys.py (`ApiKeys`), on the same database but outside the catalog version.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any, Self, cast

from sqlalchemy import and_, case, delete, false, func, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session
from sqlalchemy.orm.exc import StaleDataError

from catalog.errors import (
    AlreadyExistsError,
    CatalogError,
    InvalidRecordError,
    NotFoundError,
    VersionConflictError,
)
from catalog.models import (
    CatalogMeta,
    EfficiencyProfileRow,
    GpuPriceRow,
    GpuRow,
    InstanceTypeRow,
    ModelRow,
    QuantizationRow,
    _Versioned,
)
from catalog.records import (
    canonical_efficiency_profile,
    canonical_gpu,
    canonical_model,
    canonical_price,
    canonical_quantization,
    merged,
    raise_collected,
)
from planner.confidence import UNGRADED
from planner.errors import PlannerInputError, UnsupportedConfigurationError
from planner.specs import (
    DATATYPES,
    IDEAL,
    Efficiency,
    GpuSpec,
    MlaSpec,
    ModelSpec,
    MoeSpec,
    Precision,
    QuantSpec,
)
from planner.units import MS_PER_S

#: Reference data shipped with the code; loaded on request (`load_reference_catalog`), never on import.
REFERENCE_DATA_DIR = Path(__file__).resolve().parent / "data"

GB_BYTES = 1e9  # GB = 1e9 bytes (datasheet convention, docs/design.md)
TFLOPS_FLOPS = 1e12  # TFLOP/s = 1e12 FLOP/s
US_PER_S = 1e6

MAX_PAGE_SIZE = 10_000
INT32_MAX = 2**31 - 1


class GpuSpecs(tuple[GpuSpec, ...]):
    """GPU specs (a tuple), with a note for each GPU left out because the planner cannot use its row."""

    skipped: tuple[str, ...]

    def __new__(cls, specs: Sequence[GpuSpec], *, skipped: Sequence[str] = ()) -> Self:
        built = super().__new__(cls, specs)
        built.skipped = tuple(skipped)
        return built


@dataclass(frozen=True, slots=True, kw_only=True)
class Page:
    """One page of a listing and the number of rows matching the filters in all pages."""

    items: list[dict[str, Any]]
    total: int


def _now() -> datetime:
    return datetime.now(UTC)


def _timestamp(moment: datetime) -> str:
    aware = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)  # SQLite drops the zone
    return aware.astimezone(UTC).isoformat()


def _read_only(row: _Versioned) -> dict[str, Any]:
    """The version and times every versioned row carries (GPUs, models, quantizations, profiles, prices, instance types)."""
    return {"version": row.version, "created_at": _timestamp(row.created_at), "updated_at": _timestamp(row.updated_at)}


def _storable(value: object) -> bool:
    """Whether a look-up string can match a stored one (PostgreSQL refuses NUL in text)."""
    return isinstance(value, str) and "\x00" not in value


# ---- rows <-> records -------------------------------------------------------------------------


def _gpu_record(row: GpuRow) -> dict[str, Any]:
    return {
        "slug": row.slug,
        "name": row.name,
        "vendor": row.vendor,
        "architecture": row.architecture,
        "memory_gb": row.memory_gb,
        "memory_bandwidth_gb_per_s": row.memory_bandwidth_gb_per_s,
        "peak_tflops": {datatype: getattr(row, f"peak_tflops_{datatype}") for datatype in DATATYPES},
        "interconnect_gb_per_s": row.interconnect_gb_per_s,
        "interconnect_latency_us": row.interconnect_latency_us,
        "gpus_per_node": row.gpus_per_node,
        "scale_out_gbit_per_s": row.scale_out_gbit_per_s,
        "scale_out_latency_us": row.scale_out_latency_us,
        "scale_out_source": row.scale_out_source,
        "price_usd_per_hour": None
        if row.price_on_demand_usd_per_hour is None
        else {
            "on_demand": row.price_on_demand_usd_per_hour,
            "reserved_1y": row.price_reserved_1y_usd_per_hour,
            "as_of": None if row.price_as_of is None else row.price_as_of.isoformat(),
            "source": row.price_source,
        },
        "efficiency": None
        if row.efficiency_memory is None
        else {
            "memory": row.efficiency_memory,
            "compute": row.efficiency_compute,
            "step_overhead_ms": row.efficiency_step_overhead_ms,
            "memory_reserve_fraction": row.efficiency_memory_reserve_fraction,
            "memory_compute_overlap": 1.0
            if row.efficiency_memory_compute_overlap is None
            else row.efficiency_memory_compute_overlap,
            "source": row.efficiency_source,
            "confidence": None
            if row.efficiency_confidence_grade is None
            else {
                "grade": row.efficiency_confidence_grade,
                "points": row.efficiency_confidence_points,
                "sources": row.efficiency_confidence_sources,
                "out_of_sample_error": row.efficiency_confidence_out_of_sample_error,
                "carried_over_from": row.efficiency_confidence_carried_over_from,
                "below_usual_range": bool(row.efficiency_confidence_below_usual_range),
            },
        },
        "source": row.source,
    }


def _apply_gpu(row: GpuRow, record: Mapping[str, Any]) -> None:
    for key in (
        "slug",
        "name",
        "vendor",
        "architecture",
        "memory_gb",
        "memory_bandwidth_gb_per_s",
        "interconnect_gb_per_s",
        "interconnect_latency_us",
        "gpus_per_node",
        "source",
    ):
        setattr(row, key, record[key])
    for key in ("scale_out_gbit_per_s", "scale_out_latency_us", "scale_out_source"):  # since 0013: may be absent
        setattr(row, key, record.get(key))
    for datatype in DATATYPES:
        setattr(row, f"peak_tflops_{datatype}", record["peak_tflops"][datatype])
    price = record["price_usd_per_hour"] or {}
    row.price_on_demand_usd_per_hour = price.get("on_demand")
    row.price_reserved_1y_usd_per_hour = price.get("reserved_1y")
    row.price_as_of = None if price.get("as_of") is None else date.fromisoformat(price["as_of"])
    row.price_source = price.get("source")
    efficiency = record["efficiency"] or {}
    row.efficiency_memory = efficiency.get("memory")
    row.efficiency_compute = efficiency.get("compute")
    row.efficiency_step_overhead_ms = efficiency.get("step_overhead_ms")
    row.efficiency_memory_reserve_fraction = efficiency.get("memory_reserve_fraction")
    row.efficiency_memory_compute_overlap = efficiency.get("memory_compute_overlap")
    row.efficiency_source = efficiency.get("source")
    confidence = efficiency.get("confidence") or {}
    row.efficiency_confidence_grade = confidence.get("grade")
    row.efficiency_confidence_points = confidence.get("points")
    row.efficiency_confidence_sources = confidence.get("sources")
    row.efficiency_confidence_out_of_sample_error = confidence.get("out_of_sample_error")
    row.efficiency_confidence_carried_over_from = confidence.get("carried_over_from")
    row.efficiency_confidence_below_usual_range = confidence.get("below_usual_range")


_MODEL_SCALARS = (
    "slug",
    "name",
    "params_total",
    "params_active",
    "layers",
    "hidden_size",
    "attention_heads",
    "kv_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "max_context_tokens",
)
_MOE_MEMBERS = ("experts", "experts_per_token", "shared_experts", "expert_params")


def _model_record(row: ModelRow) -> dict[str, Any]:
    record: dict[str, Any] = {key: getattr(row, key) for key in _MODEL_SCALARS}
    record["moe"] = (
        None
        if row.moe_experts is None
        else {
            **{member: getattr(row, f"moe_{member}") for member in _MOE_MEMBERS},
            "moe_layers": row.moe_layers,
        }
    )
    record["mla"] = (
        None
        if row.mla_kv_lora_rank is None
        else {
            "kv_lora_rank": row.mla_kv_lora_rank,
            "rope_head_dim": row.mla_rope_head_dim,
        }
    )
    record["checkpoint"] = row.checkpoint
    record["source"] = row.source
    return record


def _apply_model(row: ModelRow, record: Mapping[str, Any]) -> None:
    for key in (*_MODEL_SCALARS, "source"):
        setattr(row, key, record[key])
    moe = record["moe"] or {}
    for member in _MOE_MEMBERS:
        setattr(row, f"moe_{member}", moe.get(member))
    row.moe_layers = moe.get("moe_layers")
    mla = record["mla"] or {}
    row.mla_kv_lora_rank = mla.get("kv_lora_rank")
    row.mla_rope_head_dim = mla.get("rope_head_dim")
    row.checkpoint = record.get("checkpoint")


_QUANT_FIELDS = (
    "slug",
    "name",
    "weight_bytes_per_param",
    "element_bytes",
    "compute_dtype",
    "kv_cache_dtypes",
    "min_architecture",
    "engine_names",
    "source",
)


def _quantization_record(row: QuantizationRow) -> dict[str, Any]:
    record = {key: getattr(row, key) for key in _QUANT_FIELDS}
    record["kv_cache_dtypes"] = list(row.kv_cache_dtypes)
    record["engine_names"] = dict(row.engine_names) if row.engine_names is not None else None
    return record


def _apply_quantization(row: QuantizationRow, record: Mapping[str, Any]) -> None:
    for key in _QUANT_FIELDS:
        setattr(row, key, record[key])
    row.kv_cache_dtypes = list(record["kv_cache_dtypes"])
    row.engine_names = dict(record["engine_names"]) if record.get("engine_names") is not None else None


_PROFILE_FIELDS = (
    "name",
    "model_slug",
    "weights_slug",
    "memory",
    "compute",
    "step_overhead_ms",
    "memory_reserve_fraction",
    "include_comm",
    "memory_compute_overlap",
    "source",
    "fit",
)


def _profile_record(row: EfficiencyProfileRow, gpu_slug: str) -> dict[str, Any]:
    record = {key: getattr(row, key) for key in _PROFILE_FIELDS}
    record["gpu_slug"] = gpu_slug
    return {key: record[key] for key in ("name", "gpu_slug", *_PROFILE_FIELDS[1:])}


def _apply_profile(row: EfficiencyProfileRow, record: Mapping[str, Any], gpu_id: int) -> None:
    for key in _PROFILE_FIELDS:
        setattr(row, key, record[key])
    row.gpu_id = gpu_id


@dataclass(frozen=True, slots=True)
class _Kind:
    """What differs between the three slugged tables."""

    name: str
    plural: str
    row_class: type[GpuRow | ModelRow | QuantizationRow]
    canonical: Callable[..., dict[str, Any]]
    to_record: Callable[[Any], dict[str, Any]]
    apply: Callable[[Any, Mapping[str, Any]], None]


GPU = _Kind("GPU", "gpus", GpuRow, canonical_gpu, _gpu_record, _apply_gpu)
MODEL = _Kind("model", "models", ModelRow, canonical_model, _model_record, _apply_model)
QUANTIZATION = _Kind(
    "quantization",
    "quantizations",
    QuantizationRow,
    canonical_quantization,
    _quantization_record,
    _apply_quantization,
)
_KINDS = (QUANTIZATION, GPU, MODEL)  # import order; profiles come after GPUs


class Catalog:
    """The catalog inside one session. The caller owns the transaction (commit / rollback)."""

    def __init__(self, session: Session) -> None:
        self.session = session

    # ---- GPUs ----------------------------------------------------------------------------------

    def list_gpus(self, *, vendor: str | None = None, architecture: str | None = None, limit: int = 50, offset: int = 0) -> Page:
        filters = [GpuRow.vendor == vendor] if vendor is not None else []
        filters += [GpuRow.architecture == architecture] if architecture is not None else []
        return self._list(GPU, filters, limit=limit, offset=offset, text_filters=(vendor, architecture))

    def get_gpu(self, slug: str) -> dict[str, Any]:
        return self._get(GPU, slug)

    def create_gpu(self, record: Mapping[str, Any]) -> dict[str, Any]:
        return self._create(GPU, record)

    def update_gpu(self, slug: str, record: Mapping[str, Any], *, if_version: int | None = None) -> dict[str, Any]:
        return self._update(GPU, slug, record, if_version=if_version)

    def delete_gpu(self, slug: str, *, if_version: int | None = None) -> None:
        """Delete the GPU and, by cascade, its efficiency profiles and prices."""
        row = self._row(GPU, slug)
        self._check_version(GPU, row, if_version)
        self.session.execute(delete(EfficiencyProfileRow).where(EfficiencyProfileRow.gpu_id == row.id))
        self.session.execute(delete(GpuPriceRow).where(GpuPriceRow.gpu_id == row.id))
        self._delete_row(GPU, row)

    # ---- models --------------------------------------------------------------------------------

    def list_models(self, *, moe: bool | None = None, limit: int = 50, offset: int = 0) -> Page:
        filters = [] if moe is None else [ModelRow.moe_experts.is_not(None) if moe else ModelRow.moe_experts.is_(None)]
        return self._list(MODEL, filters, limit=limit, offset=offset)

    def get_model(self, slug: str) -> dict[str, Any]:
        return self._get(MODEL, slug)

    def create_model(self, record: Mapping[str, Any]) -> dict[str, Any]:
        return self._create(MODEL, record)

    def update_model(self, slug: str, record: Mapping[str, Any], *, if_version: int | None = None) -> dict[str, Any]:
        return self._update(MODEL, slug, record, if_version=if_version)

    def delete_model(self, slug: str, *, if_version: int | None = None) -> None:
        row = self._row(MODEL, slug)
        self._check_version(MODEL, row, if_version)
        self._delete_row(MODEL, row)

    # ---- quantization schemes ------------------------------------------------------------------

    def list_quantizations(self, *, compute_dtype: str | None = None, limit: int = 50, offset: int = 0) -> Page:
        filters = [] if compute_dtype is None else [QuantizationRow.compute_dtype == compute_dtype]
        return self._list(QUANTIZATION, filters, limit=limit, offset=offset, text_filters=(compute_dtype,))

    def get_quantization(self, slug: str) -> dict[str, Any]:
        return self._get(QUANTIZATION, slug)

    def create_quantization(self, record: Mapping[str, Any]) -> dict[str, Any]:
        return self._create(QUANTIZATION, record)

    def update_quantization(self, slug: str, record: Mapping[str, Any], *, if_version: int | None = None) -> dict[str, Any]:
        return self._update(QUANTIZATION, slug, record, if_version=if_version)

    def delete_quantization(self, slug: str, *, if_version: int | None = None) -> None:
        row = self._row(QUANTIZATION, slug)
        self._check_version(QUANTIZATION, row, if_version)
        self._delete_row(QUANTIZATION, row)

    # ---- catalog version -----------------------------------------------------------------------

    def catalog_version(self) -> int:
        """The catalog version: 0 when empty, +1 on every write (plans record it)."""
        version = self.session.scalar(select(CatalogMeta.version).where(CatalogMeta.id == 1))
        if version is None:
            raise CatalogError("the catalog_meta row is missing: migrate the database (headroom db upgrade)")
        return int(version)

    # ---- planner specs -------------------------------------------------------------------------

    def gpu_spec(self, slug: str, efficiency: str = "calibrated") -> GpuSpec:
        """The GPU in SI units with the named efficiency: "ideal" (η = 1, no reserve, no comm,
        no overhead), "calibrated" (the GPU row's efficiency block, communication on), or the
        name of a stored efficiency profile of this GPU."""
        row = self._row(GPU, slug)
        return self._gpu_spec(row, self._efficiency(row, efficiency))

    def gpu_specs(
        self, efficiency: str = "calibrated", *, slugs: Sequence[str] | None = None, limit: int = MAX_PAGE_SIZE
    ) -> GpuSpecs:
        """Several GPUs' specs in one query (the GPU rows joined with the named stored profile).

        With `slugs`: `tuple(gpu_spec(slug, efficiency) for slug in slugs)`, the same specs and
        the same NotFoundError for the first unknown slug or missing profile. Without: every GPU,
        by slug, the first `limit`, leaving out those that lack the named stored profile and those
        whose row the planner cannot use (outside planner/specs.py's bounds: stored before them or
        written by hand), each named with why in the result's `skipped`. A GPU named in `slugs`
        whose row is unusable raises PlannerInputError instead."""
        wanted = None if slugs is None else [slug for slug in dict.fromkeys(slugs) if _storable(slug)]
        builtin = efficiency in ("ideal", "calibrated")
        joined = and_(
            EfficiencyProfileRow.gpu_id == GpuRow.id,
            EfficiencyProfileRow.name == efficiency if _storable(efficiency) and not builtin else false(),
        )
        query = (
            select(GpuRow, EfficiencyProfileRow)
            .outerjoin(EfficiencyProfileRow, joined)
            .order_by(GpuRow.slug)
            .execution_options(populate_existing=True)
        )
        query = query.limit(limit) if wanted is None else query.where(GpuRow.slug.in_(wanted))
        found = {gpu.slug: (gpu, profile) for gpu, profile in self.session.execute(query).all()}
        if slugs is None:
            usable: list[GpuSpec] = []
            skipped: list[str] = []
            for gpu, profile in found.values():
                if not builtin and profile is None:
                    continue
                try:
                    usable.append(self._gpu_spec(gpu, self._efficiency_of(gpu, efficiency, profile)))
                except (PlannerInputError, OverflowError) as unusable:  # a row stored before the bounds, or by hand
                    skipped.append(
                        f"{gpu.slug} left out: its catalog row is outside what the planner can use "
                        f"({getattr(unusable, 'detail', unusable)}); correct it with PUT /v1/gpus/{gpu.slug}"
                    )
            return GpuSpecs(usable, skipped=skipped)
        specs = []
        for slug in slugs:
            if slug not in found:
                raise NotFoundError(f"no {GPU.name} with slug {slug!r}", kind=GPU.name.lower(), slug=str(slug))
            gpu, profile = found[slug]
            specs.append(self._gpu_spec(gpu, self._efficiency_of(gpu, efficiency, profile)))
        return GpuSpecs(specs)

    @staticmethod
    def _gpu_spec(row: GpuRow, efficiency: Efficiency) -> GpuSpec:
        return GpuSpec(
            slug=row.slug,
            vendor=row.vendor,
            architecture=row.architecture,
            memory_bytes=row.memory_gb * GB_BYTES,
            hbm_bandwidth_bytes_per_s=row.memory_bandwidth_gb_per_s * GB_BYTES,
            peak_flops_per_s={
                datatype: None if (tflops := getattr(row, f"peak_tflops_{datatype}")) is None else tflops * TFLOPS_FLOPS
                for datatype in DATATYPES
            },
            interconnect_bytes_per_s=row.interconnect_gb_per_s * GB_BYTES,
            interconnect_latency_s=0.0 if row.interconnect_latency_us is None else row.interconnect_latency_us / US_PER_S,
            gpus_per_node=row.gpus_per_node,
            scale_out_bytes_per_s=None if row.scale_out_gbit_per_s is None else row.scale_out_gbit_per_s * GB_BYTES / 8,
            scale_out_latency_s=None if row.scale_out_latency_us is None else row.scale_out_latency_us / US_PER_S,
            scale_out_source=row.scale_out_source,
            price_usd_per_hour_on_demand=row.price_on_demand_usd_per_hour or 0.0,
            price_usd_per_hour_reserved_1y=row.price_reserved_1y_usd_per_hour,
            efficiency=efficiency,
            calibration_grade=row.efficiency_confidence_grade or UNGRADED,
        )

    def model_spec(self, slug: str) -> ModelSpec:
        row = self._row(MODEL, slug)
        return ModelSpec(
            slug=row.slug,
            params_total=float(row.params_total),
            params_active=float(row.params_active),
            layers=row.layers,
            hidden_size=row.hidden_size,
            attention_heads=row.attention_heads,
            kv_heads=row.kv_heads,
            head_dim=row.head_dim,
            intermediate_size=row.intermediate_size,
            vocab_size=row.vocab_size,
            max_context_tokens=row.max_context_tokens,
            moe=None
            if row.moe_experts is None
            else MoeSpec(
                experts=row.moe_experts,
                experts_per_token=row.moe_experts_per_token,
                shared_experts=row.moe_shared_experts,
                expert_params=float(row.moe_expert_params),
                moe_layers=row.moe_layers,
            ),
            mla=None
            if row.mla_kv_lora_rank is None
            else MlaSpec(kv_lora_rank=row.mla_kv_lora_rank, rope_head_dim=row.mla_rope_head_dim),
        )

    def quant_spec(self, slug: str) -> QuantSpec:
        return self._quant_spec(self._row(QUANTIZATION, slug))

    @staticmethod
    def _quant_spec(row: QuantizationRow) -> QuantSpec:
        return QuantSpec(
            slug=row.slug,
            weight_bytes_per_param=row.weight_bytes_per_param,
            element_bytes=row.element_bytes,
            compute_dtype=row.compute_dtype,
            kv_cache_dtypes=tuple(row.kv_cache_dtypes),
            min_architecture=row.min_architecture,
        )

    def precision(self, weights: str, kv_cache: str) -> Precision:
        """Weights and KV-cache formats; the KV format must be one the weights scheme allows
        (when its `kv_cache_dtypes` is non-empty), else UnsupportedConfigurationError."""
        return self._precision(self.quant_spec(weights), self.quant_spec(kv_cache))

    @staticmethod
    def _precision(weights_spec: QuantSpec, kv_spec: QuantSpec) -> Precision:
        weights, kv_cache = weights_spec.slug, kv_spec.slug
        allowed = weights_spec.kv_cache_dtypes
        if allowed and kv_cache not in allowed:
            raise UnsupportedConfigurationError(
                f"{weights} weights allow a KV cache in {', '.join(allowed)}, not {kv_cache}",
                weights=weights,
                kv_cache=kv_cache,
                allowed_kv_cache=list(allowed),
            )
        return Precision(weights=weights_spec, kv_cache=kv_spec)

    def precisions(self, pairs: Sequence[tuple[str, str]], *, skip_unknown: bool = False) -> tuple[Precision, ...]:
        """`tuple(precision(w, kv) for w, kv in pairs)` with the quantizations read in one query
        (the same errors, first pair first); `skip_unknown` leaves out pairs naming a format
        nobody catalogued instead of raising NotFoundError."""
        slugs = [slug for slug in dict.fromkeys(slug for pair in pairs for slug in pair) if _storable(slug)]
        rows = self.session.scalars(
            select(QuantizationRow).where(QuantizationRow.slug.in_(slugs)).execution_options(populate_existing=True)
        ).all()
        specs = {row.slug: self._quant_spec(row) for row in rows}
        chosen = []
        for weights, kv_cache in pairs:
            missing = [slug for slug in (weights, kv_cache) if slug not in specs]
            if missing and skip_unknown:
                continue
            if missing:
                raise NotFoundError(
                    f"no {QUANTIZATION.name} with slug {missing[0]!r}", kind=QUANTIZATION.name.lower(), slug=str(missing[0])
                )
            chosen.append(self._precision(specs[weights], specs[kv_cache]))
        return tuple(chosen)

    # ---- efficiency profiles -------------------------------------------------------------------

    def save_efficiency_profile(self, record: Mapping[str, Any], *, if_version: int | None = None) -> dict[str, Any]:
        """Create or replace the profile named `record["name"]` of GPU `record["gpu_slug"]`."""
        canonical = canonical_efficiency_profile(record)
        gpu = self._gpu_for_profile(canonical["gpu_slug"], field="gpu_slug")
        row = self._profile_row(canonical["name"], gpu.id)
        if row is None:
            if if_version is not None:
                raise VersionConflictError(
                    f"efficiency profile {canonical['name']!r} of {gpu.slug} does not exist (expected version {if_version})",
                    kind="efficiency_profile",
                    name=canonical["name"],
                    gpu_slug=gpu.slug,
                    expected_version=if_version,
                    current_version=None,
                )
            row = EfficiencyProfileRow(created_at=_now())
            self.session.add(row)
        else:
            self._check_profile_version(row, gpu.slug, if_version)
        _apply_profile(row, canonical, gpu.id)
        row.updated_at = _now()
        self._flush(what=f"efficiency profile {canonical['name']!r} of {gpu.slug}")
        self._bump_catalog_version()
        return {**_profile_record(row, gpu.slug), **_read_only(row)}

    def get_efficiency_profile(self, name: str, gpu_slug: str) -> dict[str, Any]:
        gpu = self._row(GPU, gpu_slug)
        row = self._profile_row(name, gpu.id)
        if row is None:
            raise NotFoundError(
                f"no efficiency profile {name!r} for GPU {gpu_slug}",
                kind="efficiency_profile",
                name=name,
                gpu_slug=gpu_slug,
            )
        return {**_profile_record(row, gpu.slug), **_read_only(row)}

    def efficiency_profile(self, name: str, gpu_slug: str) -> Efficiency:
        """The Efficiency called `name` for GPU `gpu_slug` ("ideal", "calibrated" or a stored profile)."""
        return self._efficiency(self._row(GPU, gpu_slug), name)

    def list_efficiency_profiles(self, *, gpu_slug: str | None = None) -> list[dict[str, Any]]:
        """Every stored profile (of one GPU if `gpu_slug` is given), ordered by GPU slug and name."""
        query = (
            select(EfficiencyProfileRow, GpuRow.slug)
            .join(GpuRow, EfficiencyProfileRow.gpu_id == GpuRow.id)
            .order_by(GpuRow.slug, EfficiencyProfileRow.name)
        )
        if gpu_slug is not None:
            if not _storable(gpu_slug):
                return []
            query = query.where(GpuRow.slug == gpu_slug)
        return [{**_profile_record(row, slug), **_read_only(row)} for row, slug in self.session.execute(query)]

    def delete_efficiency_profile(self, name: str, gpu_slug: str, *, if_version: int | None = None) -> None:
        gpu = self._row(GPU, gpu_slug)
        row = self._profile_row(name, gpu.id)
        if row is None:
            raise NotFoundError(
                f"no efficiency profile {name!r} for GPU {gpu_slug}",
                kind="efficiency_profile",
                name=name,
                gpu_slug=gpu_slug,
            )
        self._check_profile_version(row, gpu_slug, if_version)
        self.session.delete(row)
        self._flush(what=f"efficiency profile {name!r} of {gpu_slug}")
        self._bump_catalog_version()

    # ---- export / import -----------------------------------------------------------------------

    def export_catalog(self) -> dict[str, Any]:
        """The whole catalog as records (no read-only members), each list sorted by slug
        (profiles by GPU slug, then name); `import_catalog` of it into an empty database
        reproduces it exactly, catalog version included."""
        exported: dict[str, Any] = {"catalog_version": self.catalog_version()}
        for kind in (GPU, MODEL, QUANTIZATION):
            rows = self.session.scalars(select(kind.row_class).order_by(kind.row_class.slug))
            exported[kind.plural] = [kind.to_record(row) for row in rows]
        exported["efficiency_profiles"] = [
            {key: value for key, value in profile.items() if key not in ("version", "created_at", "updated_at")}
            for profile in self.list_efficiency_profiles()
        ]
        exported["prices"] = self._prices().export_prices()
        exported["instance_types"] = self._instance_types().export_instance_types()
        exported["engine_profiles"] = self._engine_profiles().export()
        return exported

    def import_catalog(self, data: Mapping[str, Any]) -> dict[str, int]:
        """Upsert every record of an export-shaped dict (`gpus`, `models`, `quantizations`,
        `efficiency_profiles`, `prices`, `instance_types`, `engine_profiles` (an object of `profiles` and
        `low_precision`, catalog/engine_profiles.py), optional `catalog_version`; missing lists
        count as empty).
        Rows not in `data` stay. All records are validated first and every problem is reported
        at once (fields like "gpus[3].memory_gb"). The catalog version becomes
        max(current + 1, data's catalog_version), so restoring an export into an empty
        database reproduces its version. Returns counts of created, updated and unchanged rows
        and the new catalog version."""
        errors: list[dict[str, str]] = []
        if not isinstance(data, Mapping):
            raise InvalidRecordError(
                "a catalog import must be an object", errors=[{"field": "(root)", "message": "must be an object"}]
            )
        known = {
            "catalog_version",
            "efficiency_profiles",
            "prices",
            "instance_types",
            "engine_profiles",
            *(kind.plural for kind in _KINDS),
        }
        errors += [{"field": str(key), "message": "unknown field"} for key in data if key not in known]
        imported_version = data.get("catalog_version", 0)
        if isinstance(imported_version, bool) or not isinstance(imported_version, int) or imported_version < 0:
            errors.append({"field": "catalog_version", "message": "must be a non-negative integer"})
            imported_version = 0
        batches: dict[str, list[dict[str, Any]]] = {}
        for kind in _KINDS:
            batches[kind.plural] = self._canonical_list(
                data.get(kind.plural, []), kind.plural, kind.canonical, key=lambda record: record["slug"], errors=errors
            )
        profiles = self._canonical_list(
            data.get("efficiency_profiles", []),
            "efficiency_profiles",
            canonical_efficiency_profile,
            key=lambda record: (record["gpu_slug"], record["name"]),
            errors=errors,
        )
        prices = self._canonical_list(
            data.get("prices", []),
            "prices",
            canonical_price,
            key=lambda record: (record["provider"], record["gpu"], record["region"]),
            errors=errors,
        )
        instance_types = self._canonical_list(
            data.get("instance_types", []),
            "instance_types",
            self._instance_types().canonical,
            key=lambda record: (record["provider"], record["name"], record["region"]),
            errors=errors,
        )
        incoming_gpus = {record["slug"] for record in batches["gpus"]}
        existing_gpus = set(self.session.scalars(select(GpuRow.slug)))
        for index, profile in enumerate(profiles):
            if profile["gpu_slug"] not in incoming_gpus | existing_gpus:
                errors.append({"field": f"efficiency_profiles[{index}].gpu_slug", "message": f"no GPU {profile['gpu_slug']!r}"})
        for index, price in enumerate(prices):
            if price["gpu"] not in incoming_gpus | existing_gpus:
                errors.append({"field": f"prices[{index}].gpu", "message": f"no GPU {price['gpu']!r}"})
        for index, instance in enumerate(instance_types):
            if instance["gpu"] not in incoming_gpus | existing_gpus:
                errors.append({"field": f"instance_types[{index}].gpu", "message": f"no GPU {instance['gpu']!r}"})
        engine_profiles = data.get("engine_profiles", {"profiles": [], "low_precision": []})
        errors += self._engine_profiles().problems(engine_profiles, incoming_gpus | existing_gpus)
        raise_collected("catalog import", errors)

        counts = {"created": 0, "updated": 0, "unchanged": 0}
        for kind in _KINDS:
            for record in batches[kind.plural]:
                counts[self._upsert(kind, record)] += 1
        for profile in profiles:
            counts[self._upsert_profile(profile)] += 1
        for price in prices:
            counts[self._prices().upsert_price(price)] += 1
        for instance in instance_types:
            counts[self._instance_types().upsert_instance_type(instance)] += 1
        self._flush(what="catalog import")  # the GPU rows exist before their engine profiles name them
        for outcome, count in self._engine_profiles().upsert(engine_profiles).items():
            counts[outcome] += count
        self._flush(what="catalog import")
        return {**counts, "catalog_version": self._bump_catalog_version(at_least=imported_version)}

    def is_empty(self) -> bool:
        """No GPU, model, quantization scheme, efficiency profile, price or instance type."""
        return all(
            self.session.scalar(select(func.count()).select_from(table)) == 0
            for table in (GpuRow, ModelRow, QuantizationRow, EfficiencyProfileRow, GpuPriceRow, InstanceTypeRow)
        )

    def load_reference_catalog(self, data_dir: Path | None = None) -> bool:
        """Load catalog/data/{quantizations,gpus,models}.json and, where present, prices.json and
        instance_types.json (or `data_dir`'s) into an empty catalog; return False and change nothing
        when the catalog already has rows."""
        if not self.is_empty():
            return False
        directory = REFERENCE_DATA_DIR if data_dir is None else data_dir
        data: dict[str, Any] = {}
        for plural in ("quantizations", "gpus", "models", "prices", "instance_types"):
            path = directory / f"{plural}.json"
            if plural in ("prices", "instance_types") and not path.exists():
                continue  # a catalog without prices plans nothing until prices are added
            try:
                content = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as error:
                raise CatalogError(f"cannot read reference data {path}: {error}", path=str(path)) from error
            data[plural] = content[plural] if isinstance(content, Mapping) and plural in content else content
        self.import_catalog(data)
        self._engine_profiles().load_reference(directory / "engine_profiles.json")
        return True

    def _prices(self) -> Any:
        # catalog.prices builds on this module, so it is imported when first needed
        from catalog.prices import Prices

        return Prices(self.session)

    def load_reference_engine_profiles(self, data_dir: Path | None = None) -> bool:
        """Load catalog/data/engine_profiles.json into empty engine tables of a catalog that already has
        its GPUs (a database upgraded to migration 0014); the catalog version moves once. False when
        the tables are not empty or the file is absent."""
        directory = REFERENCE_DATA_DIR if data_dir is None else data_dir
        if not self._engine_profiles().load_reference(directory / "engine_profiles.json"):
            return False
        self._bump_catalog_version()
        return True

    def _engine_profiles(self) -> Any:
        # catalog.engine_profiles builds on the GPU rows, so it is imported when first needed
        from catalog.engine_profiles import EngineProfiles

        return EngineProfiles(self.session)

    def _instance_types(self) -> Any:
        # catalog.instances builds on this module, so it is imported when first needed
        from catalog.instances import InstanceTypes

        return InstanceTypes(self.session)

    # ---- internals -----------------------------------------------------------------------------

    def _row(self, kind: _Kind, slug: str) -> Any:
        if not _storable(slug):
            raise NotFoundError(f"no {kind.name} with slug {slug!r}", kind=kind.name.lower(), slug=str(slug))
        # populate_existing: a write checks If-Match against the stored version, not a cached one.
        row = self.session.scalar(
            select(kind.row_class).where(kind.row_class.slug == slug).execution_options(populate_existing=True)
        )
        if row is None:
            raise NotFoundError(f"no {kind.name} with slug {slug!r}", kind=kind.name.lower(), slug=slug)
        return row

    def _get(self, kind: _Kind, slug: str) -> dict[str, Any]:
        row = self._row(kind, slug)
        return {**kind.to_record(row), **_read_only(row)}

    def _list(self, kind: _Kind, filters: list[Any], *, limit: int, offset: int, text_filters: tuple[object, ...] = ()) -> Page:
        problems = [
            {"field": name, "message": f"must be an integer in [0, {bound}]"}
            for name, value, bound in (("limit", limit, MAX_PAGE_SIZE), ("offset", offset, INT32_MAX))
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= bound
        ]
        raise_collected("listing", problems)
        if not all(_storable(value) for value in text_filters if value is not None):
            return Page(items=[], total=0)  # no stored text contains NUL
        # The page and its total in one statement, so both come from one snapshot while other
        # requests write (two statements see two snapshots under READ COMMITTED and SQLite autocommit).
        page = self.session.execute(
            select(kind.row_class, func.count().over().label("total"))
            .where(*filters)
            .order_by(kind.row_class.slug)
            .limit(limit)
            .offset(offset)
        ).all()
        if page:
            total = page[0].total
        elif offset == 0 and limit > 0:
            total = 0  # an empty first page means nothing matched
        else:
            total = self.session.scalar(select(func.count()).select_from(kind.row_class).where(*filters)) or 0
        return Page(items=[{**kind.to_record(row), **_read_only(row)} for row, _ in page], total=total)

    def _create(self, kind: _Kind, record: Mapping[str, Any]) -> dict[str, Any]:
        canonical = kind.canonical(record)
        self._refuse_duplicate(kind, canonical["slug"])
        now = _now()
        row = kind.row_class(created_at=now, updated_at=now)
        kind.apply(row, canonical)
        self.session.add(row)
        self._flush(what=f"{kind.name} {canonical['slug']!r}", kind=kind, slug=canonical["slug"])
        self._bump_catalog_version()
        return {**kind.to_record(row), **_read_only(row)}

    def _update(self, kind: _Kind, slug: str, record: Mapping[str, Any], *, if_version: int | None) -> dict[str, Any]:
        row = self._row(kind, slug)
        self._check_version(kind, row, if_version)
        errors: list[dict[str, str]] = []
        if isinstance(record, Mapping) and record.get("slug", slug) != slug:
            errors.append({"field": "slug", "message": f"cannot change {slug!r} to {record['slug']!r}: create a new record"})
        canonical = kind.canonical(merged(kind.to_record(row), record), errors=errors)
        raise_collected(kind.name, errors)
        kind.apply(row, canonical)
        row.updated_at = _now()
        self._flush(what=f"{kind.name} {slug!r}", kind=kind, slug=slug)
        self._bump_catalog_version()
        return {**kind.to_record(row), **_read_only(row)}

    def _delete_row(self, kind: _Kind, row: Any) -> None:
        slug = row.slug
        self.session.delete(row)
        self._flush(what=f"{kind.name} {slug!r}", kind=kind, slug=slug)
        self._bump_catalog_version()

    def _refuse_duplicate(self, kind: _Kind, slug: str) -> None:
        if self.session.scalar(select(kind.row_class.id).where(kind.row_class.slug == slug)) is not None:
            raise AlreadyExistsError(f"a {kind.name} with slug {slug!r} exists already", kind=kind.name.lower(), slug=slug)

    def _check_version(self, kind: _Kind, row: Any, if_version: int | None) -> None:
        if if_version is not None and row.version != if_version:
            raise VersionConflictError(
                f"{kind.name} {row.slug!r} is at version {row.version}, not {if_version}",
                kind=kind.name.lower(),
                slug=row.slug,
                expected_version=if_version,
                current_version=row.version,
            )

    def _check_profile_version(self, row: EfficiencyProfileRow, gpu_slug: str, if_version: int | None) -> None:
        if if_version is not None and row.version != if_version:
            raise VersionConflictError(
                f"efficiency profile {row.name!r} of {gpu_slug} is at version {row.version}, not {if_version}",
                kind="efficiency_profile",
                name=row.name,
                gpu_slug=gpu_slug,
                expected_version=if_version,
                current_version=row.version,
            )

    def _flush(self, *, what: str, kind: _Kind | None = None, slug: str | None = None) -> None:
        """Flush, turning a lost race into the typed error the caller would have got a moment later."""
        try:
            self.session.flush()
        except StaleDataError as error:
            raise VersionConflictError(f"{what} was changed or deleted concurrently; reload it and retry") from error
        except IntegrityError as error:
            extensions = {} if kind is None else {"kind": kind.name.lower(), "slug": slug}
            raise AlreadyExistsError(f"{what} conflicts with a stored row", **extensions) from error

    def _bump_catalog_version(self, *, at_least: int = 0) -> int:
        """Increment the catalog version (to at least `at_least`) in the current transaction."""
        incremented = CatalogMeta.version + 1
        result = self.session.execute(
            update(CatalogMeta)
            .where(CatalogMeta.id == 1)
            .values(version=case((incremented >= at_least, incremented), else_=at_least), updated_at=_now())
            .execution_options(synchronize_session=False)
        )
        if result.rowcount != 1:  # type: ignore[attr-defined]
            raise CatalogError("the catalog_meta row is missing: migrate the database (headroom db upgrade)")
        return self.catalog_version()

    def _efficiency(self, gpu: GpuRow, name: str) -> Efficiency:
        builtin = name in ("ideal", "calibrated")
        return self._efficiency_of(gpu, name, None if builtin else self._profile_row(name, gpu.id))

    @staticmethod
    def _efficiency_of(gpu: GpuRow, name: str, row: EfficiencyProfileRow | None) -> Efficiency:
        """`name`'s efficiency for `gpu`; `row` is its stored profile named `name` (None: none stored)."""
        if name == "ideal":
            return IDEAL
        if name == "calibrated":
            if gpu.efficiency_memory is None:
                return Efficiency(
                    name="calibrated",
                    include_comm=True,
                    source=f"{gpu.slug} has no calibrated efficiency: datasheet roofline plus tensor-parallel communication",
                )
            # canonical_gpu requires compute whenever the efficiency block (and so memory) is given; _apply_gpu stores both.
            assert gpu.efficiency_compute is not None, f"{gpu.slug} stores an efficiency memory without compute"
            return Efficiency(
                name="calibrated",
                memory=gpu.efficiency_memory,
                compute=gpu.efficiency_compute,
                step_overhead_s=(gpu.efficiency_step_overhead_ms or 0.0) / MS_PER_S,
                memory_reserve_fraction=gpu.efficiency_memory_reserve_fraction or 0.0,
                include_comm=True,
                memory_compute_overlap=1.0
                if gpu.efficiency_memory_compute_overlap is None
                else gpu.efficiency_memory_compute_overlap,
                source=gpu.efficiency_source or f"calibrated efficiency of {gpu.slug} (no source recorded)",
            )
        if row is None:
            raise NotFoundError(
                f"no efficiency profile {name!r} for GPU {gpu.slug} (use 'ideal', 'calibrated' or a stored profile)",
                kind="efficiency_profile",
                name=name,
                gpu_slug=gpu.slug,
            )
        return Efficiency(
            name=row.name,
            memory=row.memory,
            compute=row.compute,
            step_overhead_s=row.step_overhead_ms / MS_PER_S,
            memory_reserve_fraction=row.memory_reserve_fraction,
            include_comm=row.include_comm,
            memory_compute_overlap=row.memory_compute_overlap,
            source=row.source,
        )

    def _profile_row(self, name: str, gpu_id: int) -> EfficiencyProfileRow | None:
        if not _storable(name):
            return None
        return self.session.scalar(
            select(EfficiencyProfileRow).where(EfficiencyProfileRow.gpu_id == gpu_id, EfficiencyProfileRow.name == name)
        )

    def _gpu_for_profile(self, slug: str, *, field: str) -> GpuRow:
        row = self.session.scalar(select(GpuRow).where(GpuRow.slug == slug)) if _storable(slug) else None
        if row is None:
            raise InvalidRecordError(
                f"invalid efficiency profile record: {field}",
                errors=[{"field": field, "message": f"no GPU {slug!r}"}],
            )
        return row

    @staticmethod
    def _canonical_list(
        records: object,
        plural: str,
        canonical: Callable[..., dict[str, Any]],
        *,
        key: Callable[[dict[str, Any]], object],
        errors: list[dict[str, str]],
    ) -> list[dict[str, Any]]:
        if not isinstance(records, list):
            errors.append({"field": plural, "message": "must be a list"})
            return []
        result: list[dict[str, Any]] = []
        seen: set[object] = set()
        for index, record in enumerate(records):
            before = len(errors)
            candidate = canonical(record, path=f"{plural}[{index}]", errors=errors)
            if len(errors) > before:
                continue
            identity = key(candidate)
            if identity in seen:
                errors.append({"field": f"{plural}[{index}]", "message": f"duplicate {identity!r}"})
            seen.add(identity)
            result.append(candidate)
        return result

    def _upsert(self, kind: _Kind, record: Mapping[str, Any]) -> str:
        # The query selects kind.row_class, so the row is one of the three; SQLAlchemy types a union's select as Base.
        row = cast(
            "GpuRow | ModelRow | QuantizationRow | None",
            self.session.scalar(select(kind.row_class).where(kind.row_class.slug == record["slug"])),
        )
        if row is None:
            now = _now()
            created = kind.row_class(created_at=now, updated_at=now)
            kind.apply(created, record)
            self.session.add(created)
            return "created"
        if kind.to_record(row) == record:
            return "unchanged"
        kind.apply(row, record)
        row.updated_at = _now()
        return "updated"

    def _upsert_profile(self, record: Mapping[str, Any]) -> str:
        self.session.flush()  # GPUs created by this import need their ids
        gpu = self._gpu_for_profile(record["gpu_slug"], field="gpu_slug")
        row = self._profile_row(record["name"], gpu.id)
        if row is None:
            now = _now()
            row = EfficiencyProfileRow(created_at=now, updated_at=now)
            _apply_profile(row, record, gpu.id)
            self.session.add(row)
            return "created"
        if _profile_record(row, gpu.slug) == dict(record):
            return "unchanged"
        _apply_profile(row, record, gpu.id)
        row.updated_at = _now()
        return "updated"
