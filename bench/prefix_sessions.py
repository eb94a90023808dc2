"""Multi-turn sessions: the planner's characteristic-time hit rate against the simulator's LRU
(docs/prefix-caching.md, "Sessions: the model against the simulated LRU").

6-turn sessions adding 320 tokens a turn, 20 s mean think time, 8 req/s; caches of ¼, ½ and all of
the per-replica working set; session-sticky routing over 1 and 4 replicas and random routing over 4.
The simulated rate is replica 0's LRU fed 40,000 session turns (`session_turns`, 10 % warm-up, seed
1, 10,000-token prompts so no history is capped): the fraction of second and later turns that find
their session's history. Nothing is fitted.

    .venv/bin/python -m bench.prefix_sessions
"""

from __future__ import annotations

import numpy as np

from planner.prefix_cache import PrefixReuse, Routing, Sessions, prefix_hits
from planner.simulator_prefix import session_cached_tokens, session_turns

REUSE = PrefixReuse(sessions=Sessions(turns=6, turn_tokens=320, think_time_s=20.0))
RATE_RPS = 8.0
TURNS = 40_000
FRACTIONS = (0.25, 0.5, 1.0)
SETTINGS: tuple[tuple[Routing, int, str], ...] = (
    ("prefix_aware", 1, "session-sticky, 1"),
    ("prefix_aware", 4, "session-sticky, 4"),
    ("random", 4, "random, 4"),
)


def simulated_hit_rate(routing: Routing, replicas: int, cache_tokens: int, seed: int = 1) -> float:
    sessions = REUSE.sessions
    assert sessions is not None
    stream = session_turns(sessions, RATE_RPS, routing, replicas, TURNS, np.random.default_rng(seed))
    found = session_cached_tokens(sessions, stream, np.full(TURNS, 10_000), cache_tokens)
    warm = TURNS // 10
    carrying = stream.turn[warm:] > 1
    return float(np.mean(found[warm:][carrying] > 0))


def main() -> None:
    print("| routing, R | " + " | ".join(f"{f:g} of the working set" for f in FRACTIONS) + " |")
    print("|---|" + "---|" * len(FRACTIONS))
    for routing, replicas, label in SETTINGS:
        working_set = REUSE.working_set_tokens(routing, replicas, arrival_rate_rps=RATE_RPS)
        cells = []
        for fraction in FRACTIONS:
            cache = int(fraction * working_set) // 16 * 16
            model = prefix_hits(REUSE, cache, routing, replicas, arrival_rate_rps=RATE_RPS).hit_rate
            cells.append(f"{model:.3f} / {simulated_hit_rate(routing, replicas, cache):.3f}")
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
