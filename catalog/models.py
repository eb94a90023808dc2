"""SQLAlchemy tables of the catalog. Only `catalog/` touches these classes.

Nested record blocks (`peak_tflops`, `price_usd_per_hour`, `efficiency`, `moe`, `mla`) are
flattened into typed columns with the block name as prefix; a nullable block is absent when its
required member column is NULL. Every row carries `version`, bumped on each UPDATE by the mapper
(optimistic concurrency: the UPDATE matches the version it read, so a concurrent writer loses).
`catalog_meta` holds the single catalog version that every catalog write increments.
`gpu_prices` holds each provider's price of each GPU; the GPU's own `price_*` columns are a
deprecated copy of the record API's `price_usd_per_hour` block that plans no longer read.
Later migrations add tables (plans, deployments) to the same metadata.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Date,
    DateTime,
    Float,
    ForeignKey,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, declared_attr, mapped_column

#: Deterministic constraint names, so later migrations (and SQLite batch mode) can name them.
NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

SLUG_LENGTH = 64
NAME_LENGTH = 200


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class _Versioned:
    """Row version for If-Match plus creation and update times (UTC, set by the repository)."""

    version: Mapped[int] = mapped_column(Integer, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)

    @declared_attr.directive
    def __mapper_args__(cls) -> dict[str, Any]:
        return {"version_id_col": cls.version}


class GpuRow(_Versioned, Base):
    __tablename__ = "gpus"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    slug: Mapped[str] = mapped_column(String(SLUG_LENGTH), unique=True, nullable=False)
    name: Mapped[str] = mapped_column(String(NAME_LENGTH), nullable=False)
    vendor: Mapped[str] = mapped_column(String(32), index=True, nullable=False)
    architecture: Mapped[str] = mapped_column(String(32), index=True, nullable=False)
    memory_gb: Mapped[float] = mapped_column(Float, nullable=False)
    memory_bandwidth_gb_per_s: Mapped[float] = mapped_column(Float, nullable=False)
    peak_tflops_fp32: Mapped[float | None] = mapped_column(Float)
    peak_tflops_tf32: Mapped[float | None] = mapped_column(Float)
    peak_tflops_bf16: Mapped[float | None] = mapped_column(Float)
    peak_tflops_fp16: Mapped[float | None] = mapped_column(Float)
    peak_tflops_fp8: Mapped[float | None] = mapped_column(Float)
    peak_tflops_int8: Mapped[float | None] = mapped_column(Float)
    peak_tflops_fp4: Mapped[float | None] = mapped_column(Float)
    interconnect_gb_per_s: Mapped[float] = mapped_column(Float, nullable=False)
    interconnect_latency_us: Mapped[float | None] = mapped_column(Float)
    gpus_per_node: Mapped[int] = mapped_column(Integer, nullable=False)
    #: The scale-out network per GPU (since 0013): Gb/s one direction, latency, source; NULL = the planner's default.
    scale_out_gbit_per_s: Mapped[float | None] = mapped_column(Float)
    scale_out_latency_us: Mapped[float | None] = mapped_column(Float)
    scale_out_source: Mapped[str | None] = mapped_column(Text)
    price_on_demand_usd_per_hour: Mapped[float | None] = mapped_column(Float)
    price_reserved_1y_usd_per_hour: Mapped[float | None] = mapped_column(Float)
    price_as_of: Mapped[date | None] = mapped_column(Date)
    price_source: Mapped[str | None] = mapped_column(Text)
    efficiency_memory: Mapped[float | None] = mapped_column(Float)
    efficiency_compute: Mapped[float | None] = mapped_column(Float)
    efficiency_step_overhead_ms: Mapped[float | None] = mapped_column(Float)
    efficiency_memory_reserve_fraction: Mapped[float | None] = mapped_column(Float)
    #: 1 = memory and compute time combine as max(a, b), 0 as a + b; NULL (rows before 0005) reads as 1.
    efficiency_memory_compute_overlap: Mapped[float | None] = mapped_column(Float)
    efficiency_source: Mapped[str | None] = mapped_column(Text)
    #: The efficiency block's `confidence` (since 0007): NULL grade = ungraded.
    efficiency_confidence_grade: Mapped[str | None] = mapped_column(String(16))
    efficiency_confidence_points: Mapped[int | None] = mapped_column(Integer)
    efficiency_confidence_sources: Mapped[int | None] = mapped_column(Integer)
    efficiency_confidence_out_of_sample_error: Mapped[float | None] = mapped_column(Float)
    efficiency_confidence_carried_over_from: Mapped[str | None] = mapped_column(String(SLUG_LENGTH))
    efficiency_confidence_below_usual_range: Mapped[bool | None] = mapped_column(Boolean)
    source: Mapped[str] = mapped_column(Text, nullable=False)


class ModelRow(_Versioned, Base):
    __tablename__ = "models"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    slug: Mapped[str] = mapped_column(String(SLUG_LENGTH), unique=True, nullable=False)
    name: Mapped[str] = mapped_column(String(NAME_LENGTH), nullable=False)
    params_total: Mapped[int] = mapped_column(BigInteger, nullable=False)
    params_active: Mapped[int] = mapped_column(BigInteger, nullable=False)
    layers: Mapped[int] = mapped_column(Integer, nullable=False)
    hidden_size: Mapped[int] = mapped_column(Integer, nullable=False)
    attention_heads: Mapped[int] = mapped_column(Integer, nullable=False)
    kv_heads: Mapped[int] = mapped_column(Integer, nullable=False)
    head_dim: Mapped[int] = mapped_column(Integer, nullable=False)
    intermediate_size: Mapped[int] = mapped_column(Integer, nullable=False)
    vocab_size: Mapped[int] = mapped_column(Integer, nullable=False)
    max_context_tokens: Mapped[int] = mapped_column(Integer, nullable=False)
    moe_experts: Mapped[int | None] = mapped_column(Integer)
    moe_experts_per_token: Mapped[int | None] = mapped_column(Integer)
    moe_shared_experts: Mapped[int | None] = mapped_column(Integer)
    moe_expert_params: Mapped[int | None] = mapped_column(BigInteger)
    moe_layers: Mapped[int | None] = mapped_column(Integer)
    mla_kv_lora_rank: Mapped[int | None] = mapped_column(Integer)
    mla_rope_head_dim: Mapped[int | None] = mapped_column(Integer)
    checkpoint: Mapped[str | None] = mapped_column(String(NAME_LENGTH))  # public checkpoint id (a Hugging Face repo id)
    source: Mapped[str] = mapped_column(Text, nullable=False)


class QuantizationRow(_Versioned, Base):
    __tablename__ = "quantizations"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    slug: Mapped[str] = mapped_column(String(SLUG_LENGTH), unique=True, nullable=False)
    name: Mapped[str] = mapped_column(String(NAME_LENGTH), nullable=False)
    weight_bytes_per_param: Mapped[float] = mapped_column(Float, nullable=False)
    element_bytes: Mapped[float] = mapped_column(Float, nullable=False)
    compute_dtype: Mapped[str] = mapped_column(String(16), nullable=False)
    kv_cache_dtypes: Mapped[list[str]] = mapped_column(JSON, nullable=False)
    min_architecture: Mapped[str | None] = mapped_column(String(32))
    engine_names: Mapped[dict[str, str] | None] = mapped_column(JSON)  # serving engine -> its name for this scheme
    source: Mapped[str] = mapped_column(Text, nullable=False)


class EfficiencyProfileRow(_Versioned, Base):
    """A named calibration of one GPU. Deleting the GPU deletes its profiles (ON DELETE CASCADE);
    `model_slug` and `weights_slug` record what the fit was measured on and are not foreign keys,
    so the provenance survives edits to the model and quantization tables."""

    __tablename__ = "efficiency_profiles"
    __table_args__ = (UniqueConstraint("gpu_id", "name"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(SLUG_LENGTH), nullable=False)
    gpu_id: Mapped[int] = mapped_column(Integer, ForeignKey("gpus.id", ondelete="CASCADE"), index=True, nullable=False)
    model_slug: Mapped[str | None] = mapped_column(String(SLUG_LENGTH))
    weights_slug: Mapped[str | None] = mapped_column(String(SLUG_LENGTH))
    memory: Mapped[float] = mapped_column(Float, nullable=False)
    compute: Mapped[float] = mapped_column(Float, nullable=False)
    step_overhead_ms: Mapped[float] = mapped_column(Float, nullable=False)
    memory_reserve_fraction: Mapped[float] = mapped_column(Float, nullable=False)
    include_comm: Mapped[bool] = mapped_column(Boolean, nullable=False)
    memory_compute_overlap: Mapped[float] = mapped_column(Float, nullable=False)
    source: Mapped[str] = mapped_column(Text, nullable=False)
    fit: Mapped[dict[str, Any] | None] = mapped_column(JSON)


class GpuPriceRow(_Versioned, Base):
    """What one provider charges for one GPU, per GPU-hour, in USD. `region` is "" for a
    provider-wide list price (the empty string rather than NULL so the unique constraint holds:
    both backends treat NULLs as distinct). Deleting the GPU deletes its prices."""

    __tablename__ = "gpu_prices"
    __table_args__ = (UniqueConstraint("provider", "gpu_id", "region"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    provider: Mapped[str] = mapped_column(String(SLUG_LENGTH), index=True, nullable=False)
    gpu_id: Mapped[int] = mapped_column(Integer, ForeignKey("gpus.id", ondelete="CASCADE"), index=True, nullable=False)
    region: Mapped[str] = mapped_column(String(SLUG_LENGTH), nullable=False)
    on_demand_usd_per_hour: Mapped[float] = mapped_column(Float, nullable=False)
    reserved_1y_usd_per_hour: Mapped[float | None] = mapped_column(Float)
    reserved_3y_usd_per_hour: Mapped[float | None] = mapped_column(Float)
    spot_usd_per_hour: Mapped[float | None] = mapped_column(Float)
    as_of: Mapped[date] = mapped_column(Date, nullable=False)
    source: Mapped[str] = mapped_column(Text, nullable=False)


class InstanceTypeRow(_Versioned, Base):
    """A cloud instance type: `gpus` GPUs of one type sharing an NVLink/Infinity-Fabric domain of
    `nvlink_domain` GPUs, its scale-out network, vCPUs and RAM, and what one provider charges per
    instance-hour in one region ("" = the provider's list price). Deleting the GPU deletes it."""

    __tablename__ = "instance_types"
    __table_args__ = (UniqueConstraint("provider", "name", "region"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    provider: Mapped[str] = mapped_column(String(SLUG_LENGTH), index=True, nullable=False)
    name: Mapped[str] = mapped_column(String(SLUG_LENGTH), nullable=False)
    region: Mapped[str] = mapped_column(String(SLUG_LENGTH), nullable=False)
    gpu_id: Mapped[int] = mapped_column(Integer, ForeignKey("gpus.id", ondelete="CASCADE"), index=True, nullable=False)
    gpus: Mapped[int] = mapped_column(Integer, nullable=False)
    nvlink_domain: Mapped[int] = mapped_column(Integer, nullable=False)
    network_gbit_per_s: Mapped[float | None] = mapped_column(Float)
    vcpus: Mapped[int | None] = mapped_column(Integer)
    ram_gib: Mapped[float | None] = mapped_column(Float)
    on_demand_usd_per_hour: Mapped[float] = mapped_column(Float, nullable=False)
    reserved_1y_usd_per_hour: Mapped[float | None] = mapped_column(Float)
    as_of: Mapped[date] = mapped_column(Date, nullable=False)
    source: Mapped[str] = mapped_column(Text, nullable=False)


class ApiKeyRow(Base):
    """An API key: its public id and the SHA-256 of its secret; the secret itself is never stored."""

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    secret_sha256: Mapped[str] = mapped_column(String(64), nullable=False)
    role: Mapped[str] = mapped_column(String(16), nullable=False)
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    __mapper_args__ = {"version_id_col": version}  # noqa: RUF012 - SQLAlchemy reads it from the class (its documented form)


class CatalogMeta(Base):
    """The single row (id = 1) whose `version` is the catalog version plans record."""

    __tablename__ = "catalog_meta"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    version: Mapped[int] = mapped_column(BigInteger, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class FleetPlanRow(Base):
    """A stored fleet plan (POST /v1/fleet-plans): the request and response bodies as sent, and
    the catalog version it was planned against. Written once, never updated."""

    __tablename__ = "fleet_plans"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    request: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    response: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    catalog_version: Mapped[int] = mapped_column(BigInteger, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True, nullable=False)


class PlanRow(Base):
    """A stored plan (POST /v1/plans): the request and response bodies as sent, the catalog version
    it was planned against and the optional deployment name it was made for. Written once, never updated."""

    __tablename__ = "plans"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str | None] = mapped_column(String(NAME_LENGTH), index=True)
    request: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    response: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    catalog_version: Mapped[int] = mapped_column(BigInteger, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True, nullable=False)


class DeploymentRow(Base):
    """A named deployment: the plan request it is (re-)planned with, its hysteresis settings and
    the plan now in force. Its history is every plan stored under its name."""

    __tablename__ = "deployments"

    name: Mapped[str] = mapped_column(String(NAME_LENGTH), primary_key=True)
    request: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    hysteresis: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    current_plan_id: Mapped[str | None] = mapped_column(String(32), ForeignKey("plans.id"))
    version: Mapped[int] = mapped_column(Integer, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)

    __mapper_args__ = {"version_id_col": version}  # noqa: RUF012 - SQLAlchemy reads it from the class (its documented form)


class IdempotencyKeyRow(Base):
    """A request sent with an `Idempotency-Key`, per caller (`scope`: the API key's id, or
    "anonymous"): claimed (`response_status` NULL) before its work starts, so a concurrent retry
    waits for it, and then its first answer, replayed to retries with the same request until the
    idempotency window passes. `claim_token` tells the claimer's answer from a later claimer's."""

    __tablename__ = "idempotency_keys"

    scope: Mapped[str] = mapped_column(String(40), primary_key=True)
    key: Mapped[str] = mapped_column(String(200), primary_key=True)
    request_hash: Mapped[str] = mapped_column(String(64), nullable=False)
    method: Mapped[str] = mapped_column(String(10), nullable=False)
    path: Mapped[str] = mapped_column(String(500), nullable=False)
    claim_token: Mapped[str] = mapped_column(String(32), nullable=False)
    response_status: Mapped[int | None] = mapped_column(Integer)
    response_headers: Mapped[dict[str, str] | None] = mapped_column(JSON)
    response_body: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True, nullable=False)


class OperationRow(Base):
    """A long-running request run by task workers (catalog/operations.py): its request as sent, its
    state and progress, and its result or the problem it failed with."""

    __tablename__ = "operations"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32), nullable=False)
    state: Mapped[str] = mapped_column(String(16), index=True, nullable=False)
    request: Mapped[dict[str, Any]] = mapped_column(JSON, nullable=False)
    units_total: Mapped[int] = mapped_column(Integer, nullable=False)
    units_done: Mapped[int] = mapped_column(Integer, nullable=False)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    result_location: Mapped[str | None] = mapped_column(String(200))
    problem: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    attempts: Mapped[int] = mapped_column(Integer, nullable=False)
    cancel_requested: Mapped[bool] = mapped_column(Boolean, nullable=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True, nullable=False)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    updated_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)


class OperationUnitRow(Base):
    """One independent piece of an operation (a sweep's point): stored once, whatever redelivers it."""

    __tablename__ = "operation_units"

    operation_id: Mapped[str] = mapped_column(String(32), ForeignKey("operations.id", ondelete="CASCADE"), primary_key=True)
    index: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    state: Mapped[str] = mapped_column(String(16), nullable=False)
    result: Mapped[Any] = mapped_column(JSON, nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, nullable=False)
    error: Mapped[str | None] = mapped_column(Text)


class EngineProfileRow(Base):
    """One GPU's efficiency under one serving engine generation (bench/engine_profiles.py fits them);
    deleting the GPU deletes its engine profiles. A (GPU, engine) pair without a row falls back
    (planner/engines.py says how, and the plan says so)."""

    __tablename__ = "engine_profiles"
    __table_args__ = (UniqueConstraint("gpu_id", "engine", "engine_generation"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    gpu_id: Mapped[int] = mapped_column(Integer, ForeignKey("gpus.id", ondelete="CASCADE"), index=True, nullable=False)
    engine: Mapped[str] = mapped_column(String(SLUG_LENGTH), nullable=False)
    engine_generation: Mapped[str] = mapped_column(String(200), nullable=False)
    memory: Mapped[float] = mapped_column(Float, nullable=False)
    compute: Mapped[float] = mapped_column(Float, nullable=False)
    step_overhead_ms: Mapped[float] = mapped_column(Float, nullable=False)
    memory_reserve_fraction: Mapped[float] = mapped_column(Float, nullable=False)
    memory_compute_overlap: Mapped[float] = mapped_column(Float, nullable=False)
    points: Mapped[int] = mapped_column(Integer, nullable=False)
    sources: Mapped[int] = mapped_column(Integer, nullable=False)
    source: Mapped[str] = mapped_column(Text, nullable=False)


class LowPrecisionFactorRow(Base):
    """Realised / datasheet rate of one datatype's matrix multiplies on one architecture under one engine."""

    __tablename__ = "low_precision_factors"
    __table_args__ = (UniqueConstraint("architecture", "engine", "datatype"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    architecture: Mapped[str] = mapped_column(String(SLUG_LENGTH), nullable=False)
    engine: Mapped[str] = mapped_column(String(SLUG_LENGTH), nullable=False)
    datatype: Mapped[str] = mapped_column(String(SLUG_LENGTH), nullable=False)
    factor: Mapped[float] = mapped_column(Float, nullable=False)
    source: Mapped[str] = mapped_column(Text, nullable=False)
