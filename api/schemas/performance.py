"""Request bodies of `POST /v1/evaluate` and `POST /v1/simulate`: one replica configuration (catalog
slugs, tp, precision, efficiency), and optionally a workload, serving limits and a prefix cache; what
they answer is api/schemas/performance_response.py.

Units at the edge: bytes stay bytes, step and latency times are milliseconds (`_ms`), end-to-end
latency and time in system seconds (`_s`), rates per second (`_rps`, `_per_s`). The `step_model`
block keeps the planner's SI coefficients (bytes, FLOPs, seconds) so a client can recompute a step.
"""

from __future__ import annotations

from typing import Annotated, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from api.schemas.catalog import Slug
from api.schemas.plans import OneEngineSpec
from api.schemas.workload import ServingSpec, WorkloadSpec


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class PrecisionSpec(_Input):
    """Numeric formats of the weights and the KV cache (catalog quantization slugs, chosen independently
    within what the weights scheme allows)."""

    weights: Slug = Field(description="Quantization scheme of the weights (a catalog slug).", examples=["fp16"])
    kv_cache: Slug = Field(description="Quantization scheme of the KV cache (a catalog slug).", examples=["fp16"])


_Fraction = Annotated[float | None, Field(default=None, allow_inf_nan=False)]


class EfficiencyOverrides(_Input):
    """Values that replace the named efficiency profile's, for this request only."""

    memory_efficiency: _Fraction = Field(gt=0, le=1, description="η_mem: achieved / datasheet memory bandwidth, in (0, 1].")
    compute_efficiency: _Fraction = Field(gt=0, le=1, description="η_compute: achieved / datasheet peak FLOP/s, in (0, 1].")
    step_overhead_ms: _Fraction = Field(ge=0, le=1e4, description="Fixed time added to every step (scheduler, launches), ms.")
    memory_reserve_fraction: _Fraction = Field(
        ge=0, lt=1, description="Fraction of GPU memory unavailable to weights and KV cache, in [0, 1)."
    )
    include_comm: bool | None = Field(
        default=None, description="Count tensor-parallel all-reduce time (two ring all-reduces per layer)."
    )
    memory_compute_overlap: _Fraction = Field(
        ge=0, le=1, description="How memory and compute time combine: 1 = max of the two (full overlap), 0 = their sum."
    )


class ConfigurationSpec(_Input):
    """One replica shape: `tp` GPUs of one type holding one copy of the model."""

    model: Slug = Field(description="Model (a catalog slug).", examples=["llama-2-70b"])
    gpu: Slug = Field(description="GPU type (a catalog slug).", examples=["h100-sxm"])
    tp: int = Field(default=1, ge=1, le=64, description="Tensor-parallel degree: GPUs per replica.", examples=[4])
    precision: PrecisionSpec
    efficiency_profile: Slug = Field(
        default="calibrated",
        description="`ideal` (η = 1, no reserve, no communication, no overhead), `calibrated` (the GPU's fitted "
        "efficiencies, communication on) or the name of a profile stored by POST /v1/calibrations.",
        examples=["calibrated"],
    )
    overrides: EfficiencyOverrides | None = Field(default=None, description="Replace some of the profile's values.")
    engine: OneEngineSpec | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="Serving engine, optionally naming its release generation (`vllm@0.11`; `trt-llm@all`: pooled over "
        "releases; bare: its newest generation with a profile of its own): with the `calibrated` profile, the GPU's "
        "efficiency under it (its per (GPU, engine, generation) profile and low-precision factors, or the documented "
        "fallback; the answer's `engine.profile` and `efficiency.source` say which, docs/engines.md). A generation no "
        "profile of the engine has is a 422 naming the known ones. One engine: a configuration runs on one. Omitted: "
        "the engine-agnostic calibration.",
    )

    def override_values(self) -> dict[str, float | bool]:
        return {} if self.overrides is None else self.overrides.model_dump(exclude_none=True)


class PrefixCacheSpec(_Input):
    """The prefix cache the deployment runs for `workload.prefix_reuse` (the decision `plan.prefix_caching` reports):
    each replica's cache size and the routing. Either member left out takes the plan's default."""

    cache_tokens: int | None = Field(
        default=None,
        ge=0,
        le=10_000_000,
        multiple_of=16,
        description="KV tokens each replica gives the prefix cache, whole 16-token blocks (taken from its KV capacity); "
        "default: the whole per-replica working set (the system prompt plus the prefixes one replica sees), the largest "
        "cache a plan tries.",
        examples=[8192],
    )
    routing: Literal["random", "prefix_aware"] | None = Field(
        default=None,
        description="`random`: every replica sees every prefix; `prefix_aware`: each prefix pinned to one replica "
        "(llm-d, SGLang router, Dynamo KV router). Default: the plan's, prefix_aware with more than one replica "
        "and more than one distinct prefix, else random.",
    )


class EvaluateRequest(ConfigurationSpec):
    """A configuration to evaluate at a context length, batch sizes and a prompt length; with
    `serving` and `workload` (both or neither) also its queueing latencies."""

    context_tokens: int = Field(
        ge=1,
        le=10_000_000,
        description="Tokens of context each decoding sequence holds (KV cache read per step).",
        examples=[4096],
    )
    batch_sizes: list[Annotated[int, Field(ge=1, le=1_000_000)]] = Field(
        default=[1],
        min_length=1,
        max_length=64,
        description="Batch sizes (sequences per step) to report decode rows for.",
        examples=[[1, 32, 134]],
    )
    prompt_tokens: int | None = Field(
        default=None,
        ge=1,
        le=10_000_000,
        description="Prompt length of the prefill row in tokens; default `context_tokens`.",
        examples=[2000],
    )
    serving: ServingSpec | None = Field(
        default=None, description="Serving shape; with `workload`, adds `predicted` and `queueing`."
    )
    workload: WorkloadSpec | None = Field(default=None, description="Traffic; with `serving`, adds `predicted` and `queueing`.")
    prefix_cache: PrefixCacheSpec | None = Field(
        default=None,
        description="With workload.prefix_reuse: the cache size and routing evaluated (each member defaults to the plan's). "
        "The prediction then plans the prompt tokens prefilled on the KV left beside the cache, and `prefix_cache` "
        "in the response gives the hit rate, the KV given to the cache and the cached prefill step.",
    )

    @model_validator(mode="after")
    def _serving_with_workload(self) -> Self:
        if (self.serving is None) != (self.workload is None):
            given, missing = ("serving", "workload") if self.workload is None else ("workload", "serving")
            raise ValueError(f"{given} is given without {missing}: the queueing prediction needs both (or leave out both)")
        _check_prefix_cache(self.workload, self.serving, self.prefix_cache)
        return self


class SimulateRequest(ConfigurationSpec):
    """A configuration, serving shape and workload to run through the discrete-event simulator."""

    serving: ServingSpec
    workload: WorkloadSpec
    requests: int = Field(
        default=20_000,
        ge=100,
        description="Arrivals to simulate (warm-up included). The service refuses more than its configured "
        "maximum (HEADROOM_MAX_SIMULATED_REQUESTS, default 200,000) with a 422.",
    )
    seed: int = Field(default=0, ge=0, le=2**63 - 1, description="Random seed: the same request and seed give the same answer.")
    warmup_fraction: float = Field(
        default=0.1, ge=0, le=0.9, description="Leading fraction of requests (by arrival) left out of the statistics."
    )

    prefix_cache: PrefixCacheSpec | None = Field(
        default=None,
        description="With workload.prefix_reuse: the cache size and routing simulated (each member defaults to the plan's). "
        "The simulator then runs replica 0 — the busiest under prefix-aware routing — with its own LRU, as a plan's "
        "verification does, and `prefix_cache` in the response gives its measured hit rate.",
    )

    @model_validator(mode="after")
    def _prefix_cache_with_reuse(self) -> Self:
        _check_prefix_cache(self.workload, self.serving, self.prefix_cache)
        return self


def _check_prefix_cache(workload: WorkloadSpec | None, serving: ServingSpec | None, cache: PrefixCacheSpec | None) -> None:
    """Refused rather than ignored: a cache without reuse to fill it, a cache size or routing for a measured hit
    rate (measured with the engine's own cache and routing), or a router the prefix simulation does not model."""
    reuse = None if workload is None else workload.prefix_reuse
    if reuse is None:
        if cache is not None:
            raise ValueError("prefix_cache is given without workload.prefix_reuse: describe the reuse the cache serves")
        return
    if reuse.hit_rate is not None and cache is not None and (cache.cache_tokens or cache.routing is not None):
        raise ValueError(
            "prefix_cache with a measured prefix_reuse.hit_rate: the rate was measured with the engine's own cache and "
            "routing, which are taken as they were (leave out prefix_cache, or describe the prefixes instead)"
        )
    if serving is not None and serving.replicas > 1 and serving.router != "random":
        raise ValueError(
            f"serving.router {serving.router!r} with workload.prefix_reuse: a prefix cache is evaluated on replica 0 of a "
            "random split of the arrivals (prefix-aware routing pins the prefixes, the rest split at random), as a plan "
            "verifies it; use router random and prefix_cache.routing for the prefixes"
        )
