"""The serving engine as a dimension of the plan: per (GPU, engine, generation) efficiency profiles
and per (architecture, engine, datatype) low-precision factors, and the rule that picks them.

An engine profile is the calibration of one GPU under one engine (the `Efficiency` of
planner/specs.py, fitted by bench/engine_profiles.py from the engine's published points). A GPU ×
engine pair without one falls back, and the plan says so (`EngineChoice.fallback`, `.reason`):

1. the pair's own profile (of several engine generations stored, the one fitted on the most points:
   generation labels are release lists, not an order);
2. else the same GPU's profile under the engine with the most fitted points (its realised bandwidth
   and compute rates are the GPU's; the engine's own per-step costs are not known);
3. else the GPU's engine-agnostic catalog calibration (catalog `gpus.efficiency`, fitted by
   bench/fidelity.py, mostly on TensorRT-LLM), without low-precision factors, since that
   calibration already absorbs the low-precision rate of the points it was fitted on.

A low-precision factor is the realised rate of a datatype's matrix multiplies relative to the
datasheet ratio (e.g. FP8 over BF16 on Ada in TensorRT-LLM): it multiplies that datatype's peak.
Lookup: (architecture, engine, datatype); else the same architecture and datatype measured under
another engine (the GEMM rate is the tensor cores' and the kernel library's, and vLLM, SGLang and
TensorRT-LLM all run CUTLASS/cuBLASLt FP8 GEMMs on NVIDIA); else the datasheet ratio (factor 1).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from planner.errors import PlannerInputError
from planner.specs import Efficiency, GpuSpec

#: Serving engines a plan can be priced on: vLLM, SGLang and TensorRT-LLM.
ENGINES: tuple[str, ...] = ("vllm", "sglang", "trt-llm")
#: Which vendors' GPUs each engine runs on. TensorRT-LLM is NVIDIA-only ("TensorRT-LLM ... on NVIDIA
#: GPUs", https://nvidia.github.io/TensorRT-LLM/overview.html); vLLM and SGLang document ROCm builds
#: for AMD Instinct (https://docs.vllm.ai/en/stable/getting_started/installation/gpu.html "AMD ROCm",
#: https://docs.sglang.ai/platforms/amd_gpu.html).
ENGINE_VENDORS: dict[str, tuple[str, ...]] = {"vllm": ("nvidia", "amd"), "sglang": ("nvidia", "amd"), "trt-llm": ("nvidia",)}


def runs_on(engine: str, gpu: GpuSpec) -> bool:
    """Whether `engine` runs on `gpu`'s vendor."""
    return gpu.vendor.lower() in ENGINE_VENDORS[engine]


def allowed_engines(requested: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """The engines a request allows: None (engine-agnostic), one engine, a list, or "any" (all of ENGINES).
    PlannerInputError naming `engine` for an unknown engine or an empty list."""
    if requested is None:
        return None
    names = list(ENGINES) if requested == "any" else [requested] if isinstance(requested, str) else list(requested)
    if not names:
        raise PlannerInputError("engine: an empty list allows no engine; name at least one, or 'any'", field="engine")
    for name in names:
        if name not in ENGINES:
            raise PlannerInputError(
                f"engine: unknown engine {name!r}; engines are {', '.join(ENGINES)} (or 'any')", field="engine", engine=name
            )
    return tuple(dict.fromkeys(names))


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineProfile:
    """One GPU's calibration under one engine generation, with its evidence."""

    gpu: str
    engine: str
    generation: str
    efficiency: Efficiency
    points: int
    sources: int
    source: str

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise PlannerInputError(f"engine profile of {self.gpu}: unknown engine {self.engine!r}", field="engine")
        if self.points < 0 or self.sources < 0:
            raise PlannerInputError(f"engine profile of {self.gpu}/{self.engine}: negative point or source count")


@dataclass(frozen=True, slots=True, kw_only=True)
class LowPrecisionFactor:
    """Realised / datasheet rate of `datatype` matrix multiplies on `architecture` under `engine`."""

    architecture: str
    engine: str
    datatype: str
    factor: float
    source: str

    def __post_init__(self) -> None:
        if not 0.0 < self.factor <= 1.0:
            raise PlannerInputError(
                f"low-precision factor {self.architecture}/{self.engine}/{self.datatype} must be in (0, 1], got {self.factor}",
                field="factor",
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineChoice:
    """The profile a GPU is priced with under an engine, and why (`fallback` when not the pair's own)."""

    gpu: str
    engine: str
    generation: str | None
    source: str
    fallback: bool
    reason: str
    efficiency: Efficiency


def _best_measured(profiles: Iterable[EngineProfile]) -> EngineProfile | None:
    found = sorted(profiles, key=lambda p: (p.points, p.generation))
    return found[-1] if found else None


def low_precision_factor(
    architecture: str, engine: str, datatype: str, factors: Sequence[LowPrecisionFactor]
) -> tuple[float, str]:
    """The factor for (architecture, engine, datatype) and where it comes from (module docstring's rule)."""
    arch = architecture.lower()
    exact = [f for f in factors if f.architecture == arch and f.engine == engine and f.datatype == datatype]
    if exact:
        return exact[0].factor, exact[0].source
    others = [f for f in factors if f.architecture == arch and f.datatype == datatype]
    if others:
        value = statistics.median(f.factor for f in others)
        engines = ", ".join(sorted(f.engine for f in others))
        return value, f"{arch} {datatype} not measured under {engine}: the factor measured under {engines} ({value:.3f})"
    return 1.0, f"{arch} {datatype} under {engine}: no measurement, datasheet ratio assumed (factor 1)"


def with_low_precision(
    efficiency: Efficiency, architecture: str, engine: str, factors: Sequence[LowPrecisionFactor]
) -> Efficiency:
    """`efficiency` with the low-precision factors of every datatype measured on `architecture` (any engine)."""
    datatypes = sorted({f.datatype for f in factors if f.architecture == architecture.lower()})
    pairs = tuple((d, low_precision_factor(architecture, engine, d, factors)[0]) for d in datatypes)
    return replace(efficiency, low_precision_factors=pairs)


def choose_profile(
    gpu: GpuSpec, engine: str, profiles: Sequence[EngineProfile], factors: Sequence[LowPrecisionFactor]
) -> EngineChoice:
    """The efficiency `gpu` is priced with under `engine` (the module docstring's fallback rule).

    `gpu.efficiency` is the engine-agnostic catalog calibration (step 3). PlannerInputError when the
    engine does not run on the GPU's vendor."""
    if not runs_on(engine, gpu):
        raise PlannerInputError(
            f"{engine} does not run on {gpu.vendor} GPUs ({gpu.slug})", field="engine", engine=engine, gpu=gpu.slug
        )
    own = _best_measured(p for p in profiles if p.gpu == gpu.slug and p.engine == engine)
    if own is not None:
        return EngineChoice(
            gpu=gpu.slug,
            engine=engine,
            generation=own.generation,
            source=own.source,
            fallback=False,
            reason=f"{gpu.slug} × {engine} profile fitted on {own.points} points from {own.sources} sources",
            efficiency=with_low_precision(own.efficiency, gpu.architecture, engine, factors),
        )
    measured = [p for p in profiles if p.gpu == gpu.slug]
    if measured:
        donor = max(measured, key=lambda p: (p.points, p.generation))
        return EngineChoice(
            gpu=gpu.slug,
            engine=engine,
            generation=donor.generation,
            source=donor.source,
            fallback=True,
            reason=(
                f"no {gpu.slug} × {engine} measurements: the {gpu.slug} × {donor.engine} profile ({donor.points} points) "
                f"stands in, with {engine}'s low-precision factors"
            ),
            efficiency=with_low_precision(donor.efficiency, gpu.architecture, engine, factors),
        )
    return EngineChoice(
        gpu=gpu.slug,
        engine=engine,
        generation=None,
        source=gpu.efficiency.source,
        fallback=True,
        reason=f"no engine profile for {gpu.slug}: its engine-agnostic catalog calibration applies",
        efficiency=gpu.efficiency,
    )


def priced_on(
    gpus: Sequence[GpuSpec], engine: str, profiles: Sequence[EngineProfile], factors: Sequence[LowPrecisionFactor]
) -> tuple[tuple[GpuSpec, ...], dict[str, EngineChoice]]:
    """The GPUs `engine` runs on, each with its engine profile's efficiency, and each GPU's choice."""
    specs: list[GpuSpec] = []
    choices: dict[str, EngineChoice] = {}
    for gpu in gpus:
        if not runs_on(engine, gpu):
            continue
        choice = choose_profile(gpu, engine, profiles, factors)
        choices[gpu.slug] = choice
        specs.append(replace(gpu, efficiency=choice.efficiency))
    return tuple(specs), choices
