"""Textbook queueing closed forms: M/M/1, M/M/c (Erlang C), M/G/1 (Pollaczek–Khinchine), G/G/c (Kingman, Allen–Cunneen).

These are the building blocks the replica model in `planner/queueing.py` is checked against and
the formulas a capacity engineer can redo by hand. Rates are per second, times in seconds.
Every function raises `UnstableLoadError` when the offered load is at or above capacity
(ρ ≥ 1) and `PlannerInputError` for nonsensical input.

References: Kleinrock, *Queueing Systems* vol. 1 (1975) §3.2 (M/M/1), §3.5 (M/M/c, Erlang C),
§5.6 (Pollaczek–Khinchine); Kingman (1961) "The single server queue in heavy traffic";
Allen, *Probability, Statistics and Queueing Theory* (1990) §6 (Allen–Cunneen G/G/c).
"""

from __future__ import annotations

import math

from planner.errors import PlannerInputError, UnstableLoadError


def _check_rates(arrival_rate_rps: float, service_s: float) -> None:
    if not (arrival_rate_rps >= 0 and math.isfinite(arrival_rate_rps)):
        raise PlannerInputError(f"arrival rate must be finite and >= 0, got {arrival_rate_rps}")
    if not (service_s > 0 and math.isfinite(service_s)):
        raise PlannerInputError(f"service time must be finite and > 0, got {service_s}")


def _check_quantile(q: float) -> None:
    if not 0.0 < q < 1.0:
        raise PlannerInputError(f"quantile must be in (0, 1), got {q}")


def _stable(rho: float, what: str) -> None:
    if rho >= 1.0:
        raise UnstableLoadError(f"{what}: utilisation ρ = {rho:.4f} ≥ 1, the queue grows without bound", rho=rho)


def utilisation(arrival_rate_rps: float, service_s: float, servers: int = 1) -> float:
    """ρ = λ·E[S] / c."""
    _check_rates(arrival_rate_rps, service_s)
    if servers < 1:
        raise PlannerInputError(f"servers must be >= 1, got {servers}")
    return arrival_rate_rps * service_s / servers  # λ·S / c


# --- M/M/1 -------------------------------------------------------------------------------------


def mm1_mean_wait_s(arrival_rate_rps: float, service_s: float) -> float:
    """Mean time in queue of M/M/1: W_q = S·ρ/(1−ρ) (docs/design.md: 1, 4, 9, 19, 99 × S at ρ = .5 … .99)."""
    rho = utilisation(arrival_rate_rps, service_s)
    _stable(rho, "M/M/1")
    return service_s * rho / (1.0 - rho)  # S · ρ/(1−ρ)


def mm1_wait_exceedance(arrival_rate_rps: float, service_s: float, wait_s: float) -> float:
    """P(W_q > t) = ρ·e^{−(μ−λ)t} for M/M/1 FCFS."""
    rho = utilisation(arrival_rate_rps, service_s)
    _stable(rho, "M/M/1")
    if wait_s < 0:
        return 1.0
    return rho * math.exp(-(1.0 / service_s - arrival_rate_rps) * wait_s)  # ρ·exp(−(μ−λ)·t)


def mm1_wait_quantile_s(arrival_rate_rps: float, service_s: float, q: float) -> float:
    """The q-quantile of the M/M/1 waiting time: 0 when ρ ≤ 1−q, else ln(ρ/(1−q))/(μ−λ)."""
    _check_quantile(q)
    rho = utilisation(arrival_rate_rps, service_s)
    _stable(rho, "M/M/1")
    if rho <= 1.0 - q:
        return 0.0
    return math.log(rho / (1.0 - q)) / (1.0 / service_s - arrival_rate_rps)  # invert ρ·e^{−(μ−λ)t} = 1−q


# --- M/M/c (Erlang C) --------------------------------------------------------------------------


def erlang_b(servers: int, offered_load: float) -> float:
    """Erlang B blocking probability by the stable recursion B_k = a·B_{k−1} / (k + a·B_{k−1})."""
    if servers < 0:
        raise PlannerInputError(f"servers must be >= 0, got {servers}")
    if not (offered_load >= 0 and math.isfinite(offered_load)):
        raise PlannerInputError(f"offered load must be finite and >= 0, got {offered_load}")
    blocking = 1.0
    for k in range(1, servers + 1):
        blocking = offered_load * blocking / (k + offered_load * blocking)  # B_k from B_{k−1}
    return blocking


def erlang_c(servers: int, offered_load: float) -> float:
    """Probability an arrival waits in M/M/c: C = c·B / (c − a·(1 − B)), a = λ·S Erlangs."""
    if servers < 1:
        raise PlannerInputError(f"servers must be >= 1, got {servers}")
    _stable(offered_load / servers, "M/M/c")
    blocking = erlang_b(servers, offered_load)
    return servers * blocking / (servers - offered_load * (1.0 - blocking))  # Erlang C from Erlang B


def mmc_mean_wait_s(servers: int, arrival_rate_rps: float, service_s: float) -> float:
    """Mean time in queue of M/M/c: W_q = C(c, a) / (c·μ − λ)."""
    _check_rates(arrival_rate_rps, service_s)
    p_wait = erlang_c(servers, arrival_rate_rps * service_s)
    return p_wait / (servers / service_s - arrival_rate_rps)  # C / (cμ − λ)


def mmc_wait_quantile_s(servers: int, arrival_rate_rps: float, service_s: float, q: float) -> float:
    """q-quantile of the M/M/c wait: P(W > t) = C·e^{−(cμ−λ)t} ⇒ t = ln(C/(1−q))/(cμ−λ), 0 if C ≤ 1−q."""
    _check_quantile(q)
    _check_rates(arrival_rate_rps, service_s)
    p_wait = erlang_c(servers, arrival_rate_rps * service_s)
    if p_wait <= 1.0 - q:
        return 0.0
    return math.log(p_wait / (1.0 - q)) / (servers / service_s - arrival_rate_rps)  # invert C·e^{−(cμ−λ)t}


# --- M/G/1 and G/G/c ---------------------------------------------------------------------------


def mg1_mean_wait_s(arrival_rate_rps: float, service_mean_s: float, service_second_moment_s2: float) -> float:
    """Pollaczek–Khinchine: W_q = λ·E[S²] / (2(1−ρ))."""
    rho = utilisation(arrival_rate_rps, service_mean_s)
    if service_second_moment_s2 < service_mean_s**2 * (1.0 - 1e-12):
        raise PlannerInputError("E[S²] must be at least E[S]²")
    _stable(rho, "M/G/1")
    return arrival_rate_rps * service_second_moment_s2 / (2.0 * (1.0 - rho))  # λ·E[S²] / 2(1−ρ)


def kingman_mean_wait_s(arrival_rate_rps: float, service_s: float, arrival_cv: float, service_cv: float) -> float:
    """Kingman's G/G/1 approximation: W_q ≈ S·ρ/(1−ρ)·(c_a² + c_s²)/2 (exact for M/M/1 and M/G/1 means)."""
    rho = utilisation(arrival_rate_rps, service_s)
    _stable(rho, "G/G/1")
    return service_s * rho / (1.0 - rho) * (arrival_cv**2 + service_cv**2) / 2.0  # M/M/1 wait × variability factor


def allen_cunneen_mean_wait_s(
    servers: int, arrival_rate_rps: float, service_s: float, arrival_cv: float, service_cv: float
) -> float:
    """Allen–Cunneen's G/G/c approximation: W_q ≈ W_q(M/M/c)·(c_a² + c_s²)/2."""
    return mmc_mean_wait_s(servers, arrival_rate_rps, service_s) * (arrival_cv**2 + service_cv**2) / 2.0  # Erlang C × variability
