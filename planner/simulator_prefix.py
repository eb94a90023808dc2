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

With multi-turn sessions (`PrefixReuse.sessions`) the replica's stream is built from sessions
instead (`session_turns`): sessions start as a Poisson stream at λ/T, each turn follows the one
before after an exponential think time of mean τ, and each turn reaches replica 0 if its session
is pinned there (session-sticky routing: a session lands on replica 0 with probability 1/R, so
replica 0's sessions are drawn directly as the thinned Poisson stream at λ/(T·R)) or, under random
routing, independently with probability 1/R (every session drawn: R times the sessions for the
turns kept). Replica 0's LRU is referenced turn by
turn: a turn finds whatever history of its session the replica still holds (under random routing
possibly an older, shorter one: the planner's model counts only the previous turn's), then the
session's history after the turn, j·u tokens, replaces it. The turns' arrival times are the
session process's (not the workload's arrival CV); their lengths are the workload's.

The session stream starts in steady state: sessions are drawn from 2·L before the first turn
simulated, L the 99.99th percentile of a session's lifetime (T − 1 exponential think times: a
Gamma(T − 1, τ) law), and their earlier turns only reference the LRU (`SessionTurns.burn_*`). A
history's fate in an LRU depends only on the references after its own, and every session with a
turn simulated started within L of it, every session referencing the LRU since then within 2·L:
so the simulated turns find what an LRU serving the stream forever finds. Started empty instead,
the first session lifetime of turns finds every history (the cache not yet full): over a plan's
few thousand verification turns that read up to 0.07 above the steady state (tests/planner/test_prefix_sessions.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.stats import gamma

from planner.arrivals import Trace, sample_trace
from planner.errors import PlannerInputError
from planner.prefix_cache import BLOCK_TOKENS, BlockLru, PrefixReuse, Routing, Sessions, cacheable_tokens
from planner.simulator import SimulationResult, measurement_window, simulate_requests, summarise_measurements
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


#: A session outlasting this quantile of its lifetime law is missing from the stream's start (module docstring).
SESSION_LIFETIME_QUANTILE = 0.9999


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionTurns:
    """Replica 0's turns in arrival order: when, which session, which turn (1-based); `burn_session` and
    `burn_turn` the turns before the first, in order, which only bring its LRU to steady state."""

    arrival_s: np.ndarray
    session: np.ndarray
    turn: np.ndarray
    burn_session: np.ndarray
    burn_turn: np.ndarray


def session_burn_in_s(sessions: Sessions) -> float:
    """2·L: how long before the first simulated turn the sessions start (module docstring), L the
    `SESSION_LIFETIME_QUANTILE` of a session's lifetime, a sum of T − 1 exponential think times."""
    lifetime = float(gamma.ppf(SESSION_LIFETIME_QUANTILE, sessions.turns - 1, scale=sessions.think_time_s))
    return 2.0 * lifetime


def session_turns(
    sessions: Sessions, arrival_rate_rps: float, routing: Routing, replicas: int, turns: int, rng: np.random.Generator
) -> SessionTurns:
    """The first `turns` turns replica 0 receives from time 0, and the turns before them from sessions started
    since `session_burn_in_s` (see the module docstring). Sessions are drawn until the last one starts after
    replica 0's `turns`-th turn, so no session that could have sent a turn before it is missing."""
    if not arrival_rate_rps > 0:
        raise PlannerInputError("a session simulation needs a positive arrival rate")
    if turns < 1:
        raise PlannerInputError(f"a simulation needs at least one request, got {turns}")
    sticky = routing == "prefix_aware"
    # session-sticky: the sessions pinned to replica 0, a 1/R thinning of the Poisson stream, itself Poisson
    # at λ/(T·R), every turn kept; random: every session, each turn kept with probability 1/R
    rate = sessions.session_rate_rps(arrival_rate_rps) / (replicas if sticky else 1)
    per_session = sessions.turns if sticky else sessions.turns / replicas  # turns reaching replica 0 per session drawn
    burn_s = session_burn_in_s(sessions)
    count = math.ceil(1.25 * turns / per_session + rate * burn_s) + 16
    while True:
        starts = np.cumsum(rng.exponential(1.0 / rate, count)) - burn_s
        gaps = rng.exponential(sessions.think_time_s, (count, sessions.turns))
        gaps[:, 0] = 0.0
        times = starts[:, None] + np.cumsum(gaps, axis=1)
        if sticky:
            mine = np.ones(times.shape, dtype=bool)
        else:
            mine = rng.random(times.shape) < 1.0 / replicas
        kept = times[mine]
        after = np.sort(kept[kept >= 0.0])
        if after.size >= turns and after[turns - 1] <= starts[-1]:
            break
        count *= 2
    session_ids, turn_ids = np.nonzero(mine)
    order = np.argsort(kept, kind="stable")
    burn = int(np.count_nonzero(kept < 0.0))  # sorted: the turns before time 0 come first
    burned, measured = order[:burn], order[burn : burn + turns]
    return SessionTurns(
        arrival_s=kept[measured],
        session=session_ids[measured],
        turn=turn_ids[measured] + 1,
        burn_session=session_ids[burned],
        burn_turn=turn_ids[burned] + 1,
    )


def session_cached_tokens(sessions: Sessions, stream: SessionTurns, prompts: np.ndarray, cache_tokens: int) -> np.ndarray:
    """The prompt tokens each turn finds cached: its session's history on the replica (capped at the
    prompt's whole blocks short of its last token), the history then replaced by the turn's j·u. The
    burn-in turns reference the LRU first, finding nothing counted."""
    lru = BlockLru(int(cache_tokens))
    found = np.zeros(stream.session.size, dtype=np.int64)
    room = (np.maximum(prompts - 1, 0) // BLOCK_TOKENS) * BLOCK_TOKENS
    u = sessions.turn_tokens
    for session, turn in zip(stream.burn_session.tolist(), stream.burn_turn.tolist(), strict=True):
        lru.put(session, cacheable_tokens(turn * u))  # the stream before the first turn: the LRU brought to steady state
    for i, (session, turn) in enumerate(zip(stream.session.tolist(), stream.turn.tolist(), strict=True)):
        if turn > 1:
            found[i] = min(lru.lookup(session), int(room[i]))
        lru.put(session, cacheable_tokens(turn * u))
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
    elif reuse.sessions is not None:
        turns = session_turns(reuse.sessions, workload.arrival_rate_rps, routing, replicas, requests, rng)
        per_replica = workload.at_rate(workload.arrival_rate_rps / replicas)
        trace = Trace(
            arrival_s=turns.arrival_s - turns.arrival_s[0],
            prompt_tokens=workload.prompt_tokens.sample(rng, requests),
            output_tokens=workload.output_tokens.sample(rng, requests),
        )
        found = session_cached_tokens(reuse.sessions, turns, trace.prompt_tokens, cache_tokens)
        sizes = np.where(turns.turn > 1, 1, 0)  # a turn after the first carries its session's history
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
    window = measurement_window(detail, warmup_fraction)
    warm = math.floor(warmup_fraction * requests)
    carrying = sizes[warm:] > 0
    hit_rate = float(np.mean(found[warm:][carrying] > 0)) if carrying.any() else 0.0
    saved = float(found[warm:].sum() / trace.prompt_tokens[warm:].sum())
    return PrefixSimulation(
        result=summarise_measurements(detail, one, window, started),
        rate_rps=per_replica.arrival_rate_rps,
        hit_rate=hit_rate,
        prefill_tokens_saved_fraction=saved,
    )
