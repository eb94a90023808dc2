"""The service's settings: one frozen object, read from the environment once by the CLI or the
app factory (never at import time), so tests build apps with settings of their own.

| variable                          | field                  | default                         |
|-----------------------------------|------------------------|---------------------------------|
| HEADROOM_DATABASE_URL             | database_url           | sqlite:///./headroom.db         |
| HEADROOM_ADMIN_KEY                | admin_key              | none                            |
| HEADROOM_REQUIRE_AUTH             | require_auth           | 0 (reads need no key)           |
| HEADROOM_REQUEST_TIMEOUT_S        | request_timeout_s      | 30                              |
| HEADROOM_SOLVER_TIME_LIMIT_S      | solver_time_limit_s    | 10                              |
| HEADROOM_MAX_SIMULATED_REQUESTS   | max_simulated_requests | 200000                          |
| HEADROOM_LOG_LEVEL                | log_level              | info                            |
| HEADROOM_IDEMPOTENCY_WINDOW_S     | idempotency_window_s   | 86400 (24 h)                    |
| HEADROOM_DEFAULT_PRICE_PROVIDER   | default_price_provider | runpod                          |
| HEADROOM_MAX_BODY_BYTES           | max_body_bytes         | 1048576 (1 MiB)                 |
| HEADROOM_BROKER_URL               | broker_url             | none (embedded: in-process)     |
| HEADROOM_BROKER_NAMESPACE         | broker_namespace       | headroom                        |
| HEADROOM_BROKER_HEARTBEAT_TIMEOUT_S | broker_heartbeat_timeout_s | 60 (Dramatiq's default)   |
| HEADROOM_BROKER_MAINTENANCE_CHANCE | broker_maintenance_chance | 1000 per million (Dramatiq's) |
| HEADROOM_WORKER_THREADS           | worker_threads         | 2                               |
| HEADROOM_ASYNC_THRESHOLD_S        | async_threshold_s      | 20                              |
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from catalog.db import DEFAULT_DATABASE_URL, default_database_url
from catalog.records import SLUG_PATTERN

_N = TypeVar("_N", int, float)

#: The reference prices' provider that covers the most GPUs (catalog/data/prices.json).
DEFAULT_PRICE_PROVIDER = "runpod"
LOG_LEVELS: tuple[str, ...] = ("critical", "error", "warning", "info", "debug", "trace")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")
#: The brokers api/tasks.py can use besides the embedded one (Dramatiq's RedisBroker).
BROKER_SCHEMES = ("redis://", "rediss://", "unix://")


#: The share of a request's remaining time its solver may take. The solve is not a request's last
#: step: a plan is then verified in the simulator, explained and stored, a fleet plan rounded and
#: reported, all under the same deadline. Those steps took about 90 ms at p50 on the reference
#: plans (docs/plan-benchmark.md: 202 ms with verify against 114 ms without), so a fifth of what is
#: left (6 s of the default 30 s timeout) leaves them room with a wide margin, and a solver that
#: runs to its limit still has its plan answered rather than a 503.
SOLVER_SHARE_OF_DEADLINE = 0.8
#: The deadline never leaves the solver less than this: a MILP over a few candidates solves in
#: milliseconds, and the deadline itself still answers 503 on time (api.observability.Deadline).
MIN_SOLVER_TIME_S = 0.1


def solver_time_limit_s(configured_s: float, remaining_s: float, requested_s: float | None = None) -> float:
    """The one solver time-limit policy of every planning endpoint (plans, re-plans, what-if points,
    fleet plans): the least of the service's HEADROOM_SOLVER_TIME_LIMIT_S (`configured_s`), the
    request's remaining time × SOLVER_SHARE_OF_DEADLINE (at least MIN_SOLVER_TIME_S) and the
    request's own limit (`requested_s`, a fleet plan's body), which may only lower it."""
    from_deadline = max(remaining_s * SOLVER_SHARE_OF_DEADLINE, MIN_SOLVER_TIME_S)
    limits = [configured_s, from_deadline] + ([] if requested_s is None else [requested_s])
    return min(limits)


class SettingsError(ValueError):
    """A setting that cannot be used; the message names the variable."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Settings:
    """What one running service is configured with.

    `admin_key` (HEADROOM_ADMIN_KEY) is accepted as an admin API key besides the keys stored in
    the catalog (compared in constant time); it bootstraps the first writes on a fresh database.
    `request_timeout_s` and `solver_time_limit_s` bound the planning endpoints' work;
    `max_simulated_requests` bounds one simulation request (larger ones are a 422 problem).
    `idempotency_window_s` is how long an `Idempotency-Key` answers retries (api/idempotency.py).
    `default_price_provider` is whose prices a plan, fleet plan or what-if uses when the request
    names no `provider`: RunPod by default, the provider of the reference prices
    (catalog/data/prices.json) that covers the most GPUs (7 of 12).
    `max_body_bytes` is the largest request body the service reads; a larger one is answered 413
    before it is parsed (api/app.py `BodyGuard`).
    `broker_url` is where operations' tasks are queued (api/tasks.py, docs/operations.md): unset,
    an in-memory broker and a worker inside the API process; `redis://…` a Redis broker shared
    with `headroom worker` processes, its keys under `broker_namespace`. Redis redelivers a task a
    dead worker held once no heartbeat came from it for `broker_heartbeat_timeout_s`, checked on
    `broker_maintenance_chance` of every million broker commands. `worker_threads` is each
    worker's task threads (the embedded one's too). A what-if sweep or fleet plan estimated to take longer than
    `async_threshold_s` is answered 202 and run as an operation.
    """

    database_url: str = field(default_factory=default_database_url)
    admin_key: str | None = field(default=None, repr=False)
    require_auth: bool = False
    request_timeout_s: float = 30.0
    solver_time_limit_s: float = 10.0
    max_simulated_requests: int = 200_000
    log_level: str = "info"
    idempotency_window_s: float = 86_400.0
    default_price_provider: str = DEFAULT_PRICE_PROVIDER
    max_body_bytes: int = 1_048_576
    broker_url: str | None = None
    broker_namespace: str = "headroom"
    broker_heartbeat_timeout_s: float = 60.0
    broker_maintenance_chance: int = 1000
    worker_threads: int = 2
    async_threshold_s: float = 20.0

    def __post_init__(self) -> None:
        if not self.database_url:
            raise SettingsError("HEADROOM_DATABASE_URL must not be empty")
        if self.admin_key is not None and len(self.admin_key) < 16:
            raise SettingsError("HEADROOM_ADMIN_KEY must be at least 16 characters long")
        for name in (
            "request_timeout_s", "solver_time_limit_s", "idempotency_window_s", "broker_heartbeat_timeout_s",
            "async_threshold_s",
        ):  # fmt: skip
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise SettingsError(f"HEADROOM_{name.upper()} must be a positive number of seconds, got {value}")
        if self.max_body_bytes < 1:
            raise SettingsError(f"HEADROOM_MAX_BODY_BYTES must be >= 1, got {self.max_body_bytes}")
        if self.broker_url is not None and self.broker_url.startswith(("amqp://", "amqps://")):
            raise SettingsError(
                "HEADROOM_BROKER_URL: RabbitMQ (amqp://) is not supported: Dramatiq's RabbitmqBroker needs the pika "
                "package, which Headroom does not ship; use a redis:// URL"
            )
        if self.broker_url is not None and not self.broker_url.startswith(BROKER_SCHEMES):
            raise SettingsError(
                f"HEADROOM_BROKER_URL must be a redis:// or rediss:// URL (or unset for the embedded broker), got {self.broker_url!r}"
            )
        if not SLUG_PATTERN.fullmatch(self.broker_namespace):
            raise SettingsError(f"HEADROOM_BROKER_NAMESPACE must be a slug (e.g. headroom), got {self.broker_namespace!r}")
        if not 0 <= self.broker_maintenance_chance <= 1_000_000:
            raise SettingsError(
                f"HEADROOM_BROKER_MAINTENANCE_CHANCE must be 0 … 1000000 (per million), got {self.broker_maintenance_chance}"
            )
        if not 1 <= self.worker_threads <= 64:
            raise SettingsError(f"HEADROOM_WORKER_THREADS must be 1 … 64, got {self.worker_threads}")
        if self.max_simulated_requests < 1:
            raise SettingsError(f"HEADROOM_MAX_SIMULATED_REQUESTS must be >= 1, got {self.max_simulated_requests}")
        if not SLUG_PATTERN.fullmatch(self.default_price_provider):
            raise SettingsError(
                f"HEADROOM_DEFAULT_PRICE_PROVIDER must be a provider slug (e.g. runpod), got {self.default_price_provider!r}"
            )
        if self.log_level not in LOG_LEVELS:
            raise SettingsError(f"HEADROOM_LOG_LEVEL must be one of {', '.join(LOG_LEVELS)}, got {self.log_level!r}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Settings:
        """Settings from `environ` (default: the process environment); unset variables keep their default."""
        env = os.environ if environ is None else environ
        return cls(
            database_url=env.get("HEADROOM_DATABASE_URL") or DEFAULT_DATABASE_URL,
            admin_key=env.get("HEADROOM_ADMIN_KEY") or None,
            require_auth=_flag(env, "HEADROOM_REQUIRE_AUTH", default=False),
            request_timeout_s=_number(env, "HEADROOM_REQUEST_TIMEOUT_S", float, default=30.0),
            solver_time_limit_s=_number(env, "HEADROOM_SOLVER_TIME_LIMIT_S", float, default=10.0),
            max_simulated_requests=_number(env, "HEADROOM_MAX_SIMULATED_REQUESTS", int, default=200_000),
            log_level=(env.get("HEADROOM_LOG_LEVEL") or "info").lower(),
            idempotency_window_s=_number(env, "HEADROOM_IDEMPOTENCY_WINDOW_S", float, default=86_400.0),
            default_price_provider=(env.get("HEADROOM_DEFAULT_PRICE_PROVIDER") or DEFAULT_PRICE_PROVIDER).strip().lower(),
            max_body_bytes=_number(env, "HEADROOM_MAX_BODY_BYTES", int, default=1_048_576),
            broker_url=env.get("HEADROOM_BROKER_URL") or None,
            broker_namespace=env.get("HEADROOM_BROKER_NAMESPACE") or "headroom",
            broker_heartbeat_timeout_s=_number(env, "HEADROOM_BROKER_HEARTBEAT_TIMEOUT_S", float, default=60.0),
            broker_maintenance_chance=_number(env, "HEADROOM_BROKER_MAINTENANCE_CHANCE", int, default=1000),
            worker_threads=_number(env, "HEADROOM_WORKER_THREADS", int, default=2),
            async_threshold_s=_number(env, "HEADROOM_ASYNC_THRESHOLD_S", float, default=20.0),
        )


def _flag(env: Mapping[str, str], name: str, *, default: bool) -> bool:
    raw = env.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingsError(f"{name} must be 1 or 0, got {raw!r}")


def _number(env: Mapping[str, str], name: str, kind: type[_N], *, default: _N) -> _N:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        return kind(raw)
    except ValueError:
        raise SettingsError(f"{name} must be {'an integer' if kind is int else 'a number'}, got {raw!r}") from None
