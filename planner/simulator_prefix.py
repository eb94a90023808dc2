"""The simulator with a prefix cache: one replica's stream of prefixes through an LRU over blocks.

What one replica sees depends on the routing (planner/prefix_cache.py): under random routing a
1/R thinning of every stream (the system prompt, each distinct prefix, the requests without one);
under prefix-aware routing the prefixes ranked r, r + R, … all go to replica r while the system
prompt and the requests without a shared prefix are spread evenly. The replica simulated is r = 0,
which under prefix-aware routing owns the most popular prefix: the busiest replica, so the check is
on the replica most likely to miss.

Each request draws its prefix from that stream independently (the independent reference model the
planner's Che approximation assumes; the simulator's LRU is exact for the stream, so the two differ
only by the approximation). The replica's `BlockLru` of `cache_tokens` is referenced in arrival
order; a hit skips the prefix's whole blocks, at most ⌊(p − 1)/16⌋·16 of a prompt of p tokens (one
token is always prefilled to produce the first output). The replica then runs as planner/simulator.py
runs any replica, the cached tokens starting each prefill part-way (`StepModel.cached_prefill_s`'s
step: no GEMMs over them, their KV read) and not counted in the sequence's own KV reservation.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from planner.arrivals import sample_trace
from planner.errors import PlannerInputError
from planner.prefix_cache import BLOCK_TOKENS, BlockLru, PrefixReuse, Routing, cacheable_tokens
from planner.simulator import SimulationResult, _measurement_window, _summarise, simulate_requests
from planner.step_model import StepModel
from planner.workload import Serving, Workload


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplicaStream:
    """What replica 0 receives: its share of all arrivals and, of its own requests, the probability of
    each prefix (index 0: none, then the system prompt if any, then its distinct prefixes) and their sizes."""

    share: float
    probabilities: np.ndarray
    tokens: np.ndarray


def replica_stream(reuse: PrefixReuse, routing: Routing, replicas: int) -> ReplicaStream:
    """Replica 0's stream of prefixes (see the module docstring)."""
    if reuse.measured:
        raise PlannerInputError("a measured hit rate has no prefixes to simulate", field="hit_rate")
    popularity = reuse.popularity()
    shards = 1 if routing == "random" or reuse.distinct_prefixes == 0 else min(replicas, reuse.distinct_prefixes)
    spread = 1.0 / replicas  # the evenly spread streams' share
    if shards == 1:
        own = reuse.prefix_fraction * popularity * spread
    else:
        own = reuse.prefix_fraction * popularity[0::shards]
    system = reuse.system_prompt_tokens > 0
    weights = np.concatenate(
        (
            [(1.0 - reuse.system_prompt_fraction - reuse.prefix_fraction) * spread],
            [reuse.system_prompt_fraction * spread] if system else [],
            own,
        )
    )
    tokens = np.concatenate(
        (
            [0],
            [cacheable_tokens(reuse.system_prompt_tokens)] if system else [],
            np.full(own.size, cacheable_tokens(reuse.prefix_tokens)),
        )
    ).astype(np.int64)
    share = float(weights.sum())
    return ReplicaStream(share=share, probabilities=np.maximum(weights, 0.0) / share, tokens=tokens)


def cached_tokens(prefixes: np.ndarray, sizes: np.ndarray, prompts: np.ndarray, cache_tokens: int) -> np.ndarray:
    """The prompt tokens each request finds cached, referencing one LRU in arrival order."""
    lru = BlockLru(int(cache_tokens))
    found = np.zeros(prefixes.size, dtype=np.int64)
    room = (np.maximum(prompts - 1, 0) // BLOCK_TOKENS) * BLOCK_TOKENS  # whole blocks short of the last prompt token
    for i, (prefix, size) in enumerate(zip(prefixes.tolist(), sizes.tolist(), strict=True)):
        if size > 0:
            found[i] = min(lru.access(prefix, size), int(room[i]))
    return found


@dataclass(frozen=True, slots=True, kw_only=True)
class PrefixSimulation:
    result: SimulationResult
    rate_rps: float  # the replica's arrival rate
    #: Of the measured requests carrying a shared prefix, the fraction that found it cached.
    hit_rate: float
    #: Of all measured prompt tokens, the fraction not prefilled.
    prefill_tokens_saved_fraction: float


def simulate_prefix_replica(
    step_model: StepModel,
    workload: Workload,
    serving: Serving,
    *,
    kv_capacity_tokens: int,
    reuse: PrefixReuse,
    cache_tokens: int,
    routing: Routing,
    replicas: int,
    requests: int = 20_000,
    seed: int = 0,
    warmup_fraction: float = 0.1,
    checkpoint: Callable[[], None] | None = None,
) -> PrefixSimulation:
    """Replica 0 of `replicas` fed its stream of `workload` (the deployment's, arrival CV already the
    replica's) with a prefix cache of `cache_tokens` beside `kv_capacity_tokens` for its sequences.
    A measured hit rate h has no prefixes: each prompt of p tokens finds ⌊h·p⌋ of them, in whole blocks."""
    started = time.perf_counter()
    rng = np.random.default_rng(seed)
    if reuse.hit_rate is not None:  # measured: every prompt finds ⌊h·p⌋ of its tokens, in whole blocks
        per_replica = workload.at_rate(workload.arrival_rate_rps / replicas)
        trace = sample_trace(per_replica, requests, rng)
        room = (np.maximum(trace.prompt_tokens - 1, 0) // BLOCK_TOKENS) * BLOCK_TOKENS
        found = np.minimum((np.floor(reuse.hit_rate * trace.prompt_tokens) // BLOCK_TOKENS) * BLOCK_TOKENS, room).astype(np.int64)
        sizes = trace.prompt_tokens
    else:
        stream = replica_stream(reuse, routing, replicas)
        per_replica = workload.at_rate(workload.arrival_rate_rps * stream.share)
        trace = sample_trace(per_replica, requests, rng)
        prefixes = rng.choice(stream.probabilities.size, size=requests, p=stream.probabilities)
        sizes = stream.tokens[prefixes]
        found = cached_tokens(prefixes, sizes, trace.prompt_tokens, cache_tokens)
    one = Serving(replicas=1, batch_limit=serving.batch_limit, chunk_tokens=serving.chunk_tokens)
    detail = simulate_requests(
        step_model,
        trace,
        one,
        kv_capacity_tokens=kv_capacity_tokens,
        seed=int(rng.integers(0, 2**63 - 1)),
        cached=found.tolist(),
        checkpoint=checkpoint,
    )
    window = _measurement_window(detail, warmup_fraction)
    warm = math.floor(warmup_fraction * requests)
    carrying = sizes[warm:] > 0
    hit_rate = float(np.mean(found[warm:][carrying] > 0)) if carrying.any() else 0.0
    saved = float(found[warm:].sum() / trace.prompt_tokens[warm:].sum())
    return PrefixSimulation(
        result=_summarise(detail, one, window, started),
        rate_rps=per_replica.arrival_rate_rps,
        hit_rate=hit_rate,
        prefill_tokens_saved_fraction=saved,
    )
