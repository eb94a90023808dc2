"""Traffic, serving shape and latency targets shared by the queueing model, the simulator and the optimizer.

Length distributions are small frozen value types with closed-form moments and quantiles and a
seeded sampler; a workload couples two of them with an arrival process.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from scipy.special import ndtri

from planner.errors import PlannerInputError
from planner.prefix_cache import PrefixReuse

Router = Literal["random", "round_robin", "jsq"]
#: The kinds of traffic the EAGLE papers report acceptance for, each by its benchmark: MT-bench
#: (multi-turn chat), HumanEval (code), GSM8K (math word problems), Alpaca (single instructions),
#: CNN/DailyMail (summarisation). `Workload.task` names one to pick a speculative method's default
#: acceptance rate (planner/speculative.py `default_acceptance`); absent, the method's chat default holds.
Task = Literal["chat", "code", "math", "instruction", "summarization"]
TASKS: tuple[Task, ...] = ("chat", "code", "math", "instruction", "summarization")

#: Coefficient of variation of inter-arrival times the queueing model and the simulator take.
#: 0.05: c² = 0.0025, already indistinguishable from clockwork arrivals in the Allen–Cunneen
#: (c_a² + c_s²)/2 term, while a gamma of shape 1/c² stays samplable (1e-200 gave shape 1e400).
#: 20: c² = 400, 200× Poisson's queueing delay, far burstier than any published LLM serving
#: trace (inter-arrival CVs of 1-4); beyond it a gamma of shape 1/400 is mostly zero gaps.
MIN_ARRIVAL_CV, MAX_ARRIVAL_CV = 0.05, 20.0


@dataclass(frozen=True, slots=True, kw_only=True)
class FixedLength:
    """Every request has exactly `tokens` tokens."""

    tokens: int

    def __post_init__(self) -> None:
        if self.tokens < 1:
            raise PlannerInputError(f"token count must be >= 1, got {self.tokens}")

    @property
    def mean(self) -> float:
        return float(self.tokens)

    @property
    def second_moment(self) -> float:
        return float(self.tokens) ** 2

    def quantile(self, q: float) -> float:
        return float(self.tokens)

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return np.full(size, self.tokens, dtype=np.int64)


@dataclass(frozen=True, slots=True, kw_only=True)
class LognormalLength:
    """Lognormal lengths given by their mean and 99th percentile (as a traffic report states them).

    With z = Φ⁻¹(0.99): mean = exp(μ + σ²/2), p99 = exp(μ + zσ)  ⇒  σ²/2 − zσ + ln(p99/mean) = 0,
    taking the smaller root σ = z − √(z² − 2 ln(p99/mean)).
    """

    mean_tokens: float
    p99_tokens: float

    def __post_init__(self) -> None:
        if not (self.mean_tokens >= 1 and self.p99_tokens > self.mean_tokens):
            raise PlannerInputError(f"lognormal lengths need 1 <= mean < p99, got mean {self.mean_tokens}, p99 {self.p99_tokens}")
        z = float(ndtri(0.99))
        if z * z < 2.0 * math.log(self.p99_tokens / self.mean_tokens):
            raise PlannerInputError(
                f"p99 {self.p99_tokens} is too far above mean {self.mean_tokens} for a lognormal "
                f"(p99/mean must be <= {math.exp(z * z / 2):.1f})"
            )

    @property
    def sigma(self) -> float:
        z = float(ndtri(0.99))
        return z - math.sqrt(z * z - 2.0 * math.log(self.p99_tokens / self.mean_tokens))  # smaller root

    @property
    def mu(self) -> float:
        return math.log(self.mean_tokens) - self.sigma**2 / 2.0  # ln mean − σ²/2

    @property
    def mean(self) -> float:
        return float(self.mean_tokens)

    @property
    def second_moment(self) -> float:
        return math.exp(2.0 * self.mu + 2.0 * self.sigma**2)  # E[X²] = exp(2μ + 2σ²)

    def quantile(self, q: float) -> float:
        return math.exp(self.mu + self.sigma * float(ndtri(q)))

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return np.maximum(1, np.rint(rng.lognormal(self.mu, self.sigma, size))).astype(np.int64)


@dataclass(frozen=True, slots=True, kw_only=True)
class HistogramLength:
    """Lengths drawn from observed values with weights (normalised here).

    As a prompt distribution it may carry `cached`: per value, the tokens of that prompt already in
    a prefix cache (planner/plan_prefix.py's mixtures). `tokens` are then the tokens prefilled and
    tokens + cached the context the prompt leaves in the KV cache, which every decode step reads
    and its prefill attends to; the queueing model counts both (planner/queueing_replica.py). The
    cached tokens are held by the cache, not by the sequence, so a sequence's own KV stays
    tokens + output. Empty: nothing cached (every other use)."""

    tokens: tuple[int, ...]
    weights: tuple[float, ...]
    cached: tuple[int, ...] = ()
    #: The hash, computed once: a histogram keys the queueing model's caches, which look it up
    #: thousands of times a plan, and hashing plan_prefix's 384-value mixtures each time was ~8 % of a trial.
    _hash: int = field(init=False, repr=False, compare=False, default=0)

    def __post_init__(self) -> None:
        if not self.tokens or len(self.tokens) != len(self.weights):
            raise PlannerInputError("histogram needs as many weights as token values, at least one")
        if min(self.tokens) < 1 or not all(w >= 0 and math.isfinite(w) for w in self.weights) or max(self.weights) <= 0:
            raise PlannerInputError("histogram token values must be >= 1 and weights finite and >= 0 with a positive sum")
        if self.cached and (len(self.cached) != len(self.tokens) or min(self.cached) < 0):
            raise PlannerInputError("histogram cached tokens need one value >= 0 per token value")
        object.__setattr__(self, "_hash", hash((self.tokens, self.weights, self.cached)))

    def __hash__(self) -> int:
        return self._hash

    @property
    def _p(self) -> np.ndarray:
        return _histogram_moments(self).p

    @property
    def mean(self) -> float:
        return _histogram_moments(self).mean

    @property
    def second_moment(self) -> float:
        return _histogram_moments(self).second_moment

    def quantile(self, q: float) -> float:
        order = np.argsort(self.tokens)
        cdf = np.cumsum(self._p[order])
        index = int(np.searchsorted(cdf, q - 1e-12))
        return float(np.asarray(self.tokens)[order][min(index, len(order) - 1)])

    def sample(self, rng: np.random.Generator, size: int) -> np.ndarray:
        return rng.choice(np.asarray(self.tokens, dtype=np.int64), size=size, p=self._p)

    @property
    def cached_mean(self) -> float:
        """E[c]: the mean cached tokens per prompt (0 without `cached`)."""
        return _histogram_moments(self).cached_mean

    @property
    def cross_moment(self) -> float:
        """E[n·c]: the mean product of the tokens prefilled and the tokens cached (0 without `cached`)."""
        return _histogram_moments(self).cross_moment


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class _HistogramMoments:
    p: np.ndarray  # the normalised weights (read-only)
    mean: float
    second_moment: float
    cached_mean: float
    cross_moment: float


#: Histograms whose moments are kept: the queueing model asks a distribution for them once per
#: configuration of a plan (hundreds of times), and plan_prefix's mixtures have 384 values.
_HISTOGRAM_CACHE_SIZE = 64


@functools.lru_cache(maxsize=_HISTOGRAM_CACHE_SIZE)
def _histogram_moments(dist: HistogramLength) -> _HistogramMoments:
    w = np.asarray(dist.weights, dtype=float)
    w = w / w.max()  # scaled to at most 1 first, so the sum of weights near 1e308 stays finite
    p = np.asarray(w / w.sum())
    p.setflags(write=False)
    return _HistogramMoments(
        p=p,
        mean=float(np.dot(p, dist.tokens)),
        second_moment=float(np.dot(p, np.square(np.asarray(dist.tokens, dtype=float)))),
        cached_mean=float(np.dot(p, dist.cached)) if dist.cached else 0.0,
        cross_moment=float(np.dot(p, np.multiply(dist.tokens, dist.cached, dtype=float))) if dist.cached else 0.0,
    )


LengthDistribution = FixedLength | LognormalLength | HistogramLength


def cached_moments(prompt: LengthDistribution) -> tuple[float, float]:
    """(E[c], E[n·c]) of a prompt distribution whose prompts find c tokens cached and prefill n (zeros without)."""
    if isinstance(prompt, HistogramLength):
        return prompt.cached_mean, prompt.cross_moment
    return 0.0, 0.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """Poisson arrivals (arrival_cv = 1) or gamma inter-arrivals with the given coefficient of variation."""

    arrival_rate_rps: float
    prompt_tokens: LengthDistribution
    output_tokens: LengthDistribution
    arrival_cv: float = 1.0
    #: How requests share prompt prefixes (planner/prefix_cache.py); None: no reuse is planned for.
    prefix_reuse: PrefixReuse | None = None
    #: What the traffic is (chat, code, …): picks a draft method's default acceptance rate; None: chat's.
    task: Task | None = None

    def __post_init__(self) -> None:
        if not (self.arrival_rate_rps >= 0 and math.isfinite(self.arrival_rate_rps)):
            raise PlannerInputError(f"arrival rate must be a finite number >= 0, got {self.arrival_rate_rps}")
        if not (MIN_ARRIVAL_CV <= self.arrival_cv <= MAX_ARRIVAL_CV):
            raise PlannerInputError(
                f"arrival CV must be in [{MIN_ARRIVAL_CV:g}, {MAX_ARRIVAL_CV:g}], got {self.arrival_cv:g}",
                field="arrival_cv",
            )

    def at_rate(self, arrival_rate_rps: float) -> Workload:
        return Workload(
            arrival_rate_rps=arrival_rate_rps,
            prompt_tokens=self.prompt_tokens,
            output_tokens=self.output_tokens,
            arrival_cv=self.arrival_cv,
            prefix_reuse=self.prefix_reuse,
            task=self.task,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Serving:
    """How one deployment runs: replicas behind a router, each a continuous-batching engine."""

    replicas: int = 1
    batch_limit: int
    chunk_tokens: int | None = None
    router: Router = "random"

    def __post_init__(self) -> None:
        if self.replicas < 1:
            raise PlannerInputError(f"replicas must be >= 1, got {self.replicas}")
        if self.batch_limit < 1:
            raise PlannerInputError(f"batch_limit must be >= 1, got {self.batch_limit}")
        if self.chunk_tokens is not None and self.chunk_tokens <= self.batch_limit:
            raise PlannerInputError(
                f"chunk_tokens ({self.chunk_tokens}) must exceed batch_limit ({self.batch_limit}): "
                "decodes count against the chunk budget, so a smaller budget could starve prefill"
            )
        if self.router not in ("random", "round_robin", "jsq"):
            raise PlannerInputError(f"unknown router {self.router!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Slo:
    """Latency targets at a percentile; any subset, at least one. SI seconds."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None
    percentile: float = 99.0

    def __post_init__(self) -> None:
        targets = [t for t in (self.ttft_s, self.tpot_s, self.e2e_s) if t is not None]
        if not targets:
            raise PlannerInputError("an SLO needs at least one of ttft, tpot, e2e")
        if any(not (t > 0 and math.isfinite(t)) for t in targets):
            raise PlannerInputError("SLO targets must be positive and finite")
        if not (50.0 <= self.percentile < 100.0):
            raise PlannerInputError(f"SLO percentile must be in [50, 100), got {self.percentile}")
