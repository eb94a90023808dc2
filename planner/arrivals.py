"""Request streams for the simulator: a replayable `Trace` (arrival times with prompt and output
lengths), sampling one from a `Workload`, and the static routers (random split, round-robin).

Join-shortest-queue depends on the replicas' state at each arrival, so the simulator routes it
itself; the two state-free routers are decided here, up front, from the seeded generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.errors import PlannerInputError
from planner.workload import Router, Workload


@dataclass(frozen=True, slots=True, kw_only=True, eq=False)
class Trace:
    """Requests in arrival order: `arrival_s[i]` (s, non-decreasing), `prompt_tokens[i]`, `output_tokens[i]` (>= 1)."""

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray

    def __post_init__(self) -> None:
        arrival = np.asarray(self.arrival_s, dtype=np.float64)
        prompt = np.asarray(self.prompt_tokens)
        output = np.asarray(self.output_tokens)
        if arrival.ndim != 1 or arrival.size == 0 or prompt.shape != arrival.shape or output.shape != arrival.shape:
            raise PlannerInputError("a trace needs one arrival time, prompt length and output length per request, at least one")
        if not np.all(np.isfinite(arrival)) or arrival[0] < 0 or np.any(np.diff(arrival) < 0):
            raise PlannerInputError("trace arrival times must be finite, >= 0 and non-decreasing")
        for name, lengths in (("prompt", prompt), ("output", output)):
            if not np.issubdtype(lengths.dtype, np.integer) and not np.all(np.equal(np.mod(lengths, 1), 0)):
                raise PlannerInputError(f"trace {name} lengths must be whole token counts")
            if np.min(lengths) < 1:
                raise PlannerInputError(f"trace {name} lengths must be >= 1 token")
        object.__setattr__(self, "arrival_s", arrival)
        object.__setattr__(self, "prompt_tokens", prompt.astype(np.int64))
        object.__setattr__(self, "output_tokens", output.astype(np.int64))

    def __len__(self) -> int:
        return int(self.arrival_s.size)


def sample_trace(workload: Workload, requests: int, rng: np.random.Generator) -> Trace:
    """`requests` arrivals of `workload`: gamma inter-arrival times with mean 1/λ and CV c
    (shape 1/c², scale c²/λ; c = 1 is the exponential, i.e. Poisson arrivals), then prompt
    lengths, then output lengths, all drawn from `rng` in that order."""
    if requests < 1:
        raise PlannerInputError(f"a simulation needs at least one request, got {requests}")
    if not workload.arrival_rate_rps > 0:
        raise PlannerInputError("a simulation needs a positive arrival rate (or a trace)")
    shape = 1.0 / workload.arrival_cv**2  # k = 1/c²
    scale = workload.arrival_cv**2 / workload.arrival_rate_rps  # θ = c²/λ, so k·θ = 1/λ
    gaps_s = rng.gamma(shape, scale, requests)
    if not math.isfinite(float(gaps_s.sum())):
        raise PlannerInputError("arrival times overflow; the arrival rate is too small for this many requests")
    return Trace(
        arrival_s=np.cumsum(gaps_s),
        prompt_tokens=workload.prompt_tokens.sample(rng, requests),
        output_tokens=workload.output_tokens.sample(rng, requests),
    )


def static_routes(router: Router, replicas: int, requests: int, rng: np.random.Generator) -> np.ndarray:
    """Replica index per request for the routers that ignore replica state.

    random: each request independently uniform over replicas (each replica then sees a thinned,
    rate λ/replicas, stream — Poisson if the input is); round_robin: request i → i mod replicas.
    """
    if router == "random":
        return rng.integers(0, replicas, requests)
    if router == "round_robin":
        return np.arange(requests, dtype=np.int64) % replicas
    raise PlannerInputError(f"router {router!r} depends on replica state; the simulator routes it")
