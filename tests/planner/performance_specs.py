"""Hand-built specs for the performance-model tests (the catalog is not involved).

GPU figures are datasheet dense peaks; model shapes are the published configs.
"""

from __future__ import annotations

from planner.specs import GpuSpec, MlaSpec, ModelSpec, MoeSpec, Precision, QuantSpec

TFLOPS = 1e12
GB = 1e9

# NVIDIA H100 Tensor Core GPU datasheet (SXM5): 80 GB HBM3, 3.35 TB/s, dense BF16/FP16 989 TFLOP/s,
# FP8/INT8 1,979; NVLink 900 GB/s bidirectional = 450 GB/s each way. The docs/design.md test-vector GPU.
H100_SXM = GpuSpec(
    slug="h100-sxm",
    vendor="nvidia",
    architecture="hopper",
    memory_bytes=80 * GB,
    hbm_bandwidth_bytes_per_s=3.35e12,
    peak_flops_per_s={"bf16": 989 * TFLOPS, "fp16": 989 * TFLOPS, "fp8": 1979 * TFLOPS, "int8": 1979 * TFLOPS, "fp4": None},
    interconnect_bytes_per_s=450 * GB,
    interconnect_latency_s=5e-6,
    gpus_per_node=8,
)

# NVIDIA A100 Tensor Core GPU datasheet (SXM 80 GB): 2,039 GB/s, dense BF16/FP16 312, INT8 624; no FP8 units.
A100_SXM = GpuSpec(
    slug="a100-80gb-sxm",
    vendor="nvidia",
    architecture="ampere",
    memory_bytes=80 * GB,
    hbm_bandwidth_bytes_per_s=2.039e12,
    peak_flops_per_s={"bf16": 312 * TFLOPS, "fp16": 312 * TFLOPS, "fp8": None, "int8": 624 * TFLOPS, "fp4": None},
    interconnect_bytes_per_s=300 * GB,
    interconnect_latency_s=5e-6,
    gpus_per_node=8,
)

# HGX B200 at 1,000 W (glennklockwood.com/garden/processors/B200, from NVIDIA's Blackwell
# datasheet): dense BF16 2,250, FP8 4,500, FP4 9,000 TFLOP/s; 8 TB/s; 180 GB (DGX B200: 1,440 GB / 8).
B200 = GpuSpec(
    slug="b200",
    vendor="nvidia",
    architecture="blackwell",
    memory_bytes=180 * GB,
    hbm_bandwidth_bytes_per_s=8e12,
    peak_flops_per_s={
        "bf16": 2250 * TFLOPS,
        "fp16": 2250 * TFLOPS,
        "fp8": 4500 * TFLOPS,
        "int8": 4500 * TFLOPS,
        "fp4": 9000 * TFLOPS,
    },
    interconnect_bytes_per_s=900 * GB,
    gpus_per_node=8,
)

# AMD Instinct MI300X data sheet (CDNA3): 192 GB, 5.3 TB/s, dense FP16 1,307.4, FP8 2,614.9 TFLOP/s.
MI300X = GpuSpec(
    slug="mi300x",
    vendor="amd",
    architecture="cdna3",
    memory_bytes=192 * GB,
    hbm_bandwidth_bytes_per_s=5.3e12,
    peak_flops_per_s={"bf16": 1307.4 * TFLOPS, "fp16": 1307.4 * TFLOPS, "fp8": 2614.9 * TFLOPS, "int8": 2614.9 * TFLOPS},
    interconnect_bytes_per_s=448 * GB,
    gpus_per_node=8,
)

# Llama 2 70B (Touvron et al. 2023, arXiv 2307.09288; config.json): the docs/design.md shape.
LLAMA_2_70B = ModelSpec(
    slug="llama-2-70b",
    params_total=70e9,
    params_active=70e9,
    layers=80,
    hidden_size=8192,
    attention_heads=64,
    kv_heads=8,
    head_dim=128,
    intermediate_size=28672,
    vocab_size=32000,
    max_context_tokens=4096,
)

# Mixtral 8x7B (Mistral AI, "Mixtral of experts", 46.7B total / 12.9B active; config.json: 32
# layers, hidden 4096, 32 heads, 8 KV heads, FFN 14336, 8 experts, top-2). One expert is a SwiGLU
# FFN of three 4096×14336 matrices.
MIXTRAL_EXPERT_PARAMS = 3 * 4096 * 14336
MIXTRAL_8X7B = ModelSpec(
    slug="mixtral-8x7b",
    params_total=46.7e9,
    params_active=12.9e9,
    layers=32,
    hidden_size=4096,
    attention_heads=32,
    kv_heads=8,
    head_dim=128,
    intermediate_size=14336,
    vocab_size=32000,
    max_context_tokens=32768,
    moe=MoeSpec(experts=8, experts_per_token=2, shared_experts=0, expert_params=MIXTRAL_EXPERT_PARAMS, moe_layers=32),
)

# DeepSeek-V3 (arXiv 2412.19437; config.json): 671B total / 37B active, 61 layers (first 3 dense,
# 58 MoE), hidden 7168, 128 heads, MLA kv_lora_rank 512 + qk_rope_head_dim 64, 256 routed experts
# (top-8) of moe_intermediate_size 2048 plus one shared expert.
DEEPSEEK_V3 = ModelSpec(
    slug="deepseek-v3",
    params_total=671e9,
    params_active=37e9,
    layers=61,
    hidden_size=7168,
    attention_heads=128,
    kv_heads=128,
    head_dim=128,
    intermediate_size=18432,
    vocab_size=129280,
    max_context_tokens=163840,
    moe=MoeSpec(experts=256, experts_per_token=8, shared_experts=1, expert_params=3 * 7168 * 2048, moe_layers=58),
    mla=MlaSpec(kv_lora_rank=512, rope_head_dim=64),
)

# Formats as the catalog describes them (catalog/data/quantizations.json): the KV-cache format's
# compute_dtype is the datatype the cache is stored and read in.
FP16 = QuantSpec(
    slug="fp16", weight_bytes_per_param=2.0, element_bytes=2.0, compute_dtype="fp16", kv_cache_dtypes=("fp16", "fp8", "int8")
)
BF16 = QuantSpec(
    slug="bf16", weight_bytes_per_param=2.0, element_bytes=2.0, compute_dtype="bf16", kv_cache_dtypes=("bf16", "fp8", "int8")
)
FP8 = QuantSpec(
    slug="fp8",
    weight_bytes_per_param=1.0,
    element_bytes=1.0,
    compute_dtype="fp8",
    kv_cache_dtypes=("fp16", "bf16", "fp8"),
    min_architecture="ada",
)
INT8_W8A8 = QuantSpec(
    slug="int8",
    weight_bytes_per_param=1.0,
    element_bytes=1.0,
    compute_dtype="int8",
    kv_cache_dtypes=("fp16", "bf16", "int8"),
    min_architecture="ampere",
)
INT4_AWQ = QuantSpec(
    slug="int4-awq",
    weight_bytes_per_param=0.53125,
    element_bytes=0.5,
    compute_dtype="fp16",
    kv_cache_dtypes=("fp16", "bf16", "fp8"),
    min_architecture="ampere",
)
NVFP4 = QuantSpec(
    slug="nvfp4",
    weight_bytes_per_param=0.5625,
    element_bytes=0.5,
    compute_dtype="fp4",
    kv_cache_dtypes=("fp16", "bf16", "fp8"),
    min_architecture="blackwell",
)

FP16_PRECISION = Precision(weights=FP16, kv_cache=FP16)
INT8_PRECISION = Precision(weights=INT8_W8A8, kv_cache=FP16)
FP8_PRECISION = Precision(weights=FP8, kv_cache=FP16)
