"""The serving engine as a dimension of the plan: per (GPU, engine, generation) efficiency profiles
and per (architecture, engine, datatype) low-precision factors, and the rule that picks them.

An engine profile is the calibration of one GPU under one engine (the `Efficiency` of
planner/specs.py, fitted by bench/engine_profiles.py from the engine's published points). A GPU ×
engine pair without one falls back, and the plan says so (`EngineChoice.fallback`, `.reason`):

1. the pair's own profile: the requested generation's (`engine@generation`, e.g. `vllm@0.11`) when it
   has one, else — and by default — the newest generation with a profile of its own; a pair whose
   releases have too few points each has only its profile pooled over every release (generation
   `all`, also requestable as `engine@all`), which a requested generation without its own falls back to;
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

A fitted parameter at a bound of its admissible range (PROFILE_BOUNDS) was pinned there by the
bound, not determined by the points: the choice names it (`EngineChoice.at_bounds`). Where it is an
efficiency (η_mem or η_compute at 0.05 or 1, `lowers_grade`) its reason says the profile is
under-determined, and the GPU priced on it has its calibration grade lowered one step
(planner/confidence.py GRADES; low stays low), since the grade was earned by a fit that did
determine its parameters; the overhead and overlap on the ends of their ranges are admissible
regimes and are named without lowering the grade.

A requested generation must be one the catalog has a profile of for that engine (on any GPU), or
`all`: another is a typo or a release nobody measured, and is refused naming the known ones
(`check_generation`); a known generation a GPU lacks falls back as in rule 1. A bare pinned engine
(`constraints.pin.engine: vllm`) matches every generation of it (`narrowed_by_pin`).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from planner.confidence import GRADES, grade_rank
from planner.errors import PlannerInputError
from planner.specs import Efficiency, GpuSpec

#: Serving engines a plan can be priced on: vLLM, SGLang and TensorRT-LLM.
ENGINES: tuple[str, ...] = ("vllm", "sglang", "trt-llm")
#: Which vendors' GPUs each engine runs on. TensorRT-LLM is NVIDIA-only ("TensorRT-LLM ... on NVIDIA
#: GPUs", https://nvidia.github.io/TensorRT-LLM/overview.html); vLLM and SGLang document ROCm builds
#: for AMD Instinct (https://docs.vllm.ai/en/stable/getting_started/installation/gpu.html "AMD ROCm",
#: https://docs.sglang.ai/platforms/amd_gpu.html).
ENGINE_VENDORS: dict[str, tuple[str, ...]] = {"vllm": ("nvidia", "amd"), "sglang": ("nvidia", "amd"), "trt-llm": ("nvidia",)}


#: The generation label of an engine's profile pooled over every release of it in the evidence.
POOLED_GENERATION = "all"
#: A release generation: the engine's major.minor version ("0.11" for vLLM 0.11.0 and 0.11.1rc).
GENERATION_PATTERN = re.compile(r"^\d+\.\d+$")
#: An engine naming a generation: "vllm@0.11", "trt-llm@1.0", or "sglang@all" (the pooled profile).
ENGINE_SPEC_PATTERN = r"^(vllm|sglang|trt-llm)@(\d+\.\d+|all)$"
#: Admissible range of each fitted profile parameter (η fractions, overhead in ms, overlap 0..1): the bounds
#: bench/engine_profiles.py fits within, the same as bench/fidelity.py FIT_BOUNDS (whose comment gives each
#: one's reason: η ≤ 1 and overlap ≤ 1 are physics, the 2 ms overhead ceiling a NIM measurement, the 0.05
#: η floor only a positivity guard).
PROFILE_BOUNDS: dict[str, tuple[float, float]] = {
    "memory": (0.05, 1.0),
    "compute": (0.05, 1.0),
    "overhead": (0.0, 2.0),
    "overlap": (0.0, 1.0),
}
#: A fitted value this close to a bound (relative to the range) sits on it.
AT_BOUND_TOLERANCE = 1e-3


def parse_engine(spec: str) -> tuple[str, str | None]:
    """(engine, generation or None) of "vllm" or "vllm@0.11"; PlannerInputError naming `engine` otherwise."""
    engine, _, generation = spec.partition("@")
    if engine not in ENGINES:
        raise PlannerInputError(
            f"engine: unknown engine {engine!r}; engines are {', '.join(ENGINES)} (or 'any'), optionally with "
            "@generation (e.g. vllm@0.11)",
            field="engine",
            engine=spec,
        )
    if not generation:
        if spec.endswith("@"):
            raise PlannerInputError(f"engine {spec!r}: a generation follows @ (e.g. {engine}@0.11)", field="engine", engine=spec)
        return engine, None
    if generation != POOLED_GENERATION and not GENERATION_PATTERN.match(generation):
        raise PlannerInputError(
            f"engine {spec!r}: a generation is major.minor (e.g. {engine}@0.11) or 'all'", field="engine", engine=spec
        )
    return engine, generation


#: A published release string starting with its version ("0.11.1rc", "v1.0.0"): major.minor is its generation.
_RELEASE_VERSION = re.compile(r"^\s*v?(\d+)\.(\d+)")


def release_generation(release: str) -> str | None:
    """The release generation (major.minor) of a published release ("0.11.1rc" → "0.11", "v1.0.0" → "1.0"); None
    when the release names no version (a date, "not stated"). The rule bench/engine_profiles.py `generation_of`
    applies to bench/serving_evidence.json's `engine_release`."""
    found = _RELEASE_VERSION.match(release)
    return None if found is None else f"{int(found.group(1))}.{int(found.group(2))}"


def known_generations(engine: str, profiles: Iterable[EngineProfile]) -> tuple[str, ...]:
    """The release generations `engine` has a profile of (on any GPU), oldest first, then `all` (always requestable)."""
    labels = {p.generation for p in profiles if p.engine == engine and is_generation(p.generation)}
    return (*sorted(labels, key=generation_order), POOLED_GENERATION)


def check_generation(spec: str, profiles: Iterable[EngineProfile]) -> None:
    """PlannerInputError (naming `engine` and the known generations) when `spec` names a generation no profile of
    its engine has; a bare engine and `engine@all` always pass."""
    engine, wanted = parse_engine(spec)
    if wanted is None or wanted == POOLED_GENERATION:
        return
    known = known_generations(engine, profiles)
    if wanted not in known:
        raise PlannerInputError(
            f"engine {spec!r}: no {engine} profile of release generation {wanted} in the catalog; its generations are "
            f"{', '.join(known)} (or {engine} alone: its newest per GPU)",
            field="engine",
            engine=spec,
            known_generations=list(known),
        )


def narrowed_by_pin(allowed: Sequence[str] | None, pinned: str | None) -> tuple[str, ...] | None:
    """The engines a request allows (`allowed_engines`) once constraints.pin.engine is applied: the pin alone when
    nothing else is asked; else the allowed engines the pin matches (a bare pin `vllm` matches `vllm` and every
    `vllm@generation`; a pin naming a generation matches only itself). PlannerInputError naming the pin when it
    matches none."""
    if pinned is None:
        return None if allowed is None else tuple(allowed)
    if allowed is None:
        return (pinned,)
    bare = "@" not in pinned
    matched = tuple(name for name in allowed if name == pinned or (bare and parse_engine(name)[0] == pinned))
    if not matched:
        raise PlannerInputError(
            f"pinned engine {pinned!r} is not among the request's engines ({', '.join(allowed)})",
            constraint="pin.engine",
            field="constraints.pin.engine",
        )
    return matched


def lowered_grade(grade: str) -> str:
    """The calibration grade one step lower (planner/confidence.py GRADES); low stays low."""
    return GRADES[max(grade_rank(grade) - 1, 0)]


def is_generation(label: str) -> bool:
    """Whether a profile's label is one release generation (else it pools releases)."""
    return bool(GENERATION_PATTERN.match(label))


def generation_order(label: str) -> tuple[int, ...]:
    """Sort key of a generation label, oldest first ("0.9" < "0.10" < "1.0")."""
    return tuple(int(part) for part in label.split("."))


def runs_on(engine: str, gpu: GpuSpec) -> bool:
    """Whether `engine` (optionally `engine@generation`) runs on `gpu`'s vendor."""
    return gpu.vendor.lower() in ENGINE_VENDORS[parse_engine(engine)[0]]


def allowed_engines(requested: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """The engines a request allows: None (engine-agnostic), one engine, a list, or "any" (all of ENGINES);
    an engine may name its generation ("vllm@0.11"). PlannerInputError naming `engine` for an unknown engine,
    a malformed generation or an empty list."""
    if requested is None:
        return None
    names = list(ENGINES) if requested == "any" else [requested] if isinstance(requested, str) else list(requested)
    if not names:
        raise PlannerInputError("engine: an empty list allows no engine; name at least one, or 'any'", field="engine")
    for name in names:
        parse_engine(name)
    return tuple(dict.fromkeys(names))


def parameters_at_bounds(efficiency: Efficiency) -> tuple[str, ...]:
    """The fitted parameters of `efficiency` sitting on a PROFILE_BOUNDS bound, e.g. ("η_compute = 1", "overlap = 0")."""
    values = {
        "memory": ("η_mem", efficiency.memory),
        "compute": ("η_compute", efficiency.compute),
        "overhead": ("overhead ms", efficiency.step_overhead_s * 1e3),
        "overlap": ("overlap", efficiency.memory_compute_overlap),
    }
    found: list[str] = []
    for key, (name, value) in values.items():
        low, high = PROFILE_BOUNDS[key]
        for bound in (low, high):
            if abs(value - bound) <= AT_BOUND_TOLERANCE * (high - low):
                found.append(f"{name} = {bound:g}")
    return tuple(found)


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

    @property
    def pooled(self) -> bool:
        """Whether this profile pools releases (`all`, or a release list from before generations were split)."""
        return not is_generation(self.generation)


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
    #: Parameters of the profile pinned at a bound (parameters_at_bounds): the fit did not determine them.
    at_bounds: tuple[str, ...] = ()
    #: The calibration grade of the GPU priced on this choice: its catalog grade, one step lower when `at_bounds`.
    calibration_grade: str

    def priced(self, gpu: GpuSpec) -> GpuSpec:
        """`gpu` at this choice's efficiency and calibration grade."""
        return replace(gpu, efficiency=self.efficiency, calibration_grade=self.calibration_grade)


def _best_measured(profiles: Iterable[EngineProfile]) -> EngineProfile | None:
    found = sorted(profiles, key=lambda p: (p.points, p.generation))
    return found[-1] if found else None


def _pair_profile(own: Sequence[EngineProfile], wanted: str | None, label: str) -> tuple[EngineProfile, bool, str]:
    """The pair's profile for generation `wanted` (None: the newest), whether that is a fallback, and why."""
    generations = sorted((p for p in own if not p.pooled), key=lambda p: generation_order(p.generation))
    pooled = _best_measured(p for p in own if p.pooled)
    fitted = ", ".join(p.generation for p in generations) or "none"
    if wanted is None and generations:
        newest = generations[-1]
        return (
            newest,
            False,
            f"{label} {newest.generation}, the newest generation with its own profile (generations fitted: {fitted})",
        )
    exact = [p for p in generations if p.generation == wanted]
    if exact:
        return exact[0], False, f"{label} {wanted}, the requested generation"
    if pooled is not None:
        if wanted is None or wanted == POOLED_GENERATION:
            why = "" if wanted else f" (no release has enough points for a profile of its own; generations fitted: {fitted})"
            return pooled, False, f"{label} profile pooled over its releases ({pooled.generation}){why}"
        return (
            pooled,
            True,
            (
                f"no {label} {wanted} profile (too few points of that release; generations fitted: {fitted}): the profile "
                f"pooled over its releases ({pooled.generation}) stands in"
            ),
        )
    newest = generations[-1]  # a generation was named that has no profile and nothing is pooled: the newest stands in
    return newest, True, f"no {label} {wanted} profile: the newest generation, {newest.generation}, stands in"


def _bounds_note(efficiency: Efficiency, grade: str) -> tuple[tuple[str, ...], str, str]:
    """The parameters on a bound, the reason's note on them, and the GPU's grade on this profile: lowered one
    step only when an efficiency (η_mem, η_compute) is on a bound (`lowers_grade`)."""
    pinned = parameters_at_bounds(efficiency)
    if not pinned:
        return pinned, "", grade
    if not any(lowers_grade(name) for name in pinned):
        return (
            pinned,
            f"; {', '.join(pinned)} sit on the ends of their admissible ranges (the efficiencies are fitted inside theirs)",
            grade,
        )
    lowered = lowered_grade(grade)
    step = f"{grade} → {lowered}" if lowered != grade else f"{grade} stays {grade}, the lowest"
    return (
        pinned,
        (
            f"; under-determined: {', '.join(pinned)} sit on the fit's bounds, so the points did not determine them "
            f"(low confidence in this profile: its calibration grade is lowered one step, {step})"
        ),
        lowered,
    )


def lowers_grade(parameter: str) -> bool:
    """Whether a parameter on its bound (a parameters_at_bounds entry) lowers the profile's grade: an efficiency
    η on 0.05 or 1 means the points asked for a rate the roofline cannot realise, so the profile's step times
    are not what its points say. The step overhead and the memory/compute overlap on the ends of their ranges
    (0 or 2 ms; 0 or 1) are admissible regimes — no fixed cost, fully serial or fully overlapped phases — and
    leave the grade the fit earned (the overhead's 2 ms cap names the per-sequence cost the model lacks, which
    the profile's out-of-source error already carries)."""
    return parameter.startswith("η")


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
    """The efficiency `gpu` is priced with under `engine` (or `engine@generation`; the module docstring's rule).

    `gpu.efficiency` is the engine-agnostic catalog calibration (step 3). PlannerInputError when the
    engine does not run on the GPU's vendor."""
    spec = engine
    engine, wanted = parse_engine(spec)
    if not runs_on(engine, gpu):
        raise PlannerInputError(
            f"{engine} does not run on {gpu.vendor} GPUs ({gpu.slug})", field="engine", engine=spec, gpu=gpu.slug
        )
    own = [p for p in profiles if p.gpu == gpu.slug and p.engine == engine]
    if own:
        profile, fallback, why = _pair_profile(own, wanted, f"{gpu.slug} × {engine}")
        pinned, note, grade = _bounds_note(profile.efficiency, gpu.calibration_grade)
        return EngineChoice(
            gpu=gpu.slug,
            engine=engine,
            generation=profile.generation,
            source=profile.source,
            fallback=fallback,
            reason=f"{why}, fitted on {profile.points} points from {profile.sources} sources{note}",
            efficiency=with_low_precision(profile.efficiency, gpu.architecture, engine, factors),
            at_bounds=pinned,
            calibration_grade=grade,
        )
    measured = [p for p in profiles if p.gpu == gpu.slug]
    if measured:
        by_engine: dict[str, int] = {}
        for p in measured:
            by_engine[p.engine] = max(by_engine.get(p.engine, 0), p.points)  # a pooled profile holds all its points
        donor_engine = max(by_engine, key=lambda e: (by_engine[e], e))
        donor, _, _ = _pair_profile([p for p in measured if p.engine == donor_engine], POOLED_GENERATION, "")
        pinned, note, grade = _bounds_note(donor.efficiency, gpu.calibration_grade)
        return EngineChoice(
            gpu=gpu.slug,
            engine=engine,
            generation=donor.generation,
            source=donor.source,
            fallback=True,
            reason=(
                f"no {gpu.slug} × {engine} measurements: the {gpu.slug} × {donor.engine} {donor.generation} profile "
                f"({donor.points} points) stands in, with {engine}'s low-precision factors{note}"
            ),
            efficiency=with_low_precision(donor.efficiency, gpu.architecture, engine, factors),
            at_bounds=pinned,
            calibration_grade=grade,
        )
    return EngineChoice(
        gpu=gpu.slug,
        engine=engine,
        generation=None,
        source=gpu.efficiency.source,
        fallback=True,
        reason=f"no engine profile for {gpu.slug}: its engine-agnostic catalog calibration applies",
        efficiency=gpu.efficiency,
        calibration_grade=gpu.calibration_grade,
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
        specs.append(choice.priced(gpu))
    return tuple(specs), choices
