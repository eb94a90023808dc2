"""Which numeric formats a GPU can run, and at what peak.

A precision is refused, with a reason a person can act on, when the GPU generation predates the
datatype (FP8 before Ada/Hopper or CDNA3, FP4 before Blackwell or CDNA4), when the datatype has no
peak on the GPU's datasheet, when the scheme names a newer `min_architecture`, or when the weight
scheme does not list the chosen KV-cache format.

Conventions the catalog follows (see docs/TEAM-CONTRACTS.md):
- A weight scheme's `compute_dtype` is the datatype its matrix multiplies run at: W8A8 int8 runs
  at the int8 peak, FP8 at the fp8 peak, W4A16 (AWQ/GPTQ) dequantises to and computes in fp16.
- A KV-cache format's `compute_dtype` is the datatype the cache is stored and read in (`fp8` for
  an FP8 cache, `fp16`/`bf16` for an unquantised one); `element_bytes` is one stored value.
"""

from __future__ import annotations

from planner.errors import PlannerInputError, UnsupportedConfigurationError
from planner.specs import ARCHITECTURE_GENERATIONS, GpuSpec, Precision, QuantSpec

#: First generation of each vendor line whose matrix units take the datatype natively.
#: FP8: NVIDIA Ada (compute capability 8.9) and Hopper — vLLM's FP8 W8A8 page ("FP8 computation is
#: supported on NVIDIA GPUs with compute capability >= 8.9 (Ada Lovelace, Hopper, Blackwell)",
#: https://docs.vllm.ai/en/stable/features/quantization/fp8/) — and AMD CDNA3 (Instinct MI300,
#: "AMD CDNA 3 architecture" white paper: FP8 matrix cores). FP4: NVIDIA Blackwell ("NVIDIA
#: Blackwell architecture technical brief": second-generation Transformer Engine with FP4) and AMD
#: CDNA4 (Instinct MI350 series, "AMD CDNA 4 architecture" white paper: MXFP4/MXFP6).
DATATYPE_MIN_ARCHITECTURE: dict[str, dict[str, str]] = {
    "fp8": {"nvidia": "ada", "amd": "cdna3"},
    "fp4": {"nvidia": "blackwell", "amd": "cdna4"},
}

#: Bytes of one activation value crossing the tensor-parallel all-reduce. Quantised schemes
#: (W8A8, FP8, W4A16) quantise a GEMM's input inside the linear layer and return its output in the
#: model dtype, so the row-parallel all-reduce runs on 16-bit activations (vLLM: RowParallelLinear
#: all-reduces `output_parallel`, the layer's bf16/fp16 output; fp8 activation scales are
#: "dynamic", computed per GEMM — docs.vllm.ai .../quantization/fp8). Only fp32/tf32 models reduce 4 bytes.
ACTIVATION_BYTES_BY_COMPUTE_DTYPE: dict[str, float] = {
    "fp32": 4.0,
    "tf32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 2.0,
    "int8": 2.0,
    "fp4": 2.0,
}


def vendor_line(gpu: GpuSpec) -> tuple[str, ...]:
    """The GPU's vendor line of architecture generations, oldest first."""
    line = ARCHITECTURE_GENERATIONS.get(gpu.vendor.lower())
    if line is None or gpu.architecture.lower() not in line:
        raise PlannerInputError(
            f"{gpu.slug}: unknown vendor/architecture {gpu.vendor}/{gpu.architecture}; "
            f"known lines are {ARCHITECTURE_GENERATIONS}",
            gpu=gpu.slug,
            vendor=gpu.vendor,
            architecture=gpu.architecture,
        )
    return line


def is_architecture_at_least(gpu: GpuSpec, min_architecture: str) -> bool:
    """Whether `gpu` is `min_architecture` or a later generation of the same vendor line.

    A `min_architecture` from another vendor's line says nothing about this GPU (a scheme described
    as "ampere or newer" still runs on AMD): it is satisfied, and the datatype rules decide.
    """
    line = vendor_line(gpu)
    wanted = min_architecture.lower()
    if wanted in line:
        return line.index(gpu.architecture.lower()) >= line.index(wanted)
    if any(wanted in other for other in ARCHITECTURE_GENERATIONS.values()):
        return True
    raise PlannerInputError(
        f"unknown architecture {min_architecture!r}; known: {ARCHITECTURE_GENERATIONS}",
        architecture=min_architecture,
    )


def _refuse(detail: str, **extensions: object) -> UnsupportedConfigurationError:
    return UnsupportedConfigurationError(detail, **extensions)


def _check_datatype(gpu: GpuSpec, datatype: str, role: str) -> float:
    """The GPU's peak for `datatype`, or a refusal naming why it cannot run it."""
    minimum = DATATYPE_MIN_ARCHITECTURE.get(datatype, {}).get(gpu.vendor.lower())
    if minimum is not None and not is_architecture_at_least(gpu, minimum):
        raise _refuse(
            f"{gpu.slug} ({gpu.architecture}) cannot run {role} in {datatype}: "
            f"{datatype} needs {minimum} or a newer {gpu.vendor} generation",
            gpu=gpu.slug,
            datatype=datatype,
            role=role,
            min_architecture=minimum,
        )
    peak = gpu.peak_flops(datatype)
    if peak is None:
        raise _refuse(
            f"{gpu.slug} lists no {datatype} peak, so it cannot run {role} in {datatype}",
            gpu=gpu.slug,
            datatype=datatype,
            role=role,
        )
    return peak


def _check_min_architecture(gpu: GpuSpec, quant: QuantSpec, role: str) -> None:
    if quant.min_architecture is not None and not is_architecture_at_least(gpu, quant.min_architecture):
        raise _refuse(
            f"{quant.slug} ({role}) needs {quant.min_architecture} or newer; {gpu.slug} is {gpu.architecture}",
            gpu=gpu.slug,
            scheme=quant.slug,
            role=role,
            min_architecture=quant.min_architecture,
        )


def kv_cache_datatype(kv_cache: QuantSpec) -> str:
    """The datatype a KV-cache format is stored and read in (its `compute_dtype`, by convention)."""
    return kv_cache.compute_dtype


def compute_peak_flops_per_s(gpu: GpuSpec, weights: QuantSpec) -> float:
    """Dense peak FLOP/s (one GPU) the weight scheme's matrix multiplies run at."""
    _check_min_architecture(gpu, weights, "weights")
    return _check_datatype(gpu, weights.compute_dtype, f"{weights.slug} matrix multiplies")


def activation_bytes(weights: QuantSpec) -> float:
    """Bytes per activation value in the tensor-parallel all-reduce (16-bit unless fp32/tf32)."""
    return ACTIVATION_BYTES_BY_COMPUTE_DTYPE[weights.compute_dtype]


def check_precision(gpu: GpuSpec, precision: Precision) -> None:
    """Raise `UnsupportedConfigurationError` unless `gpu` can run both formats of `precision`."""
    vendor_line(gpu)
    compute_peak_flops_per_s(gpu, precision.weights)
    kv = precision.kv_cache
    _check_min_architecture(gpu, kv, "KV cache")
    _check_datatype(gpu, kv_cache_datatype(kv), f"a {kv.slug} KV cache")
    allowed = precision.weights.kv_cache_dtypes
    if allowed and kv.slug not in allowed and kv_cache_datatype(kv) not in allowed:
        raise _refuse(
            f"weight scheme {precision.weights.slug} supports KV caches in {', '.join(allowed)}, not {kv.slug}",
            weights=precision.weights.slug,
            kv_cache=kv.slug,
            allowed_kv_cache_dtypes=list(allowed),
        )


def supports_precision(gpu: GpuSpec, precision: Precision) -> bool:
    """Whether `check_precision` would accept the pair (for filtering candidate lists)."""
    try:
        check_precision(gpu, precision)
    except UnsupportedConfigurationError:
        return False
    return True
