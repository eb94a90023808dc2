"""Request bodies for traffic and serving shape, shared by every endpoint that queues requests
(`/v1/evaluate`, `/v1/simulate`, `/v1/plans`): a workload (arrival rate, prompt and output
length distributions, burstiness) and a serving shape (replicas, batch limit, chunked-prefill
budget, router). `to_workload()` / `to_serving()` give the planner's value types.

A length is one of three JSON shapes, told apart by their members:
- an integer: every request has exactly that many tokens;
- `{"mean": m, "p99": q}`: lognormal with that mean and 99th percentile (q > m);
- `{"tokens": [...], "weights": [...]}`: a histogram of observed lengths and their weights.

A plan's workload is interactive (`kind: "interactive"`, the default: traffic at a rate, with
SLOs) or a batch job (`kind: "batch"`: N requests, or a total of tokens, due by `deadline_h`, no
latency target; planner/batch_jobs.py). `PlanWorkload` tells them apart by `kind`.

Every check that makes a body unusable is made here, so a bad body is a 422 listing each bad
field (pointer into the body), never a planner error later.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, ValidationInfo, field_validator, model_validator
from scipy.special import ndtri

from planner.errors import PlannerInputError
from planner.prefix_cache import PrefixReuse, Sessions
from planner.workload import (
    MAX_ARRIVAL_CV,
    MIN_ARRIVAL_CV,
    FixedLength,
    HistogramLength,
    LengthDistribution,
    LognormalLength,
    Serving,
    Task,
    Workload,
)

#: Largest length anyone could mean (tokens); beyond it a number is a typo, not a workload.
MAX_TOKENS = 10_000_000
#: Largest p99/mean ratio a lognormal can have: exp(z²/2) with z = Φ⁻¹(0.99) (see planner/workload.py).
MAX_LOGNORMAL_P99_OVER_MEAN = math.exp(float(ndtri(0.99)) ** 2 / 2.0)
#: Histogram size bound, so one body cannot carry an unbounded sample.
MAX_HISTOGRAM_BINS = 10_000
#: Largest histogram weight: weights are relative frequencies or request counts, and a year of
#: traffic at the largest arrival rate accepted (1e7 req/s) is 3.2e14 requests; 1e15 covers it, and
#: 10,000 such weights sum to 1e19, far from float overflow.
MAX_HISTOGRAM_WEIGHT = 1e15
#: Why the arrival CV is bounded to [0.05, 20]: planner/workload.py (MIN_ARRIVAL_CV, MAX_ARRIVAL_CV).
ARRIVAL_CV_DESCRIPTION = (
    "Coefficient of variation of inter-arrival times: 1 = Poisson, > 1 burstier (gamma), < 1 smoother; 0.05 "
    "(indistinguishable from clockwork arrivals) to 20 (200× Poisson's queueing delay, far burstier than any published trace)."
)


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class LognormalTokens(_Input):
    """Lognormal lengths given by their mean and 99th percentile, as traffic reports state them."""

    mean: float = Field(ge=1, le=MAX_TOKENS, description="Mean length in tokens.", examples=[1000])
    p99: float = Field(
        ge=1,
        le=MAX_TOKENS,
        description=f"99th-percentile length in tokens; above `mean` and at most {MAX_LOGNORMAL_P99_OVER_MEAN:.1f} × it "
        "(the largest ratio a lognormal can have).",
        examples=[4000],
    )

    @field_validator("p99")
    @classmethod
    def _p99_above_mean(cls, p99: float, info: ValidationInfo) -> float:
        mean = info.data.get("mean")
        if mean is None:
            return p99
        if p99 <= mean:
            raise ValueError(f"p99 ({p99:g}) must exceed mean ({mean:g})")
        if p99 / mean > MAX_LOGNORMAL_P99_OVER_MEAN:
            raise ValueError(
                f"p99 ({p99:g}) is more than {MAX_LOGNORMAL_P99_OVER_MEAN:.1f} × mean ({mean:g}): no lognormal has that shape"
            )
        return p99


class HistogramTokens(_Input):
    """Lengths drawn from observed values with relative weights (normalised by the service)."""

    tokens: list[Annotated[int, Field(ge=1, le=MAX_TOKENS)]] = Field(
        min_length=1, max_length=MAX_HISTOGRAM_BINS, description="Observed lengths in tokens.", examples=[[128, 512, 2048]]
    )
    weights: list[Annotated[float, Field(ge=0, le=MAX_HISTOGRAM_WEIGHT, allow_inf_nan=False)]] = Field(
        min_length=1,
        max_length=MAX_HISTOGRAM_BINS,
        description="Relative frequency of each length (same count as `tokens`, each in [0, 1e15], positive sum).",
        examples=[[0.5, 0.3, 0.2]],
    )

    @field_validator("weights")
    @classmethod
    def _matching_weights(cls, weights: list[float], info: ValidationInfo) -> list[float]:
        tokens = info.data.get("tokens")
        if tokens is not None and len(tokens) != len(weights):
            raise ValueError(f"weights has {len(weights)} entries but tokens has {len(tokens)}: give one weight per length")
        if sum(weights) <= 0:
            raise ValueError("weights must have a positive sum")
        return weights


def _length_shape(value: Any) -> str | None:
    """Which of the three shapes a JSON length is (None: none of them)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return "fixed[int]"
    if isinstance(value, LognormalTokens):
        return "lognormal[mean,p99]"
    if isinstance(value, HistogramTokens):
        return "histogram[tokens,weights]"
    if isinstance(value, dict):
        if "tokens" in value or "weights" in value:
            return "histogram[tokens,weights]"
        if "mean" in value or "p99" in value:
            return "lognormal[mean,p99]"
    return None


# The tags read like pydantic's own union-member tags ("name[...]"), which the problem mapper
# drops from a bad field's path: an error points at `prompt_tokens.p99`, as the body spells it.
TokenLengths = Annotated[
    Annotated[int, Field(ge=1, le=MAX_TOKENS), Tag("fixed[int]")]
    | Annotated[LognormalTokens, Tag("lognormal[mean,p99]")]
    | Annotated[HistogramTokens, Tag("histogram[tokens,weights]")],
    Discriminator(
        _length_shape,
        custom_error_type="length_shape",
        custom_error_message="a length is an integer number of tokens, {mean, p99} (lognormal) or {tokens, weights} (histogram)",
    ),
]


def length_distribution(value: int | LognormalTokens | HistogramTokens) -> LengthDistribution:
    """The planner's length distribution for one validated JSON length."""
    if isinstance(value, LognormalTokens):
        return LognormalLength(mean_tokens=value.mean, p99_tokens=value.p99)
    if isinstance(value, HistogramTokens):
        return HistogramLength(tokens=tuple(value.tokens), weights=tuple(value.weights))
    return FixedLength(tokens=value)


class SessionsSpec(_Input):
    """Multi-turn sessions (planner/prefix_cache.py `Sessions`): every request is a turn of a session of
    `turns` turns that re-sends the session's history as its prefix; sessions start at arrival_rate_rps / turns."""

    turns: int = Field(ge=2, le=10_000, description="Turns per session (the first re-sends nothing).", examples=[6])
    turn_tokens: int = Field(
        ge=16,
        le=MAX_TOKENS,
        description="Tokens each turn adds to the history the next turn re-sends: the user's new message plus the "
        "model's answer (at least one 16-token KV block).",
        examples=[400],
    )
    think_time_s: float = Field(
        gt=0,
        le=86_400,
        allow_inf_nan=False,
        description="Mean time between a session's turns, seconds (exponential); the cache keeps a history only as long "
        "as the LRU's characteristic time.",
        examples=[30],
    )

    def to_sessions(self) -> Sessions:
        return Sessions(turns=self.turns, turn_tokens=self.turn_tokens, think_time_s=self.think_time_s)


class PrefixReuseSpec(_Input):
    """How requests share prompt prefixes (planner/prefix_cache.py): a measured `hit_rate`, a system
    prompt shared by a fraction of requests and/or `distinct_prefixes` prefixes of Zipf popularity, or
    multi-turn `sessions` re-sending their history."""

    hit_rate: float | None = Field(
        default=None,
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description="Measured fraction of prompt tokens served from the prefix cache (vLLM's prefix_cache_hit_rate); "
        "alone, without the prefix fields.",
        examples=[0.6],
    )
    system_prompt_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS, description="Tokens of a system prompt shared by requests.")
    system_prompt_fraction: float = Field(
        default=0.0, ge=0, le=1, allow_inf_nan=False, description="Fraction of requests that start with the system prompt."
    )
    distinct_prefixes: int = Field(
        default=0, ge=0, le=1_000_000, description="Distinct shared prefixes (documents, agent contexts, sessions)."
    )
    prefix_tokens: int = Field(default=0, ge=0, le=MAX_TOKENS, description="Tokens of each distinct prefix.")
    prefix_fraction: float = Field(
        default=0.0, ge=0, le=1, allow_inf_nan=False, description="Fraction of requests that carry one of the distinct prefixes."
    )
    zipf_exponent: float = Field(
        default=1.0, ge=0, le=10, allow_inf_nan=False, description="Popularity of the k-th prefix ∝ k^(−zipf_exponent)."
    )
    sessions: SessionsSpec | None = Field(
        default=None,
        exclude_if=lambda v: v is None,
        description="Multi-turn sessions re-sending their history (alone, without the other fields): the plan's hit rate "
        "follows from whether a session's history outlives the think time in the replica's LRU (docs/prefix-caching.md).",
    )  # not written back when absent: stored requests stay as they were

    @model_validator(mode="after")
    def _usable(self) -> Self:
        if self.system_prompt_fraction + self.prefix_fraction > 1.0 + 1e-12:
            raise ValueError("system_prompt_fraction + prefix_fraction must be at most 1 (a request carries one shared prefix)")
        try:
            self.to_prefix_reuse()
        except PlannerInputError as error:
            raise ValueError(str(error)) from None
        return self

    def to_prefix_reuse(self) -> PrefixReuse:
        return PrefixReuse(
            hit_rate=self.hit_rate,
            system_prompt_tokens=self.system_prompt_tokens,
            system_prompt_fraction=self.system_prompt_fraction,
            distinct_prefixes=self.distinct_prefixes,
            prefix_tokens=self.prefix_tokens,
            prefix_fraction=self.prefix_fraction,
            zipf_exponent=self.zipf_exponent,
            sessions=None if self.sessions is None else self.sessions.to_sessions(),
        )


TASK_DESCRIPTION = (
    "What the traffic is — chat (MT-bench), code (HumanEval), math (GSM8K), instruction (Alpaca) or summarization "
    "(CNN/DM): picks the draft head's default acceptance rate from the published per-task figures "
    "(docs/speculative-decoding.md). Absent: the method's chat default."
)

PREFIX_REUSE_DESCRIPTION = (
    "How requests share prompt prefixes; with it a plan decides the prefix cache's size and the routing "
    "(`plan.prefix_caching`). Absent: no reuse is planned for."
)


def refuse_sessions_without_a_rate(reuse: PrefixReuseSpec | None, question: str) -> None:
    """A 422 for `prefix_reuse.sessions` where the request rate is what is asked for: a session's history stays
    cached only if its next turn comes before the LRU evicts it, and that depends on the rate."""
    if reuse is not None and reuse.sessions is not None:
        raise ValueError(
            f"prefix_reuse.sessions needs the request rate, which {question} asks for (a session's history stays "
            "cached only if its next turn comes before the LRU evicts it, and that depends on how many sessions "
            "share the cache): plan the workload at a rate with POST /v1/plans or POST /v1/what-if"
        )


def _prefix_reuse(spec: PrefixReuseSpec | None) -> PrefixReuse | None:
    return None if spec is None else spec.to_prefix_reuse()


class WorkloadSpec(_Input):
    """Traffic offered to the whole deployment: Poisson arrivals (or burstier, gamma inter-arrivals
    with `arrival_cv` > 1) at `arrival_rate_rps`, with prompt and output lengths from distributions."""

    arrival_rate_rps: float = Field(
        ge=0, le=1e7, allow_inf_nan=False, description="Arrivals per second over all replicas.", examples=[10]
    )
    prompt_tokens: TokenLengths = Field(
        description="Prompt length in tokens: an integer, {mean, p99} (lognormal) or {tokens, weights} (histogram).",
        examples=[{"mean": 1000, "p99": 4000}],
    )
    output_tokens: TokenLengths = Field(
        description="Output length in tokens: an integer, {mean, p99} (lognormal) or {tokens, weights} (histogram).",
        examples=[256],
    )
    arrival_cv: float = Field(
        default=1.0,
        ge=MIN_ARRIVAL_CV,
        le=MAX_ARRIVAL_CV,
        allow_inf_nan=False,
        description=ARRIVAL_CV_DESCRIPTION,
    )

    prefix_reuse: PrefixReuseSpec | None = Field(
        default=None, exclude_if=lambda v: v is None, description=PREFIX_REUSE_DESCRIPTION
    )  # not written back when absent: stored requests stay as they were
    task: Task | None = Field(
        default=None, exclude_if=lambda v: v is None, description=TASK_DESCRIPTION, examples=["code"]
    )  # not written back when absent: stored requests stay as they were

    # not written back (stored requests and templates stay as they were): a workload without `kind` is interactive
    kind: Literal["interactive"] = Field(
        default="interactive", exclude=True, description="`interactive` (the default): traffic at a rate, within SLOs."
    )

    def to_workload(self) -> Workload:
        return Workload(
            arrival_rate_rps=self.arrival_rate_rps,
            prompt_tokens=length_distribution(self.prompt_tokens),
            output_tokens=length_distribution(self.output_tokens),
            arrival_cv=self.arrival_cv,
            prefix_reuse=_prefix_reuse(self.prefix_reuse),
            task=self.task,
        )


class WorkloadShape(_Input):
    """The traffic's lengths and burstiness without its rate, for questions that vary or ask for
    the rate (what-if sweeps, capacity)."""

    prompt_tokens: TokenLengths = Field(
        description="Prompt length in tokens: an integer, {mean, p99} (lognormal) or {tokens, weights} (histogram).",
        examples=[{"mean": 1000, "p99": 4000}],
    )
    output_tokens: TokenLengths = Field(
        description="Output length in tokens: an integer, {mean, p99} (lognormal) or {tokens, weights} (histogram).",
        examples=[256],
    )
    arrival_cv: float = Field(
        default=1.0,
        ge=MIN_ARRIVAL_CV,
        le=MAX_ARRIVAL_CV,
        allow_inf_nan=False,
        description=ARRIVAL_CV_DESCRIPTION,
    )
    prefix_reuse: PrefixReuseSpec | None = Field(
        default=None, exclude_if=lambda v: v is None, description=PREFIX_REUSE_DESCRIPTION
    )  # not written back when absent: stored requests stay as they were
    task: Task | None = Field(
        default=None, exclude_if=lambda v: v is None, description=TASK_DESCRIPTION, examples=["code"]
    )  # not written back when absent: stored requests stay as they were

    def to_workload(self, arrival_rate_rps: float) -> Workload:
        return Workload(
            arrival_rate_rps=arrival_rate_rps,
            prompt_tokens=length_distribution(self.prompt_tokens),
            output_tokens=length_distribution(self.output_tokens),
            arrival_cv=self.arrival_cv,
            prefix_reuse=_prefix_reuse(self.prefix_reuse),
            task=self.task,
        )


#: Largest batch job: a trillion requests (beyond it a number is a typo; 2 million documents is a big job).
MAX_JOB_REQUESTS = 10**12
#: Longest deadline: ten years of hours (87,600 h); a plan for longer is not a batch job.
MAX_DEADLINE_H = 87_600.0


class BatchWorkloadSpec(_Input):
    """An offline job: `requests` requests (or `total_tokens` prompt + output tokens of them) with these
    lengths, all available at the start, due within `deadline_h` hours (or within `constraints.max_gpus`)."""

    kind: Literal["batch"] = Field(description="`batch`: a job of fixed size, planned for throughput, no latency SLO.")
    requests: int | None = Field(
        default=None,
        ge=1,
        le=MAX_JOB_REQUESTS,
        description="Requests in the job. Give this or `total_tokens`.",
        examples=[2_000_000],
    )
    total_tokens: int | None = Field(
        default=None,
        ge=1,
        le=MAX_JOB_REQUESTS * 1000,
        description="The job's size in prompt + output tokens; requests = ⌈total_tokens / (mean prompt + mean output)⌉. "
        "Give this or `requests`.",
    )
    prompt_tokens: TokenLengths = Field(
        description="Prompt length in tokens: an integer, {mean, p99} (lognormal) or {tokens, weights} (histogram).",
        examples=[{"mean": 2000, "p99": 8000}],
    )
    output_tokens: TokenLengths = Field(
        description="Output length in tokens: an integer, {mean, p99} (lognormal) or {tokens, weights} (histogram).",
        examples=[{"mean": 300, "p99": 1200}],
    )
    deadline_h: float | None = Field(
        default=None,
        gt=0,
        le=MAX_DEADLINE_H,
        allow_inf_nan=False,
        description="Hours from start to the last request done. Give this, `constraints.max_gpus`, or both.",
        examples=[72],
    )

    @model_validator(mode="after")
    def _one_size(self) -> Self:
        if (self.requests is None) == (self.total_tokens is None):
            raise ValueError("give exactly one of requests and total_tokens")
        return self

    def job_requests(self) -> int:
        """N: `requests`, or the requests `total_tokens` makes at the mean lengths (rounded up)."""
        if self.requests is not None:
            return self.requests
        per_request = length_distribution(self.prompt_tokens).mean + length_distribution(self.output_tokens).mean
        return max(1, math.ceil(self.total_tokens / per_request))  # type: ignore[operator]


def _workload_kind(value: Any) -> str:
    """The member's tag: batch or interactive (a workload without `kind` is interactive, as before kinds
    existed; an unknown kind fails the interactive literal). Tags read like pydantic's own ("name[...]"),
    which the problem mapper drops from a bad field's path, as for lengths above."""
    kind = value.get("kind", "interactive") if isinstance(value, dict) else getattr(value, "kind", "interactive")
    return "batch[kind]" if kind == "batch" else "interactive[kind]"


#: A plan's workload: interactive traffic (default) or a batch job, by `kind`.
PlanWorkload = Annotated[
    Annotated[WorkloadSpec, Tag("interactive[kind]")] | Annotated[BatchWorkloadSpec, Tag("batch[kind]")],
    Discriminator(_workload_kind),
]


Router = Literal["random", "round_robin", "jsq"]


class ServingSpec(_Input):
    """How the deployment runs: `replicas` copies of the model behind a router, each a
    continuous-batching engine (vLLM's `max_num_seqs` = `batch_limit`, `max_num_batched_tokens` = `chunk_tokens`)."""

    replicas: int = Field(default=1, ge=1, le=100_000, description="Replicas (each `tp` GPUs holding one copy of the model).")
    batch_limit: int = Field(ge=1, le=65_536, description="Most sequences one replica runs at once.", examples=[128])
    chunk_tokens: int | None = Field(
        default=None,
        ge=2,
        le=10_000_000,
        description="Chunked-prefill budget: most tokens one step processes, decodes counted first (must exceed "
        "`batch_limit`); null = whole prompts prefill in one step.",
    )
    router: Router = Field(
        default="random",
        description="How arrivals are spread: random split (each replica sees Poisson at rate/replicas), round_robin, or jsq "
        "(join the shortest queue).",
    )

    @field_validator("chunk_tokens")
    @classmethod
    def _chunk_above_batch(cls, chunk_tokens: int | None, info: ValidationInfo) -> int | None:
        batch_limit = info.data.get("batch_limit")
        if chunk_tokens is not None and batch_limit is not None and chunk_tokens <= batch_limit:
            raise ValueError(
                f"chunk_tokens ({chunk_tokens}) must exceed batch_limit ({batch_limit}): decodes count "
                "against the chunk budget, so a smaller one could leave no room for prefill"
            )
        return chunk_tokens

    def to_serving(self) -> Serving:
        return Serving(replicas=self.replicas, batch_limit=self.batch_limit, chunk_tokens=self.chunk_tokens, router=self.router)
