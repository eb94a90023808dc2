"""Multi-turn sessions in prefix_reuse (planner/prefix_cache.py `Sessions`): the characteristic-time
model by hand, against the simulator's LRU over session streams, and a plan that caches them."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import gamma

from planner.errors import PlannerInputError
from planner.optimizer import PlanConstraints
from planner.planning import PlanningRequest, plan_capacity
from planner.prefix_cache import (
    BlockLru,
    PrefixReuse,
    Sessions,
    prefix_hits,
    session_characteristic_time,
    session_occupancy_tokens,
)
from planner.simulator_prefix import session_burn_in_s, session_cached_tokens, session_turns
from planner.workload import LognormalLength, Slo, Workload
from tests.planner.test_planning import GRID, INPUTS

TWO_TURNS = PrefixReuse(sessions=Sessions(turns=2, turn_tokens=160, think_time_s=10.0))


def test_two_turn_sessions_by_hand():
    """T = 2, u = 160 (s_1 = 160, s_2 = 320), τ = 10 s, 2 req/s on one replica: 1 session/s. With T_c = τ·ln 2
    the cache holds 1·[160·τ(1 − ½) + 320·τ ln 2] = 800 + 3200 ln 2 = 3,018.07 tokens and a second turn
    finds its 160-token history with h = 1 − e^{−ln 2} = ½: a cache of 3,018 tokens gives h = 0.5 (±1e-4:
    dC/dT_c = 400 tokens/s), half of the requests being second turns."""
    hits = prefix_hits(TWO_TURNS, 3018, "prefix_aware", 1, arrival_rate_rps=2.0)
    assert hits.hit_rate == pytest.approx(0.5, abs=1e-4)
    assert len(hits.classes) == 1
    fraction, tokens = hits.classes[0]
    assert tokens == 160 and fraction == pytest.approx(0.25, abs=1e-4)
    assert hits.cached_tokens_per_request == pytest.approx(40.0, abs=0.02)
    sessions = TWO_TURNS.sessions
    assert session_occupancy_tokens(sessions, 1.0, 1.0, 10 * math.log(2)) == pytest.approx(800 + 3200 * math.log(2))
    assert session_characteristic_time(sessions, 1.0, 1.0, 800 + 3200 * math.log(2)) == pytest.approx(10 * math.log(2))


def test_random_routing_over_two_replicas_by_hand():
    """The same sessions over R = 2 replicas at 4 req/s (1 session/s per replica) under random routing: q = ½,
    so the history after turn 1 is held ½·τ(1 − e^{−T_c/τ}) + ½·T_c and after turn 2 T_c; with T_c = τ ln 2:
    160·(½·5 + ½·10 ln 2) + 320·10 ln 2 = 400 + 4000 ln 2 = 3,172.59 tokens, and h = ½ · ½ = ¼."""
    cache = 400 + 4000 * math.log(2)
    hits = prefix_hits(TWO_TURNS, math.floor(cache), "random", 2, arrival_rate_rps=4.0)
    assert hits.hit_rate == pytest.approx(0.25, abs=1e-4)
    sticky = prefix_hits(TWO_TURNS, math.floor(cache), "prefix_aware", 2, arrival_rate_rps=4.0)
    assert sticky.hit_rate > 0.5  # the same cache holds no dead copies under session-sticky routing


def test_working_set_and_concurrent_sessions_by_hand():
    """T = 4, u = 320, τ = 30 s at 8 req/s over 2 replicas: 1 session/s per replica, each history s_j = 320 j held
    through one think time after turns 1–3: 30 · (320 + 640 + 960) = 57,600 tokens; over the deployment 8/4 = 2
    sessions start per second and each lasts 3 think times: 2 · 3 · 30 = 180 sessions in progress."""
    reuse = PrefixReuse(sessions=Sessions(turns=4, turn_tokens=320, think_time_s=30.0))
    assert reuse.working_set_tokens("prefix_aware", 2, arrival_rate_rps=8.0) == 57_600
    assert reuse.sessions.concurrent_sessions(8.0) == pytest.approx(180.0)
    with pytest.raises(PlannerInputError, match="request rate"):
        reuse.working_set_tokens("prefix_aware", 2)


def test_more_cache_and_shorter_think_times_find_more():
    reuse = PrefixReuse(sessions=Sessions(turns=6, turn_tokens=400, think_time_s=30.0))
    rates = [prefix_hits(reuse, c, "prefix_aware", 1, arrival_rate_rps=5.0).hit_rate for c in (0, 20_000, 80_000, 320_000)]
    assert rates[0] == 0.0 and rates == sorted(rates) and rates[-1] < 1.0
    quicker = PrefixReuse(sessions=Sessions(turns=6, turn_tokens=400, think_time_s=5.0))
    assert prefix_hits(quicker, 80_000, "prefix_aware", 1, arrival_rate_rps=5.0).hit_rate > rates[2]


def _simulated_hit_rate(reuse: PrefixReuse, cache: int, routing, replicas: int, rate: float, turns: int = 40_000) -> float:
    rng = np.random.default_rng(7)
    stream = session_turns(reuse.sessions, rate, routing, replicas, turns, rng)
    found = session_cached_tokens(reuse.sessions, stream, np.full(turns, 10_000), cache)
    warm = turns // 10
    carrying = stream.turn[warm:] > 1
    return float(np.mean(found[warm:][carrying] > 0))


@pytest.mark.parametrize(("replicas", "fraction"), [(1, 0.25), (1, 1.0), (4, 0.5)])
def test_analytic_hit_rate_matches_the_simulated_lru_under_sticky_routing(replicas: int, fraction: float):
    """6-turn sessions of 320 tokens a turn, 20 s think time, 8 req/s: the characteristic-time hit rate within
    0.03 of replica 0's LRU fed 40,000 simulated turns (measured: within 0.02 at these points, the gap growing
    as fewer sessions share a replica's cache)."""
    reuse = PrefixReuse(sessions=Sessions(turns=6, turn_tokens=320, think_time_s=20.0))
    cache = int(fraction * reuse.working_set_tokens("prefix_aware", replicas, arrival_rate_rps=8.0)) // 16 * 16
    analytic = prefix_hits(reuse, cache, "prefix_aware", replicas, arrival_rate_rps=8.0).hit_rate
    simulated = _simulated_hit_rate(reuse, cache, "prefix_aware", replicas, 8.0)
    assert 0.1 < analytic < 0.9
    assert simulated == pytest.approx(analytic, abs=0.03)


def test_random_routing_understates_what_an_engine_finds():
    """Under random routing the model counts only a hit on the previous turn's replica; the simulator's LRU
    also finds an older history where the session was served before, so it finds at least as much (within noise)."""
    reuse = PrefixReuse(sessions=Sessions(turns=6, turn_tokens=320, think_time_s=20.0))
    cache = reuse.working_set_tokens("random", 4, arrival_rate_rps=8.0) // 16 * 16
    analytic = prefix_hits(reuse, cache, "random", 4, arrival_rate_rps=8.0).hit_rate
    simulated = _simulated_hit_rate(reuse, cache, "random", 4, 8.0)
    assert analytic < 0.25  # q = 1/4 bounds it
    assert simulated >= analytic - 0.01


def test_session_streams_follow_the_rate_and_the_turns():
    """Replica 0 of 4 at 8 req/s receives 2 turns/s; every session's turns arrive in order, 1..T, under sticky
    routing, those of a session started before the first simulated turn beginning in the burn-in."""
    sessions = Sessions(turns=5, turn_tokens=64, think_time_s=10.0)
    stream = session_turns(sessions, 8.0, "prefix_aware", 4, 20_000, np.random.default_rng(3))
    assert np.all(np.diff(stream.arrival_s) >= 0) and stream.arrival_s[0] >= 0.0
    rate = stream.arrival_s.size / (stream.arrival_s[-1] - stream.arrival_s[0])
    assert rate == pytest.approx(2.0, rel=0.05)
    # the burn-in is 2·L, L the 99.99th percentile of Gamma(4, 10 s) (about 110 s): about 2 · 110 · 2 = 440 turns before
    assert session_burn_in_s(sessions) == pytest.approx(2 * gamma.ppf(0.9999, 4, scale=10.0))
    assert stream.burn_turn.size == pytest.approx(2.0 * session_burn_in_s(sessions), rel=0.15)
    sessions_ids = np.concatenate((stream.burn_session, stream.session))
    turns = np.concatenate((stream.burn_turn, stream.turn))
    late = np.unique(stream.session)[100:300]  # sessions started after the burn-in
    started_before = np.unique(stream.burn_session)[:200]
    for session in np.concatenate((late, started_before)):
        seen = turns[sessions_ids == session]
        assert list(seen) == list(range(1, seen.size + 1))


def test_the_session_stream_starts_in_steady_state():
    """Replica 0 of 3 of the long-session chat (8 turns of 1,000 tokens, 10 s apart, 40 req/s), its cache the
    per-replica working set (466,128 tokens): the first 1,000 turns simulated (75 s, about one session's
    lifetime) find the model's 0.677 within 0.04 (eight seeds pooled; measured 0.66). Started empty, the
    stream's first minute found every history (the cache not yet full) and these turns read 0.88."""
    reuse = PrefixReuse(sessions=Sessions(turns=8, turn_tokens=1000, think_time_s=10.0))
    cache = reuse.working_set_tokens("prefix_aware", 3, arrival_rate_rps=40.0) // 16 * 16
    analytic = prefix_hits(reuse, cache, "prefix_aware", 3, arrival_rate_rps=40.0).hit_rate
    hits = []
    for seed in range(8):
        stream = session_turns(reuse.sessions, 40.0, "prefix_aware", 3, 1_000, np.random.default_rng(seed))
        found = session_cached_tokens(reuse.sessions, stream, np.full(1_000, 10_000), cache)
        hits.extend(found[stream.turn > 1] > 0)
    assert analytic == pytest.approx(0.677, abs=0.001)
    assert float(np.mean(hits)) == pytest.approx(analytic, abs=0.04)


def test_lru_put_grows_a_history_and_evicts_the_oldest():
    lru = BlockLru(100)
    lru.put(1, 32)
    lru.put(2, 48)
    assert lru.lookup(1) == 32  # 1 is now the most recent
    lru.put(2, 64)  # 2 grows: 32 + 64 fits
    assert lru.used_tokens == 96
    lru.put(3, 16)  # evicts 1, the least recently used
    assert lru.lookup(1) == 0 and lru.lookup(2) == 64 and lru.lookup(3) == 16
    lru.put(4, 200)  # larger than the cache: not kept
    assert lru.lookup(4) == 0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"turns": 1, "turn_tokens": 100, "think_time_s": 5.0}, "turns"),
        ({"turns": 3, "turn_tokens": 8, "think_time_s": 5.0}, "turn_tokens"),
        ({"turns": 3, "turn_tokens": 100, "think_time_s": 0.0}, "think_time_s"),
    ],
)
def test_bad_sessions_are_refused(kwargs, field):
    with pytest.raises(PlannerInputError) as raised:
        Sessions(**kwargs)
    assert raised.value.extensions["field"] == field


def test_sessions_are_taken_alone():
    with pytest.raises(PlannerInputError, match="sessions alone"):
        PrefixReuse(
            sessions=Sessions(turns=3, turn_tokens=100, think_time_s=5.0), system_prompt_tokens=512, system_prompt_fraction=1.0
        )


#: Long chat sessions: 8 turns adding 1,000 tokens each, prompts carrying the history (4,000 mean), short
#: answers, 10 s between turns, 40 req/s: prefill-bound, so a cache of histories saves replicas.
SESSION_CHAT = Workload(
    arrival_rate_rps=40.0,
    prompt_tokens=LognormalLength(mean_tokens=4000, p99_tokens=10_000),
    output_tokens=LognormalLength(mean_tokens=80, p99_tokens=320),
    prefix_reuse=PrefixReuse(sessions=Sessions(turns=8, turn_tokens=1000, think_time_s=10.0)),
)


def test_a_session_plan_caches_histories_and_the_simulator_agrees():
    """The plan with sessions deploys a cache cheaper than the plan without, its hit rate the session model's
    at the plan's rate and replicas, and the simulator (session streams through replica 0's LRU) finds a hit
    rate within 0.05 of it and meets the SLOs."""
    slo = Slo(ttft_s=1.0, tpot_s=0.06)
    request = PlanningRequest(workload=SESSION_CHAT, slo=slo, constraints=PlanConstraints(speculative="off"), verify=True, **GRID)
    cached = plan_capacity(request, INPUTS)
    choice = cached.prefix_caching
    assert choice is not None
    section = cached.justification.prefix_caching
    assert cached.cost_usd_per_hour < section.cost_usd_per_hour_without
    routing = "prefix_aware" if cached.row.replicas > 1 else "random"
    assert choice.routing == routing
    expected = prefix_hits(SESSION_CHAT.prefix_reuse, choice.cache_tokens, routing, cached.row.replicas, arrival_rate_rps=40.0)
    assert choice.hit_rate == pytest.approx(expected.hit_rate)
    assert cached.verification is not None and cached.verification.meets_slo
    assert section.simulated_hit_rate == pytest.approx(choice.hit_rate, abs=0.05)
