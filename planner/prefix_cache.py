"""Prefix caching: how often a request's prompt prefix is already in a replica's KV cache.

A workload describes its reuse (`PrefixReuse`) either as a measured hit rate (the fraction of prompt
tokens served from the cache, the quantity vLLM's `prefix_cache_hit_rate` metric reports) or as
shared prefixes:

* a system prompt of `system_prompt_tokens` shared by `system_prompt_fraction` of the requests, and/or
* `distinct_prefixes` prefixes of `prefix_tokens` each, carried by `prefix_fraction` of the requests,
  the k-th most popular with probability ∝ k^(−zipf_exponent).

Engines cache whole blocks of `BLOCK_TOKENS` tokens (vLLM's automatic prefix caching and SGLang's
radix cache at page size 16), so a prefix of L tokens can save ⌊L/16⌋·16 prompt tokens.

The cache is an LRU over blocks. Its hit rate follows from the characteristic-time approximation
(Che, Tung & Wang, "Hierarchical Web caching systems: modeling, design and experimental results",
IEEE JSAC 20(7), 2002; Fricker, Robert & Roberts, "A versatile and accurate approximation for LRU
cache performance", ITC 2012). Assumption: the independent reference model — each request draws
its prefix independently from a fixed popularity, so the prefixes a replica sees form independent
Poisson streams. An item of size s_i requested with probability p_i stays cached for the
characteristic time T (counted in requests), where T solves

    Σ_i s_i · (1 − exp(−p_i · T)) = C            (the cache of C tokens is full)

and the item is found with probability h_i = 1 − exp(−p_i · T). All blocks of a prefix are touched
by the same request, so they share their recency; the model caches a prefix as one item of its
block-rounded size (a block-granular LRU may keep part of a prefix at the boundary; ignored).

Routing changes what one replica sees. Random (or round-robin, or least-loaded) routing over R
replicas thins every prefix's stream by the same 1/R, so each replica sees the whole popularity and
its hit rate is that of R = 1 whatever R. Prefix-aware routing (llm-d's prefix-cache scorer, the
SGLang router's cache-aware policy, NVIDIA Dynamo's KV router) sends every request of a prefix to
one replica: replica r sees only its share of the distinct prefixes (here the prefixes ranked
r, r + R, r + 2R, …: popularity spread evenly), so its working set is 1/R of them. The system
prompt is carried by every replica under either routing (one prefix that hot would overload the
replica it was pinned to; the routers above balance load before affinity).

Multi-turn sessions (`Sessions`) are the other shape of reuse: a conversation of `turns` turns,
each re-sending the session's history as its prefix, the history growing by `turn_tokens` per turn
(the user's new message and the model's answer; engines cache generated tokens' full blocks too).
Assumptions: sessions start as a Poisson stream at λ/T (λ the request rate, every request a turn);
the think time between one turn and the next is exponential with mean τ (`think_time_s`, the usual
model of an interactive user's think time in closed queueing models; Kleinrock, Queueing Systems
vol. 2, §4.11) and counts from turn to turn (a turn's own latency, seconds, is ignored next to τ).
A session's history is one LRU item that grows at each turn. The cache's characteristic time T_c
(seconds) follows from the cache being full (Che's argument, in time instead of requests): after
turn j a replica holds the j·u-token history until the session's next turn on the same replica
re-references it (the gap G ~ Exp(τ), the history present for min(G, T_c)), or, when the next turn
goes elsewhere or there is none, for T_c before LRU evicts it. With q the probability that the next
turn lands on the same replica and λ_r = λ/(T·R) sessions per second per replica,

    λ_r · Σ_{j=1..T} s_j · [q·τ(1 − e^{−T_c/τ}) + (1 − q)·T_c]  (q taken as 0 for j = T)  =  C

and a turn j ≥ 2 finds its (j − 1)·u history with probability h = q·(1 − e^{−T_c/τ}). Session-sticky
routing (prefix_aware: the routers above hash the session's prefix) has q = 1; random routing
q = 1/R (the model counts only a hit on the previous turn's replica: a real engine may also find
an older, shorter history where the session was served before, so random routing is understated).

A request whose prefix is found skips the prefill of its cached tokens (planner/step_model.py's
`cached_prefill_s`: no GEMMs over them, their KV still read by the attention of the new tokens).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.optimize import brentq

from planner.errors import PlannerInputError

#: Tokens per KV block: vLLM's default `--block-size` 16 (its automatic prefix caching hashes full
#: blocks), SGLang's radix cache matches at `--page-size` granularity (1 by default; 16 is the vLLM-like setting).
BLOCK_TOKENS = 16

Routing = Literal["random", "prefix_aware"]
ROUTINGS: tuple[Routing, ...] = ("random", "prefix_aware")


def cacheable_tokens(prefix_tokens: float) -> int:
    """⌊L / 16⌋ · 16: the tokens of a prefix that fill whole blocks, the part a cache can hold."""
    return int(prefix_tokens // BLOCK_TOKENS) * BLOCK_TOKENS


@dataclass(frozen=True, slots=True, kw_only=True)
class Sessions:
    """Multi-turn sessions (see the module docstring): `turns` turns each adding `turn_tokens` to the
    history the next one re-sends, an exponential think time of mean `think_time_s` between turns."""

    turns: int
    turn_tokens: int
    think_time_s: float

    def __post_init__(self) -> None:
        if self.turns < 2:
            raise PlannerInputError(f"sessions.turns must be >= 2 (one turn re-sends nothing), got {self.turns}", field="turns")
        if self.turn_tokens < BLOCK_TOKENS:
            raise PlannerInputError(
                f"sessions.turn_tokens must be >= {BLOCK_TOKENS} (one KV block), got {self.turn_tokens}", field="turn_tokens"
            )
        if not (self.think_time_s > 0.0 and math.isfinite(self.think_time_s)):
            raise PlannerInputError(f"sessions.think_time_s must be > 0, got {self.think_time_s}", field="think_time_s")

    def history_tokens(self) -> np.ndarray:
        """s_j for j = 1..T: the cacheable history after turn j, ⌊j·u/16⌋·16."""
        return np.array([cacheable_tokens(j * self.turn_tokens) for j in range(1, self.turns + 1)], dtype=float)

    def session_rate_rps(self, arrival_rate_rps: float) -> float:
        """λ/T: sessions starting per second when every request is a turn."""
        return arrival_rate_rps / self.turns

    def concurrent_sessions(self, arrival_rate_rps: float) -> float:
        """Sessions in progress (Little's law): λ/T sessions per second, each lasting (T − 1) think times."""
        return self.session_rate_rps(arrival_rate_rps) * (self.turns - 1) * self.think_time_s


def session_keep_probability(routing: Routing, replicas: int) -> float:
    """q: the probability that a session's next turn reaches the replica holding its history."""
    return 1.0 if routing == "prefix_aware" else 1.0 / max(replicas, 1)


def session_occupancy_tokens(sessions: Sessions, session_rate_rps: float, keep: float, characteristic_s: float) -> float:
    """Tokens one replica's LRU holds at characteristic time T_c (the left side of the module docstring's equation)."""
    sizes = sessions.history_tokens()
    tau = sessions.think_time_s
    revisited = tau * -math.expm1(-characteristic_s / tau)  # E[min(G, T_c)], G ~ Exp(τ)
    held = np.full(sizes.size, keep * revisited + (1.0 - keep) * characteristic_s)
    held[-1] = characteristic_s  # after the last turn nothing re-references the history
    return float(session_rate_rps * np.dot(sizes, held))


def session_characteristic_time(sessions: Sessions, session_rate_rps: float, keep: float, cache_tokens: float) -> float:
    """T_c (seconds) filling a cache of `cache_tokens`: 0 without a cache or sessions, by bisection on log T_c otherwise
    (the occupancy rises from 0 without bound in T_c, so the root is unique)."""
    if cache_tokens <= 0 or session_rate_rps <= 0:
        return 0.0

    def overfull(log_t: float) -> float:
        return session_occupancy_tokens(sessions, session_rate_rps, keep, math.exp(log_t)) - cache_tokens

    lo, hi = -60.0, 0.0
    while overfull(hi) < 0.0:
        lo, hi = hi, hi + 5.0
    return math.exp(brentq(overfull, lo, hi, xtol=1e-12))


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixReuse:
    """How a workload reuses prompt prefixes (see the module docstring); a measured `hit_rate` or shared prefixes."""

    hit_rate: float | None = None
    system_prompt_tokens: int = 0
    system_prompt_fraction: float = 0.0
    distinct_prefixes: int = 0
    prefix_tokens: int = 0
    prefix_fraction: float = 0.0
    zipf_exponent: float = 1.0
    sessions: Sessions | None = None

    def __post_init__(self) -> None:
        if self.sessions is not None:
            if self.hit_rate is not None or self.system_prompt_tokens or self.distinct_prefixes:
                raise PlannerInputError(
                    "prefix_reuse takes sessions alone: a session's history already carries its system prompt",
                    field="sessions",
                )
            return
        if self.hit_rate is not None:
            if not 0.0 <= self.hit_rate < 1.0:
                raise PlannerInputError(f"prefix_reuse.hit_rate must be in [0, 1), got {self.hit_rate}", field="hit_rate")
            if self.system_prompt_tokens or self.distinct_prefixes:
                raise PlannerInputError(
                    "prefix_reuse takes either a measured hit_rate or shared prefixes, not both", field="hit_rate"
                )
            return
        if self.system_prompt_tokens < 0 or self.distinct_prefixes < 0 or self.prefix_tokens < 0:
            raise PlannerInputError("prefix_reuse token counts and distinct_prefixes must be >= 0", field="prefix_reuse")
        if not self.system_prompt_tokens and not self.distinct_prefixes:
            raise PlannerInputError(
                "prefix_reuse needs a hit_rate, a system prompt (system_prompt_tokens, system_prompt_fraction) "
                "or shared prefixes (distinct_prefixes, prefix_tokens, prefix_fraction)",
                field="prefix_reuse",
            )
        if self.system_prompt_tokens and not 0.0 < self.system_prompt_fraction <= 1.0:
            raise PlannerInputError(
                f"system_prompt_fraction must be in (0, 1], got {self.system_prompt_fraction}", field="system_prompt_fraction"
            )
        if self.distinct_prefixes:
            if self.prefix_tokens < BLOCK_TOKENS:
                raise PlannerInputError(
                    f"prefix_tokens must be >= {BLOCK_TOKENS} (one KV block), got {self.prefix_tokens}", field="prefix_tokens"
                )
            if not 0.0 < self.prefix_fraction <= 1.0:
                raise PlannerInputError(f"prefix_fraction must be in (0, 1], got {self.prefix_fraction}", field="prefix_fraction")
            if not (0.0 <= self.zipf_exponent <= 10.0 and math.isfinite(self.zipf_exponent)):
                raise PlannerInputError(f"zipf_exponent must be in [0, 10], got {self.zipf_exponent}", field="zipf_exponent")
        if self.system_prompt_tokens and self.system_prompt_tokens < BLOCK_TOKENS:
            raise PlannerInputError(
                f"system_prompt_tokens must be >= {BLOCK_TOKENS} (one KV block), got {self.system_prompt_tokens}",
                field="system_prompt_tokens",
            )

    @property
    def measured(self) -> bool:
        return self.hit_rate is not None

    def popularity(self) -> np.ndarray:
        """The distinct prefixes' request probabilities, most popular first: k^(−s) / Σ_j j^(−s)."""
        ranks = np.arange(1, self.distinct_prefixes + 1, dtype=float)
        weights = ranks ** (-self.zipf_exponent)
        return np.asarray(weights / weights.sum())

    def working_set_tokens(self, routing: Routing = "random", replicas: int = 1, arrival_rate_rps: float | None = None) -> int:
        """Tokens one replica must cache to hold every prefix it sees: the system prompt plus its share of the others.
        With sessions: the histories of the sessions in progress on it, λ_r·τ·Σ_{j<T} s_j (each history kept
        through the think time after its turn, none after the last), which needs the request rate."""
        if self.sessions is not None:
            sessions = self.sessions
            rate = _session_rate_per_replica(sessions, arrival_rate_rps, replicas)
            live = float(sessions.history_tokens()[:-1].sum())
            return cacheable_tokens(rate * sessions.think_time_s * live)
        system = cacheable_tokens(self.system_prompt_tokens) if self.system_prompt_tokens else 0
        share = self.distinct_prefixes if routing == "random" else math.ceil(self.distinct_prefixes / replicas)
        return system + share * cacheable_tokens(self.prefix_tokens)


def che_hit_probabilities(probabilities: np.ndarray, sizes: np.ndarray, cache_tokens: float) -> np.ndarray:
    """h_i = 1 − exp(−p_i·T), T solving Σ s_i (1 − exp(−p_i·T)) = C; all 1 when everything fits, all 0 without
    a cache, 0 for an item larger than the cache (the others then share it)."""
    p = np.asarray(probabilities, dtype=float)
    s = np.asarray(sizes, dtype=float)
    if cache_tokens <= 0 or p.size == 0:
        return np.zeros(p.shape)
    fits = s <= cache_tokens  # an item larger than the whole cache is never kept
    if not fits.all():
        hits = np.zeros(p.shape)
        hits[fits] = che_hit_probabilities(p[fits], s[fits], cache_tokens)
        return hits
    if s.sum() <= cache_tokens:
        return np.ones(p.shape)  # the whole working set fits: every reference after the first hits

    def filled(log_t: float) -> float:
        return float(np.dot(s, -np.expm1(-p * math.exp(log_t)))) - cache_tokens  # Σ s_i(1 − e^{−p_i T}) − C

    lo, hi = -60.0, 0.0  # T = e^−60: nothing cached yet (filled ≈ −C)
    while filled(hi) < 0.0:  # grow T until the cache overflows (it does: Σ s_i > C)
        lo, hi = hi, hi + 5.0
    log_t = brentq(filled, lo, hi, xtol=1e-12)
    return np.asarray(-np.expm1(-p * math.exp(log_t)))


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixHits:
    """What one replica's cache of `cache_tokens` saves under a routing (averaged over replicas)."""

    routing: Routing
    cache_tokens: int
    #: Fraction of the requests carrying a shared prefix whose prefix was found (request-weighted).
    hit_rate: float
    #: Mean cached (skipped) prompt tokens per request, over all requests.
    cached_tokens_per_request: float
    #: Of the requests: (fraction, cached tokens) pairs, the rest cache nothing (the planner's length mixture).
    classes: tuple[tuple[float, int], ...]


def _session_rate_per_replica(sessions: Sessions, arrival_rate_rps: float | None, replicas: int) -> float:
    """λ/(T·R): the sessions per second one replica serves (under either routing, by symmetry)."""
    if arrival_rate_rps is None:
        raise PlannerInputError("a session cache model needs the request rate (sessions start at λ / turns)", field="sessions")
    return sessions.session_rate_rps(arrival_rate_rps) / max(replicas, 1)


def session_hits(
    reuse: PrefixReuse, cache_tokens: int, routing: Routing, replicas: int, arrival_rate_rps: float | None
) -> PrefixHits:
    """The session model's hits (module docstring): turn j ≥ 2 finds its (j − 1)·u history with h = q(1 − e^{−T_c/τ})."""
    sessions = reuse.sessions
    assert sessions is not None
    rate = _session_rate_per_replica(sessions, arrival_rate_rps, replicas)
    keep = session_keep_probability(routing, replicas)
    characteristic = session_characteristic_time(sessions, rate, keep, cache_tokens)
    hit = keep * -math.expm1(-characteristic / sessions.think_time_s)
    sizes = sessions.history_tokens()
    turns = sessions.turns
    classes = tuple((hit / turns, int(size)) for size in sizes[:-1] if hit > 0.0)  # turn j + 1 finds s_j
    return PrefixHits(
        routing=routing,
        cache_tokens=int(cache_tokens),
        hit_rate=hit,
        cached_tokens_per_request=sum(f * t for f, t in classes),
        classes=classes,
    )


def prefix_hits(
    reuse: PrefixReuse, cache_tokens: int, routing: Routing, replicas: int, *, arrival_rate_rps: float | None = None
) -> PrefixHits:
    """The Che hit rates of the system prompt and the distinct prefixes in one replica's cache of `cache_tokens`.

    The system prompt and the distinct prefixes compete for the same LRU: one item of size S at
    probability f_s, N items of size L at f_p · q_k (q the Zipf popularity of the prefixes this replica
    sees, renormalised to its own stream). Under prefix-aware routing replica r sees the prefixes ranked
    r, r+R, …; the replicas' hit rates are averaged weighted by the requests each receives.
    With sessions the model is `session_hits`'s, which needs the deployment's `arrival_rate_rps`.
    """
    if reuse.measured:
        raise PlannerInputError("a measured hit rate has no cache model to evaluate", field="hit_rate")
    if reuse.sessions is not None:
        return session_hits(reuse, cache_tokens, routing, replicas, arrival_rate_rps)
    system = cacheable_tokens(reuse.system_prompt_tokens) if reuse.system_prompt_tokens else 0
    block = cacheable_tokens(reuse.prefix_tokens)
    popularity = reuse.popularity()
    shards = 1 if routing == "random" or reuse.distinct_prefixes == 0 else min(replicas, reuse.distinct_prefixes)
    system_hits = 0.0
    prefix_hit_mass = 0.0
    for shard in range(shards):
        share = popularity[shard::shards]  # this replica's prefixes, as fractions of all prefix requests
        # its own stream: system-prompt requests arrive at f_s / R of the total under either routing, prefixes at f_p·mass
        stream = np.concatenate(([reuse.system_prompt_fraction / shards] if system else [], reuse.prefix_fraction * share))
        sizes = np.concatenate(([system] if system else [], np.full(share.size, block)))
        hits = che_hit_probabilities(stream / stream.sum(), sizes, cache_tokens)
        if system:
            system_hits += float(hits[0]) / shards
            hits = hits[1:]
        prefix_hit_mass += float(np.dot(share, hits))  # Σ q_k h_k over this shard
    carried = reuse.system_prompt_fraction * (1 if system else 0) + reuse.prefix_fraction * (1 if block else 0)
    hit_requests = reuse.system_prompt_fraction * system_hits + reuse.prefix_fraction * prefix_hit_mass
    classes = tuple(
        (fraction, tokens)
        for fraction, tokens in (
            (reuse.system_prompt_fraction * system_hits, system),
            (reuse.prefix_fraction * prefix_hit_mass, block),
        )
        if fraction > 0.0 and tokens > 0
    )
    return PrefixHits(
        routing=routing,
        cache_tokens=int(cache_tokens),
        hit_rate=hit_requests / carried if carried > 0 else 0.0,
        cached_tokens_per_request=sum(f * t for f, t in classes),
        classes=classes,
    )


class BlockLru:
    """An LRU cache of prefixes measured in tokens, each prefix one item of its block-rounded size
    (the simulator's per-replica cache; see the module docstring for why a prefix is one item)."""

    __slots__ = ("_items", "capacity_tokens", "used_tokens")

    def __init__(self, capacity_tokens: int) -> None:
        self.capacity_tokens = capacity_tokens
        self.used_tokens = 0
        self._items: dict[int, int] = {}  # prefix id -> tokens, least recently used first (insertion order)

    def access(self, prefix: int, tokens: int) -> int:
        """Reference `prefix` of `tokens` cacheable tokens; the tokens found cached (0 on a miss)."""
        items = self._items
        found = items.pop(prefix, None)
        if found is not None:
            items[prefix] = found  # most recently used now
            return found
        if tokens > self.capacity_tokens or tokens <= 0:
            return 0
        while self.used_tokens + tokens > self.capacity_tokens:
            victim = next(iter(items))
            self.used_tokens -= items.pop(victim)
        items[prefix] = tokens
        self.used_tokens += tokens
        return 0

    def lookup(self, prefix: int) -> int:
        """The tokens cached for `prefix` (0 when absent), made most recently used."""
        found = self._items.pop(prefix, None)
        if found is None:
            return 0
        self._items[prefix] = found
        return found

    def put(self, prefix: int, tokens: int) -> None:
        """Cache `prefix` at `tokens` (a session's history grown by a turn), most recently used, evicting the
        least recently used others; a prefix larger than the cache is dropped."""
        items = self._items
        old = items.pop(prefix, None)
        if old is not None:
            self.used_tokens -= old
        if tokens > self.capacity_tokens or tokens <= 0:
            return
        while self.used_tokens + tokens > self.capacity_tokens:
            victim = next(iter(items))
            self.used_tokens -= items.pop(victim)
        items[prefix] = tokens
        self.used_tokens += tokens
