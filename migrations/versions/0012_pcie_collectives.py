"""PCIe GPUs' tensor-parallel collectives priced from NCCL, not from the line rate and a guess.

The reference catalog's PCIe-only GPUs (a10g, h100-pcie, l4, l40s) carried the PCIe line rate per
direction (32 GB/s Gen4, 64 GB/s Gen5) as their all-reduce bandwidth and an assumed 10 µs per
all-reduce. Engines all-reduce over NCCL on PCIe (their custom all-reduce kernels need NVLink
P2P), and NCCL itself models a PCIe x16 link's usable rate as width × per-lane speed / 80 — 24 GB/s
Gen4, 48 GB/s Gen5 (NVIDIA/nccl src/graph/topo.cc) — while nccl-tests measures 42 µs for an 8-byte
all-reduce over 8 Ada GPUs on PCIe Gen4 (NVIDIA/nccl issue 1530). Against the published serving
set (bench/serving_evidence.json: 96 L40S points at tp > 1, TensorRT-LLM 0.12–0.17) the step model's
optimism there falls from +81 % to +50 % at the median, from nothing fitted (docs/serving-evidence.md).

A stored row is updated only while it still holds the reference values it replaces (bandwidth,
latency and source exactly as shipped before): a GPU someone edited keeps what they wrote. The
downgrade restores the old reference values under the same rule.

Revision ID: 0012_pcie_collectives
Revises: 0011_operations
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012_pcie_collectives"
down_revision: str | None = "0011_operations"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

#: Per GPU: (interconnect GB/s, latency µs, source) before and after. Copies, so the migration means
#: the same thing whatever catalog/data/gpus.json holds later.
REFERENCE: tuple[tuple[str, tuple[float, float, str], tuple[float, float, str]], ...] = (
    (
        "a10g",
        (
            32,
            10,
            "NVIDIA A10G datasheet for AWS (https://d1.awsstatic.com/product-marketing/ec2/NVIDIA_AWS_A10G_DataSheet_FINAL_02_17_2022.pdf): 24 GB GDDR6, 600 GB/s, FP32 35, TF32 tensor 35, FP16/BF16 tensor 70 TFLOPS dense; INT8 140 TOPS dense (2x FP16, Ampere tensor-core ratio). No FP8/FP4. Interconnect: PCIe Gen4 x16: 64 GB/s bidirectional -> 32 GB/s per direction (no NVLink on this SKU); latency: 10 us per all-reduce: documented assumption (PCIe peer traffic through host bridges/switches, about 2x an NVLink hop; not measured here); gpus_per_node 8 = g5.48xlarge",
        ),
        (
            24,
            42,
            "NVIDIA A10G datasheet for AWS (https://d1.awsstatic.com/product-marketing/ec2/NVIDIA_AWS_A10G_DataSheet_FINAL_02_17_2022.pdf): 24 GB GDDR6, 600 GB/s, FP32 35, TF32 tensor 35, FP16/BF16 tensor 70 TFLOPS dense; INT8 140 TOPS dense (2x FP16, Ampere tensor-core ratio). No FP8/FP4. Interconnect: PCIe Gen4 x16 (no NVLink on this SKU): 24 GB/s per direction, NCCL's own model of the link's usable rate (NVIDIA/nccl src/graph/topo.cc: width x per-lane speed / 80 = 16 x 120 / 80; the line rate is 32 GB/s); engines all-reduce over NCCL on PCIe (custom all-reduce kernels need NVLink P2P). Latency: 42 us per all-reduce, measured: nccl-tests all_reduce_perf at 8 B on 8 x RTX 4090 (Ada, PCIe Gen4, no NVLink), 42.1 us out of place (NVIDIA/nccl issue 1530; 8 x RTX 3090: 54 us, nccl issue 1439); gpus_per_node 8 = g5.48xlarge",
        ),
    ),
    (
        "h100-pcie",
        (
            64,
            10,
            "NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column (https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet): 80 GB, 2 TB/s, FP32 51; tensor TF32 756, BF16/FP16 1,513, FP8 3,026, INT8 3,026 are WITH sparsity, halved to dense 378 / 756 / 1,513 / 1,513 (H100 whitepaper dense BF16 756). Interconnect: PCIe Gen5 x16 128 GB/s bidirectional -> 64 GB/s per direction (chosen over the optional 2-GPU NVLink bridge, 600 GB/s, which cloud PCIe instances generally lack and which only pairs two GPUs); latency: 10 us per all-reduce: documented assumption (PCIe peer traffic through host bridges/switches, about 2x an NVLink hop; not measured here); gpus_per_node 8 = typical 8-card PCIe server",
        ),
        (
            48,
            42,
            "NVIDIA H100 Tensor Core GPU datasheet, H100 PCIe column (https://resources.nvidia.com/en-us-tensor-core/nvidia-tensor-core-gpu-datasheet): 80 GB, 2 TB/s, FP32 51; tensor TF32 756, BF16/FP16 1,513, FP8 3,026, INT8 3,026 are WITH sparsity, halved to dense 378 / 756 / 1,513 / 1,513 (H100 whitepaper dense BF16 756). Interconnect: PCIe Gen5 x16 (chosen over the optional 2-GPU NVLink bridge, 600 GB/s, which cloud PCIe instances generally lack and which only pairs two GPUs): 48 GB/s per direction, NCCL's own model of the link's usable rate (NVIDIA/nccl src/graph/topo.cc: width x per-lane speed / 80 = 16 x 240 / 80; the line rate is 64 GB/s); engines all-reduce over NCCL on PCIe. Latency: 42 us per all-reduce, the PCIe Gen4 measurement (nccl-tests all_reduce_perf at 8 B on 8 x RTX 4090: 42.1 us, NVIDIA/nccl issue 1530; no 8-GPU Gen5 figure found; small-message latency is set by the protocol, not the lane rate); gpus_per_node 8 = typical 8-card PCIe server",
        ),
    ),
    (
        "l4",
        (
            32,
            10,
            "NVIDIA L4 datasheet (https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet): 24 GB GDDR6, 300 GB/s, FP32 30.3; tensor TF32 120, FP16/BF16 242, FP8 485, INT8 485 are published WITH sparsity, halved here to dense 60 / 121 / 242.5 / 242.5. Interconnect: PCIe Gen4 x16: 64 GB/s bidirectional -> 32 GB/s per direction (no NVLink on this SKU); latency: 10 us per all-reduce: documented assumption (PCIe peer traffic through host bridges/switches, about 2x an NVLink hop; not measured here); gpus_per_node 8 = g6.48xlarge",
        ),
        (
            24,
            42,
            "NVIDIA L4 datasheet (https://resources.nvidia.com/en-us-data-center-overview/l4-gpu-datasheet): 24 GB GDDR6, 300 GB/s, FP32 30.3; tensor TF32 120, FP16/BF16 242, FP8 485, INT8 485 are published WITH sparsity, halved here to dense 60 / 121 / 242.5 / 242.5. Interconnect: PCIe Gen4 x16 (no NVLink on this SKU): 24 GB/s per direction, NCCL's own model of the link's usable rate (NVIDIA/nccl src/graph/topo.cc: width x per-lane speed / 80 = 16 x 120 / 80; the line rate is 32 GB/s); engines all-reduce over NCCL on PCIe (custom all-reduce kernels need NVLink P2P). Latency: 42 us per all-reduce, measured: nccl-tests all_reduce_perf at 8 B on 8 x RTX 4090 (Ada, PCIe Gen4, no NVLink), 42.1 us out of place (NVIDIA/nccl issue 1530; 8 x RTX 3090: 54 us, nccl issue 1439); gpus_per_node 8 = g6.48xlarge",
        ),
    ),
    (
        "l40s",
        (
            32,
            10,
            "NVIDIA L40S datasheet (https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413): 48 GB GDDR6, 864 GB/s, FP32 91.6, dense tensor TF32 183, BF16/FP16 362.05, FP8 733, INT8 733 (sparse values 2x, not used). Interconnect: PCIe Gen4 x16: 64 GB/s bidirectional -> 32 GB/s per direction (no NVLink on this SKU); latency: 10 us per all-reduce: documented assumption (PCIe peer traffic through host bridges/switches, about 2x an NVLink hop; not measured here); gpus_per_node 8 = g6e.48xlarge",
        ),
        (
            24,
            42,
            "NVIDIA L40S datasheet (https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413): 48 GB GDDR6, 864 GB/s, FP32 91.6, dense tensor TF32 183, BF16/FP16 362.05, FP8 733, INT8 733 (sparse values 2x, not used). Interconnect: PCIe Gen4 x16 (no NVLink on this SKU): 24 GB/s per direction, NCCL's own model of the link's usable rate (NVIDIA/nccl src/graph/topo.cc: width x per-lane speed / 80 = 16 x 120 / 80; the line rate is 32 GB/s); engines all-reduce over NCCL on PCIe (custom all-reduce kernels need NVLink P2P). Latency: 42 us per all-reduce, measured: nccl-tests all_reduce_perf at 8 B on 8 x RTX 4090 (Ada, PCIe Gen4, no NVLink), 42.1 us out of place (NVIDIA/nccl issue 1530; 8 x RTX 3090: 54 us, nccl issue 1439); gpus_per_node 8 = g6e.48xlarge",
        ),
    ),
)

_gpus = sa.table(
    "gpus",
    sa.column("slug", sa.String()),
    sa.column("interconnect_gb_per_s", sa.Float()),
    sa.column("interconnect_latency_us", sa.Float()),
    sa.column("source", sa.Text()),
)


def _replace(frm: int, to: int) -> None:
    for slug, *values in REFERENCE:
        was, becomes = values[frm], values[to]
        op.execute(
            _gpus.update()
            .where(
                _gpus.c.slug == slug,
                _gpus.c.interconnect_gb_per_s == was[0],
                _gpus.c.interconnect_latency_us == was[1],
                _gpus.c.source == was[2],
            )
            .values(interconnect_gb_per_s=becomes[0], interconnect_latency_us=becomes[1], source=becomes[2])
        )


def upgrade() -> None:
    _replace(0, 1)


def downgrade() -> None:
    """The old reference values come back to rows that still hold the new ones."""
    _replace(1, 0)
