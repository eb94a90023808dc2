"""The `disaggregation` section of a plan: why the plan's topology won and what the disaggregated pools cost."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from api.schemas.plan_result import ParallelSectionRead


class PoolJustificationRead(BaseModel):
    role: Literal["prefill", "decode"]
    rho: float = Field(description="Prefill: λ·E[prefill s] / replicas. Decode: mean batch / slots per replica.")
    binding: str = Field(
        description="What set the pool's size: `ttft` (its share of the TTFT budget), `tpot`, `e2e` (the decode time of "
        "an output at the SLO percentile within the E2E target left after the TTFT target), `utilisation` (fewer "
        "replicas would be unstable), `min_replicas` (constraints.min_replicas raised it), or for one decode replica "
        "what limits its slots (`batch_limit`, `kv_memory`)."
    )
    cost_usd_per_hour: float
    spare_replicas: int = Field(
        default=0,
        description="Replicas beyond what the SLOs need, for constraints.n_plus_one (1, else 0): counted in the pool's "
        "replicas and cost; rho and the predicted and simulated figures are with the spare lost.",
    )
    parallel: ParallelSectionRead | None = Field(
        default=None,
        description="A pool in pipeline stages: per-stage time, bubble and communication terms, as an aggregated plan's "
        "justification.parallel (null at pp 1). The decode pool's step is at its mean batch per replica; a prefill pool "
        "decodes no batch, so its step is one sequence's, and its service per prompt is lone_prefill_s.",
    )


class KvTransferRead(BaseModel):
    link: str = Field(description="The link the KV cache crosses between the pools (docs/disaggregation.md's table).")
    link_source: str
    bytes_per_s_per_gpu: float
    links: int = Field(description="min(tp prefill, tp decode): GPU pairs sending shards at once.")
    kv_bytes_per_token: float
    p99_prompt_bytes: float
    p99_ms: float = Field(description="Transfer of a prompt at the SLO percentile of the prompt lengths, ms.")
    mean_ms: float


class TopologyAlternativeRead(BaseModel):
    topology: Literal["aggregated", "disaggregated"]
    cost_usd_per_hour: float | None = Field(description="The other topology's best plan; null when it has none.")
    reason: str


class DisaggregationRead(BaseModel):
    """Why the plan is disaggregated (or, for `any`, why not), with the disaggregated plan's physics."""

    requested: Literal["disaggregated", "any"]
    chosen: Literal["aggregated", "disaggregated"]
    why: str
    saving_fraction: float | None = Field(
        description="1 − chosen cost / other topology's cost (`any` with both feasible); null otherwise."
    )
    ttft_prefill_fraction: float | None = Field(
        description="Share of the TTFT target given to the prefill pool (wait + prefill); the rest is admission + transfer."
    )
    pools: list[PoolJustificationRead]
    transfer: KvTransferRead | None
    interference_removed: str
    percentile: float
    predicted_ttft_ms: float | None
    predicted_tpot_ms: float | None
    predicted_e2e_s: float | None
    simulated_ttft_ms: float | None = Field(description="The simulator's p99 of the final pools; null when verify was false.")
    simulated_tpot_ms: float | None
    simulated_e2e_s: float | None
    verify_added_replicas: int
    alternative: TopologyAlternativeRead | None
