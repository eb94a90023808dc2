"""Validation and canonical form of catalog records (the contract's JSON shapes), without a database.

`canonical_<kind>(record)` checks every field of a record at once and returns it in canonical
form: every key present in contract order, optional members absent from the input filled with
null (or their stated default), integers as int. Problems are collected, not raised one by
one, so an `InvalidRecordError` names each bad field ("memory_gb", "peak_tflops.fp8",
"moe.experts_per_token"). Read-only members (`version`, `created_at`, `updated_at`) are
ignored on input; any other unknown member is an error, so a typo never passes silently.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping
from datetime import date
from typing import Any

from catalog.errors import InvalidRecordError
from planner import specs
from planner.confidence import GRADES
from planner.specs import ARCHITECTURE_GENERATIONS, DATATYPES

READ_ONLY_FIELDS: frozenset[str] = frozenset({"version", "created_at", "updated_at"})
API_KEY_ROLES: tuple[str, ...] = ("admin", "planner", "reader")
#: Profile names `gpu_spec` resolves itself; a stored profile cannot take them.
RESERVED_PROFILE_NAMES: frozenset[str] = frozenset({"ideal", "calibrated"})

SLUG_PATTERN = re.compile(r"^[a-z0-9](?:[a-z0-9._-]{0,62}[a-z0-9])?$")
DATE_PATTERN = re.compile(r"^\d{4}-\d{2}-\d{2}$")
#: A public checkpoint id: a Hugging Face repo id "owner/name" (https://huggingface.co/docs/hub/repositories).
CHECKPOINT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
#: Serving engines a quantization scheme may name itself for (`engine_names`), as GET /v1/plans/{id}/deploy renders them.
ENGINES: tuple[str, ...] = ("vllm", "sglang", "trt-llm")
#: An engine's name for a scheme: a CLI choice or enum member (vLLM `compressed-tensors`, TensorRT-LLM `W4A16_AWQ`).
ENGINE_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
KNOWN_ARCHITECTURES: frozenset[str] = frozenset(
    generation for generations in ARCHITECTURE_GENERATIONS.values() for generation in generations
)

#: Longest free text (`source`) a record carries: a citation and how values were derived fit in far less.
MAX_TEXT_LENGTH = 4_000
# Physical bounds in record units, from planner/specs.py's SI bounds (docs/reliability.md "Bounds").
_GB, _TFLOPS = 1e9, 1e12
_MAX_PRICE = specs.MAX_PRICE_USD_PER_HOUR

_MISSING = object()
INT32_MAX = 2**31 - 1
INT64_MAX = 2**63 - 1


class _Checker:
    """Reads one (possibly nested) record, converting values and collecting every problem."""

    def __init__(self, record: object, path: str, errors: list[dict[str, str]], *, top_level: bool = False) -> None:
        self.path = path
        self.top_level = top_level
        self.errors = errors
        self.is_object = isinstance(record, Mapping)
        self.record: Mapping[str, Any] = record if isinstance(record, Mapping) else {}
        if not self.is_object:
            self.errors.append({"field": path or "(record)", "message": "must be an object"})
        self.seen: set[str] = set()

    def field(self, key: str) -> str:
        return f"{self.path}.{key}" if self.path else key

    def error(self, key: str, message: str) -> None:
        self.errors.append({"field": self.field(key), "message": message})

    def _raw(self, key: str, *, nullable: bool, default: object) -> object:
        """The raw value, or _MISSING after recording why there is none to check."""
        self.seen.add(key)
        value = self.record.get(key, _MISSING)
        if value is _MISSING and default is not _MISSING:
            return default
        if value is _MISSING and nullable:
            return None
        if value is _MISSING:
            self.error(key, "field required")
            return _MISSING
        if value is None and not nullable:
            self.error(key, "must not be null")
            return _MISSING
        return value

    def text(
        self,
        key: str,
        *,
        nullable: bool = False,
        pattern: re.Pattern[str] | None = None,
        pattern_hint: str = "",
        max_length: int | None = None,
        choices: frozenset[str] | tuple[str, ...] | None = None,
    ) -> str | None:
        value = self._raw(key, nullable=nullable, default=_MISSING)
        if value is _MISSING or value is None:
            return None
        if not isinstance(value, str):
            self.error(key, "must be a string")
            return None
        if not value.strip():
            self.error(key, "must not be empty")
            return None
        if "\x00" in value:
            self.error(key, "must not contain NUL characters")
            return None
        if max_length is not None and len(value) > max_length:
            self.error(key, f"must be at most {max_length} characters")
            return None
        if pattern is not None and not pattern.fullmatch(value):
            self.error(key, f"must match {pattern.pattern} {pattern_hint}".rstrip())
            return None
        if choices is not None and value not in choices:
            self.error(key, f"must be one of {', '.join(sorted(choices))}, got {value!r}")
            return None
        return value

    def slug(self, key: str, *, nullable: bool = False) -> str | None:
        return self.text(
            key,
            nullable=nullable,
            pattern=SLUG_PATTERN,
            pattern_hint="(lowercase letters, digits, '.', '_', '-'; at most 64 characters)",
        )

    def _bounded(
        self,
        key: str,
        value: float,
        *,
        gt: float | None,
        ge: float | None,
        lt: float | None,
        le: float | None,
    ) -> bool:
        bounds: list[tuple[bool, str]] = [
            (gt is None or value > gt, f"must be greater than {gt}"),
            (ge is None or value >= ge, f"must be at least {ge}"),
            (lt is None or value < lt, f"must be less than {lt}"),
            (le is None or value <= le, f"must be at most {le}"),
        ]
        for ok, message in bounds:
            if not ok:
                self.error(key, f"{message}, got {value}")
                return False
        return True

    def number(
        self,
        key: str,
        *,
        nullable: bool = False,
        default: object = _MISSING,
        gt: float | None = None,
        ge: float | None = None,
        lt: float | None = None,
        le: float | None = None,
    ) -> float | None:
        value = self._raw(key, nullable=nullable, default=default)
        if value is _MISSING or value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.error(key, "must be a number")
            return None
        if not math.isfinite(value):
            self.error(key, "must be finite")
            return None
        return value if self._bounded(key, value, gt=gt, ge=ge, lt=lt, le=le) else None

    def integer(
        self,
        key: str,
        *,
        nullable: bool = False,
        default: object = _MISSING,
        ge: int | None = None,
        le: int | None = None,
        big: bool = False,
    ) -> int | None:
        """An integer; `big` ones (parameter counts) are stored as 64-bit, the rest as 32-bit."""
        value = self._raw(key, nullable=nullable, default=default)
        if value is _MISSING or value is None:
            return None
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)  # JSON clients may write 7e10
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(key, "must be an integer")
            return None
        limit = INT64_MAX if big else INT32_MAX
        if not -limit <= value <= limit:
            self.error(key, f"must be at most {limit} in magnitude, got {value}")
            return None
        return value if self._bounded(key, value, gt=None, ge=ge, lt=None, le=le) else None

    def boolean(self, key: str, *, default: object = _MISSING) -> bool | None:
        value = self._raw(key, nullable=False, default=default)
        if value is _MISSING or value is None:
            return None
        if not isinstance(value, bool):
            self.error(key, "must be true or false")
            return None
        return value

    def iso_date(self, key: str, *, nullable: bool = False) -> str | None:
        value = self.text(key, nullable=nullable)
        if value is None:
            return None
        if not DATE_PATTERN.fullmatch(value):
            self.error(key, f"must be a date YYYY-MM-DD, got {value!r}")
            return None
        try:
            return date.fromisoformat(value).isoformat()
        except ValueError:
            self.error(key, f"is not a calendar date: {value!r}")
            return None

    def block(self, key: str, *, nullable: bool) -> _Checker | None:
        """A nested object's checker, or None for an allowed null (or an error already recorded)."""
        value = self._raw(key, nullable=nullable, default=_MISSING)
        if value is _MISSING or value is None:
            return None
        return _Checker(value, self.field(key), self.errors)

    def object(self, key: str, *, nullable: bool) -> dict[str, Any] | None:
        """A free-form JSON object (stored as given)."""
        value = self._raw(key, nullable=nullable, default=_MISSING)
        if value is _MISSING or value is None:
            return None
        if not isinstance(value, Mapping):
            self.error(key, "must be an object")
            return None
        try:
            # Stored as JSON text: no NaN/Infinity (PostgreSQL rejects them) and no NUL.
            encoded = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as error:
            self.error(key, f"must be plain JSON: {error}")
            return None
        if "\\u0000" in encoded:
            self.error(key, "must not contain NUL characters")
            return None
        decoded: dict[str, Any] = json.loads(encoded)  # a Mapping encodes to a JSON object, so it decodes to a dict
        return decoded

    def finish(self) -> None:
        """Record members nobody asked for (typos, fields from another kind)."""
        read_only = READ_ONLY_FIELDS if self.top_level else frozenset()
        for key in self.record:
            if key not in self.seen and key not in read_only:
                self.error(str(key), "unknown field")


def _raise_if_any(kind: str, errors: list[dict[str, str]]) -> None:
    if errors:
        fields = ", ".join(error["field"] for error in errors)
        raise InvalidRecordError(f"invalid {kind} record: {fields}", errors=errors)


def _run(
    kind: str, record: object, path: str, build: Callable[[_Checker], dict[str, Any]], errors: list[dict[str, str]] | None
) -> dict[str, Any]:
    own_errors: list[dict[str, str]] = [] if errors is None else errors
    checker = _Checker(record, path, own_errors, top_level=True)
    canonical = build(checker)
    checker.finish()
    if errors is None:
        _raise_if_any(kind, own_errors)
    return canonical


def _architecture_matches_vendor(check: _Checker, vendor: str | None, architecture: str | None) -> None:
    generations = ARCHITECTURE_GENERATIONS.get(vendor or "")
    if generations is not None and architecture is not None and architecture not in generations:
        check.error("architecture", f"{vendor} architectures are {', '.join(generations)}; got {architecture!r}")


def _calibration_confidence(efficiency: _Checker) -> dict[str, Any] | None:
    """The efficiency block's `confidence`: the calibration's grade and the evidence it was given
    for (planner/confidence.py; bench/confidence.py computes it for the reference GPUs). Null: ungraded."""
    block = efficiency.block("confidence", nullable=True)
    if block is None:
        return None
    confidence = {
        "grade": block.text("grade", choices=GRADES),
        "points": block.integer("points", ge=0),
        "sources": block.integer("sources", ge=0),
        "out_of_sample_error": block.number("out_of_sample_error", nullable=True, ge=0),
        "carried_over_from": block.slug("carried_over_from", nullable=True),
        "below_usual_range": block.boolean("below_usual_range", default=False),
    }
    block.finish()
    points, sources = confidence["points"], confidence["sources"]
    if isinstance(points, int) and isinstance(sources, int) and sources > points:
        block.error("sources", "must not exceed points")
    return confidence


def canonical_gpu(record: object, *, path: str = "", errors: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A GPU record in canonical form; raises InvalidRecordError listing every bad field
    (unless `errors` is given, then problems are appended to it)."""

    def build(check: _Checker) -> dict[str, Any]:
        vendor = check.text("vendor", max_length=32)
        architecture = check.text("architecture", max_length=32)
        _architecture_matches_vendor(check, vendor, architecture)
        peak_tflops: dict[str, float | None] = dict.fromkeys(DATATYPES)
        peak = check.block("peak_tflops", nullable=False)
        if peak is not None:
            for datatype in DATATYPES:
                peak_tflops[datatype] = peak.number(
                    datatype, nullable=True, ge=specs.MIN_PEAK_FLOPS_PER_S / _TFLOPS, le=specs.MAX_PEAK_FLOPS_PER_S / _TFLOPS
                )
            if peak.is_object and all(peak.record.get(datatype) is None for datatype in DATATYPES):
                check.error("peak_tflops", "at least one datatype needs a peak")
            peak.finish()
        price: dict[str, Any] | None = None
        price_block = check.block("price_usd_per_hour", nullable=True)
        if price_block is not None:
            price = {
                "on_demand": price_block.number("on_demand", ge=0, le=_MAX_PRICE),
                "reserved_1y": price_block.number("reserved_1y", nullable=True, ge=0, le=_MAX_PRICE),
                "as_of": price_block.iso_date("as_of", nullable=True),
                "source": price_block.text("source", nullable=True, max_length=MAX_TEXT_LENGTH),
            }
            price_block.finish()
        efficiency: dict[str, Any] | None = None
        efficiency_block = check.block("efficiency", nullable=True)
        if efficiency_block is not None:
            efficiency = {
                "memory": efficiency_block.number("memory", gt=0, le=1),
                "compute": efficiency_block.number("compute", gt=0, le=1),
                "step_overhead_ms": efficiency_block.number(
                    "step_overhead_ms", default=0.0, ge=0, le=specs.MAX_STEP_OVERHEAD_S * 1e3
                ),
                "memory_reserve_fraction": efficiency_block.number("memory_reserve_fraction", default=0.0, ge=0, lt=1),
                "memory_compute_overlap": efficiency_block.number("memory_compute_overlap", default=1.0, ge=0, le=1),
                "source": efficiency_block.text("source", nullable=True, max_length=MAX_TEXT_LENGTH),
                "confidence": _calibration_confidence(efficiency_block),
            }
            efficiency_block.finish()
        return {
            "slug": check.slug("slug"),
            "name": check.text("name", max_length=200),
            "vendor": vendor,
            "architecture": architecture,
            "memory_gb": check.number("memory_gb", ge=specs.MIN_MEMORY_BYTES / _GB, le=specs.MAX_MEMORY_BYTES / _GB),
            "memory_bandwidth_gb_per_s": check.number(
                "memory_bandwidth_gb_per_s", ge=specs.MIN_BANDWIDTH_BYTES_PER_S / _GB, le=specs.MAX_BANDWIDTH_BYTES_PER_S / _GB
            ),
            "peak_tflops": peak_tflops,
            "interconnect_gb_per_s": check.number(
                "interconnect_gb_per_s", ge=specs.MIN_INTERCONNECT_BYTES_PER_S / _GB, le=specs.MAX_INTERCONNECT_BYTES_PER_S / _GB
            ),
            "interconnect_latency_us": check.number(
                "interconnect_latency_us", nullable=True, ge=0, le=specs.MAX_INTERCONNECT_LATENCY_S * 1e6
            ),
            "gpus_per_node": check.integer("gpus_per_node", ge=1, le=specs.MAX_GPUS_PER_NODE),
            # since 0013; a record from before it has none (the planner's default network)
            "scale_out_gbit_per_s": check.number(
                "scale_out_gbit_per_s",
                nullable=True,
                default=None,
                ge=specs.MIN_INTERCONNECT_BYTES_PER_S * 8 / _GB,
                le=specs.MAX_INTERCONNECT_BYTES_PER_S * 8 / _GB,
            ),
            "scale_out_latency_us": check.number(
                "scale_out_latency_us", nullable=True, default=None, ge=0, le=specs.MAX_INTERCONNECT_LATENCY_S * 1e6
            ),
            "scale_out_source": check.text("scale_out_source", nullable=True, max_length=MAX_TEXT_LENGTH),
            "price_usd_per_hour": price,
            "efficiency": efficiency,
            "source": check.text("source", max_length=MAX_TEXT_LENGTH),
        }

    return _run("GPU", record, path, build, errors)


def canonical_model(record: object, *, path: str = "", errors: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A model record in canonical form (see `canonical_gpu`)."""

    def build(check: _Checker) -> dict[str, Any]:
        canonical: dict[str, Any] = {
            "slug": check.slug("slug"),
            "name": check.text("name", max_length=200),
            "params_total": check.integer("params_total", ge=1, le=int(specs.MAX_PARAMS), big=True),
            "params_active": check.integer("params_active", ge=1, le=int(specs.MAX_PARAMS), big=True),
            "layers": check.integer("layers", ge=1, le=specs.MAX_MODEL_DIMENSION),
            "hidden_size": check.integer("hidden_size", ge=1, le=specs.MAX_MODEL_DIMENSION),
            "attention_heads": check.integer("attention_heads", ge=1, le=specs.MAX_MODEL_DIMENSION),
            "kv_heads": check.integer("kv_heads", ge=1, le=specs.MAX_MODEL_DIMENSION),
            "head_dim": check.integer("head_dim", ge=1, le=specs.MAX_MODEL_DIMENSION),
            "intermediate_size": check.integer("intermediate_size", ge=1, le=specs.MAX_INTERMEDIATE_SIZE),
            "vocab_size": check.integer("vocab_size", ge=1, le=specs.MAX_VOCAB_SIZE),
            "max_context_tokens": check.integer("max_context_tokens", ge=1, le=specs.MAX_CONTEXT_TOKENS),
            "moe": None,
            "mla": None,
        }
        total, active = canonical["params_total"], canonical["params_active"]
        if total is not None and active is not None and active > total:
            check.error("params_active", f"must not exceed params_total ({total}), got {active}")
        heads, kv_heads = canonical["attention_heads"], canonical["kv_heads"]
        if heads is not None and kv_heads is not None and heads % kv_heads != 0:
            check.error("kv_heads", f"must divide attention_heads ({heads}), got {kv_heads}")
        moe = check.block("moe", nullable=True)
        if moe is not None:
            block = {
                "experts": moe.integer("experts", ge=1, le=specs.MAX_MODEL_DIMENSION),
                "experts_per_token": moe.integer("experts_per_token", ge=1, le=specs.MAX_MODEL_DIMENSION),
                "shared_experts": moe.integer("shared_experts", ge=0, le=specs.MAX_MODEL_DIMENSION),
                "expert_params": moe.integer("expert_params", ge=1, le=int(specs.MAX_PARAMS), big=True),
                "moe_layers": moe.integer("moe_layers", ge=1, le=specs.MAX_MODEL_DIMENSION),
            }
            experts, per_token = block["experts"], block["experts_per_token"]
            if experts is not None and per_token is not None and per_token > experts:
                moe.error("experts_per_token", f"must not exceed experts ({experts}), got {per_token}")
            layers, moe_layers = canonical["layers"], block["moe_layers"]
            if layers is not None and moe_layers is not None and moe_layers > layers:
                moe.error("moe_layers", f"must not exceed layers ({layers}), got {moe_layers}")
            expert_params = block["expert_params"]
            if experts is not None and moe_layers is not None and expert_params is not None and total is not None:
                routed = experts * moe_layers * expert_params  # E experts × L_moe layers × params each
                if routed >= total:
                    moe.error("expert_params", f"routed experts hold {routed} params, not less than params_total ({total})")
            moe.finish()
            canonical["moe"] = block
        mla = check.block("mla", nullable=True)
        if mla is not None:
            canonical["mla"] = {
                "kv_lora_rank": mla.integer("kv_lora_rank", ge=1, le=specs.MAX_MODEL_DIMENSION),
                "rope_head_dim": mla.integer("rope_head_dim", ge=0, le=specs.MAX_MODEL_DIMENSION),
            }
            mla.finish()
        canonical["checkpoint"] = check.text(
            "checkpoint",
            nullable=True,
            max_length=200,
            pattern=CHECKPOINT_PATTERN,
            pattern_hint="(a Hugging Face repo id owner/name)",
        )
        canonical["source"] = check.text("source", max_length=MAX_TEXT_LENGTH)
        return canonical

    return _run("model", record, path, build, errors)


def canonical_quantization(record: object, *, path: str = "", errors: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A quantization-scheme record in canonical form (see `canonical_gpu`)."""

    def build(check: _Checker) -> dict[str, Any]:
        weight_bytes = check.number("weight_bytes_per_param", ge=specs.MIN_BYTES_PER_VALUE, le=specs.MAX_BYTES_PER_VALUE)
        element_bytes = check.number("element_bytes", ge=specs.MIN_BYTES_PER_VALUE, le=specs.MAX_BYTES_PER_VALUE)
        if weight_bytes is not None and element_bytes is not None and weight_bytes < element_bytes:
            check.error(
                "weight_bytes_per_param",
                f"must be at least element_bytes ({element_bytes}): scale overhead is never negative",
            )
        kv_cache_dtypes: list[str] = []
        check.seen.add("kv_cache_dtypes")
        raw = check.record.get("kv_cache_dtypes", [])
        if not isinstance(raw, list) or not all(isinstance(item, str) and SLUG_PATTERN.fullmatch(item) for item in raw):
            check.error("kv_cache_dtypes", "must be a list of quantization slugs")
        elif len(set(raw)) != len(raw):
            check.error("kv_cache_dtypes", "must not repeat a slug")
        else:
            kv_cache_dtypes = list(raw)
        return {
            "slug": check.slug("slug"),
            "name": check.text("name", max_length=200),
            "weight_bytes_per_param": weight_bytes,
            "element_bytes": element_bytes,
            "compute_dtype": check.text("compute_dtype", choices=DATATYPES),
            "kv_cache_dtypes": kv_cache_dtypes,
            "min_architecture": check.text("min_architecture", nullable=True, choices=KNOWN_ARCHITECTURES),
            "engine_names": _engine_names(check),
            "source": check.text("source", max_length=MAX_TEXT_LENGTH),
        }

    return _run("quantization", record, path, build, errors)


def _engine_names(check: _Checker) -> dict[str, str] | None:
    """A scheme's `engine_names`: serving engine (one of ENGINES) → the name that engine documents for
    it (what `--quantization` takes, or TensorRT-LLM's QuantAlgo). Null: no engine name recorded."""
    names = check.object("engine_names", nullable=True)
    if names is None:
        return None
    canonical: dict[str, str] = {}
    for engine, name in names.items():
        if engine not in ENGINES:
            check.error(f"engine_names.{engine}", f"unknown engine; engines are {', '.join(ENGINES)}")
        elif not isinstance(name, str) or not ENGINE_NAME_PATTERN.fullmatch(name):
            check.error(f"engine_names.{engine}", f"must match {ENGINE_NAME_PATTERN.pattern}")
        else:
            canonical[engine] = name
    return {engine: canonical[engine] for engine in ENGINES if engine in canonical}


def canonical_efficiency_profile(record: object, *, path: str = "", errors: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """An efficiency-profile record in canonical form (see `canonical_gpu`)."""

    def build(check: _Checker) -> dict[str, Any]:
        name = check.slug("name")
        if name in RESERVED_PROFILE_NAMES:
            check.error("name", f"{name!r} is reserved (gpu_spec resolves it itself)")
        return {
            "name": name,
            "gpu_slug": check.slug("gpu_slug"),
            "model_slug": check.slug("model_slug", nullable=True),
            "weights_slug": check.slug("weights_slug", nullable=True),
            "memory": check.number("memory", gt=0, le=1),
            "compute": check.number("compute", gt=0, le=1),
            "step_overhead_ms": check.number("step_overhead_ms", default=0.0, ge=0, le=specs.MAX_STEP_OVERHEAD_S * 1e3),
            "memory_reserve_fraction": check.number("memory_reserve_fraction", default=0.0, ge=0, lt=1),
            "include_comm": check.boolean("include_comm", default=True),
            "memory_compute_overlap": check.number("memory_compute_overlap", default=1.0, ge=0, le=1),
            "source": check.text("source", max_length=MAX_TEXT_LENGTH),
            "fit": check.object("fit", nullable=True),
        }

    return _run("efficiency profile", record, path, build, errors)


def canonical_price(record: object, *, path: str = "", errors: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A GPU price record in canonical form (see `canonical_gpu`): what `provider` charges for
    one `gpu` per GPU-hour in USD, optionally in one `region` (null: the provider's list price)."""

    def build(check: _Checker) -> dict[str, Any]:
        return {
            "provider": check.slug("provider"),
            "gpu": check.slug("gpu"),
            "region": check.slug("region", nullable=True),
            "on_demand": check.number("on_demand", ge=0, le=_MAX_PRICE),
            "reserved_1y": check.number("reserved_1y", nullable=True, ge=0, le=_MAX_PRICE),
            "reserved_3y": check.number("reserved_3y", nullable=True, ge=0, le=_MAX_PRICE),
            "spot": check.number("spot", nullable=True, ge=0, le=_MAX_PRICE),
            "as_of": check.iso_date("as_of"),
            "source": check.text("source", max_length=MAX_TEXT_LENGTH),
        }

    return _run("GPU price", record, path, build, errors)


def merged(stored: Mapping[str, Any], changes: object) -> object:
    """`stored` with the top-level members of `changes` replacing its own (nested blocks as a
    whole; an explicit null clears an optional member). Non-objects pass through to be rejected."""
    if not isinstance(changes, Mapping):
        return changes
    return {**stored, **{key: value for key, value in changes.items() if key not in READ_ONLY_FIELDS}}


def raise_collected(kind: str, errors: list[dict[str, str]]) -> None:
    """Raise one InvalidRecordError for problems collected across several records."""
    _raise_if_any(kind, errors)
