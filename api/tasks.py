"""Operations' work as Dramatiq tasks (docs/operations.md): an operation fans out into units (a
sweep's points, a fleet plan's candidate tables), each a message `run_unit(operation_id, index)`;
a kind with a gathering last unit (a fleet plan's MILP, `Kind.final_unit`) gets it sent by the unit
that stores the others' last result; the unit that completes the set sends `finish(operation_id)`,
which assembles the result. Results go to the database
(catalog/operations.py), never to the broker, so any API replica answers GET /v1/operations/{id}.

The broker is the settings' (api/settings.py): none configured, Dramatiq's in-memory StubBroker
and a `dramatiq.Worker` inside the API process (started and stopped by the app's lifespan, which
also resumes what a previous process left unfinished); `redis://…`, a RedisBroker shared with
`headroom worker` processes, which redelivers what a dead worker held.

Messages are acknowledged after the task returns (Dramatiq's default), so every task is idempotent:
a unit whose result is stored, or whose operation is finished or cancelled, does nothing. A unit
that raises is retried with backoff; after MAX_UNIT_ATTEMPTS attempts (a restart's interrupted
attempt counts) it fails its operation with a problem document saying why; one that raises an
answer about the request itself (a 4xx problem: an infeasible fleet plan) fails it at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.brokers.stub import StubBroker
from dramatiq.middleware import CurrentMessage
from sqlalchemy.orm import Session, sessionmaker

from api import bulk_replan, fleet_operation, what_if
from api.errors import BrokerUnavailableError
from api.observability import Deadline
from api.problems import problem_type_for
from api.settings import Settings
from catalog.db import make_engine, make_session_factory
from catalog.errors import NotFoundError
from catalog.operations import ACTIVE_STATES, Operations, StoredOperation, restart_problem
from catalog.repository import Catalog
from planner.errors import HeadroomError
from planner.units import MS_PER_S

logger = logging.getLogger("headroom.tasks")

#: The one queue operations' tasks use (a namespace in Redis keeps deployments apart).
QUEUE = "headroom-operations"
#: Attempts a unit gets before it fails its operation: a transient failure (a database restart, a
#: solver that gave up under load) gets two more chances; a poison unit fails within seconds.
MAX_UNIT_ATTEMPTS = 3
#: Dramatiq's retry backoff, in ms: the first retry after about 1 s, none later than 10 s (its own
#: defaults, 15 s to 7 days, suit jobs that wait on outside systems, not a sweep someone waits on).
MIN_BACKOFF_MS = 1_000
MAX_BACKOFF_MS = 10_000
#: A unit is one plan (or one batch job's sweep), bounded like a request; Dramatiq's TimeLimit
#: stops a task that overruns this by far (its default is 10 minutes as well).
TASK_TIME_LIMIT_MS = 600_000
#: Operations whose specs a worker keeps read (one catalog read per worker and operation, not per unit).
INPUTS_CACHE_SIZE = 16


@dataclass(frozen=True, slots=True)
class Kind:
    """What the engine needs of one kind of operation: the specs its units share (read from the
    catalog once), one unit's result, and the operation's result from every unit's. A unit runs in
    the transaction that stores its result, so what it writes (a re-plan's plan) commits with it, once."""

    prepare: Callable[[dict[str, Any], Catalog], Any]
    run_unit: Callable[[Any, int, Settings, Session], Any]
    result: Callable[[Any, list[Any], float], dict[str, Any]]
    #: Where the result is stored besides the operation (a fleet plan's own URL), from the units' results.
    location: Callable[[list[Any]], str | None] = lambda _units: None
    #: A last unit that gathers every other unit's result (a fleet plan's MILP over its tables):
    #: sent only once all of them are stored, given their results in order.
    final_unit: Callable[[Any, list[Any], Settings, Session], Any] | None = None


def _what_if_unit(prepared: Any, index: int, settings: Settings, _session: Session) -> Any:
    body, inputs, pricing, _engine = prepared
    deadline = Deadline(timeout_s=settings.request_timeout_s, expires_at_s=time.monotonic() + settings.request_timeout_s)
    return what_if.sweep_unit(body, inputs, pricing, index, solver_time_limit_s=settings.solver_time_limit_s, deadline=deadline)


def _what_if_result(prepared: Any, units: list[Any], sweep_ms: float) -> dict[str, Any]:
    body, inputs, pricing, engine = prepared
    return what_if.operation_result(body, inputs, pricing, units, sweep_ms=sweep_ms, engine=engine)


KINDS: dict[str, Kind] = {
    what_if.OPERATION_KIND: Kind(prepare=what_if.operation_inputs, run_unit=_what_if_unit, result=_what_if_result),
    bulk_replan.OPERATION_KIND: Kind(prepare=bulk_replan.prepare, run_unit=bulk_replan.run_unit, result=bulk_replan.result),
    fleet_operation.OPERATION_KIND: Kind(
        prepare=fleet_operation.prepare,
        run_unit=fleet_operation.run_unit,
        result=fleet_operation.result,
        location=fleet_operation.location,
        final_unit=fleet_operation.final_unit,
    ),
}


def make_broker(settings: Settings) -> dramatiq.Broker:
    """The settings' broker: in-memory without HEADROOM_BROKER_URL, else Redis under its namespace."""
    if settings.broker_url is None:
        broker: dramatiq.Broker = StubBroker()
    else:
        broker = RedisBroker(  # type: ignore[no-untyped-call]
            url=settings.broker_url,
            namespace=settings.broker_namespace,
            heartbeat_timeout=int(settings.broker_heartbeat_timeout_s * MS_PER_S),
            maintenance_chance=settings.broker_maintenance_chance,
        )
    broker.add_middleware(CurrentMessage())
    return broker


class TaskEngine:
    """One process's side of the operations engine: its broker, the two actors declared on it, and
    (when started) a worker consuming them."""

    def __init__(self, settings: Settings, session_factory: sessionmaker[Session] | None = None) -> None:
        self.settings = settings
        self.embedded = settings.broker_url is None
        self.broker = make_broker(settings)
        self._sessions = session_factory or make_session_factory(make_engine(settings.database_url))
        self._prepared: OrderedDict[str, Any] = OrderedDict()
        self._prepared_lock = threading.Lock()
        self._worker: dramatiq.Worker | None = None
        options: dict[str, Any] = {
            "max_retries": MAX_UNIT_ATTEMPTS, "min_backoff": MIN_BACKOFF_MS, "max_backoff": MAX_BACKOFF_MS,
            "time_limit": TASK_TIME_LIMIT_MS,
        }  # fmt: skip
        self.run_unit_actor: dramatiq.Actor[[str, int], None] = dramatiq.actor(
            actor_name="run_unit", queue_name=QUEUE, broker=self.broker, **options
        )(self.run_unit)
        self.finish_actor: dramatiq.Actor[[str], None] = dramatiq.actor(
            actor_name="finish_operation", queue_name=QUEUE, broker=self.broker, **options
        )(self.finish)

    # ---- the API's side -------------------------------------------------------------------------

    def submit(self, *, kind: str, request: dict[str, Any], units_total: int) -> StoredOperation:
        """Store a queued operation (committed before any message is sent, so no worker can look for
        it too early) and send one message per unit."""
        with self._sessions() as session, session.begin():
            operation = Operations(session).create(kind=kind, request=request, units_total=units_total)
        gathers = KINDS[kind].final_unit is not None
        try:
            self.send_units(operation.id, range(units_total - 1 if gathers else units_total))
            if gathers and units_total == 1:  # nothing to gather: the last unit can run now
                self.send_units(operation.id, [0])
            if units_total == 0:  # nothing to fan out (a bulk re-plan of no deployments): finish it as it is
                self.finish_actor.send(operation.id)
        except Exception as exc:  # the broker is gone: say so now rather than leave it queued forever
            reason = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
            detail = f"operation {operation.id} could not be handed to the task broker ({reason}); retry later"
            logger.error("%s", detail)
            self._fail(
                operation.id,
                {
                    "type": "urn:headroom:problem:broker-unavailable",
                    "title": "Broker unavailable",
                    "status": 503,
                    "detail": detail,
                },
            )
            raise BrokerUnavailableError(detail, operation_id=operation.id) from exc
        return operation

    def send_units(self, operation_id: str, units: Iterable[int]) -> None:
        for index in units:
            self.run_unit_actor.send(operation_id, index)

    def resume_unfinished(self, idle_since: datetime | None = None) -> int:
        """At start-up with the embedded broker, whose queue died with the last process (or, with
        `idle_since`, after a broker lost its messages: `headroom operations resume`): send again
        every unit an unfinished operation still needs (or its finishing step), or fail it where a
        unit ran out of attempts. Returns how many operations were resumed."""
        with self._sessions() as session, session.begin():
            resumptions = Operations(session).recover(max_attempts=MAX_UNIT_ATTEMPTS, idle_since=idle_since)
        for resumption in resumptions:
            if resumption.units:
                self.send_units(resumption.operation_id, resumption.units)
            else:
                self.finish_actor.send(resumption.operation_id)
        if resumptions:
            logger.warning("resumed %d unfinished operation(s) after a restart", len(resumptions))
        return len(resumptions)

    # ---- a worker ---------------------------------------------------------------------------------

    def start_worker(self, threads: int | None = None) -> dramatiq.Worker:
        """A Dramatiq worker on this engine's broker, `threads` task threads (default the settings')."""
        self._worker = dramatiq.Worker(self.broker, queues={QUEUE}, worker_threads=threads or self.settings.worker_threads)
        self._worker.start()
        return self._worker

    def stop_worker(self, timeout_s: float = 10.0) -> None:
        """Stop the worker: its threads finish the task they run (up to `timeout_s`); what it had
        fetched and not started goes back to the broker."""
        if self._worker is not None:
            self._worker.stop(timeout=int(timeout_s * MS_PER_S))
            self._worker = None

    # ---- the tasks ----------------------------------------------------------------------------------

    def run_unit(self, operation_id: str, index: int) -> None:
        """Compute unit `index` of the operation and store its result; nothing when it is stored
        already or the operation is finished, failed or cancelled, nor for a gathering last unit
        while other units are not stored yet (a resumption sends it with them: the unit that
        completes the others sends it again)."""
        with self._sessions() as session, session.begin():
            operations = Operations(session)
            if self._waits_for_others(operations, operation_id, index):
                return
            operation = operations.start_unit(operation_id, index)
        if operation is None:
            self._follow_up(operation_id, index)
            return
        kind = KINDS[operation.kind]
        last = operation.units_total - 1
        try:
            prepared = self._prepare(operation)
            with self._sessions() as session, session.begin():
                operations = Operations(session)
                if kind.final_unit is not None and index == last:
                    gathered = operations.unit_results(operation_id)[:last]
                    result = kind.final_unit(prepared, gathered, self.settings, session)
                else:
                    result = kind.run_unit(prepared, index, self.settings, session)
                if not operations.record_unit(operation_id, index, result):
                    raise _StoredMeanwhile  # a redelivered copy ran alongside and won: roll back what this one wrote
                done = operations.get(operation_id)
        except _StoredMeanwhile:
            return
        except Exception as exc:  # noqa: BLE001  any failure is counted, retried, then fails the operation visibly
            self._unit_failed(operation_id, index, exc)
            return
        self._send_next(done, index)

    def _send_next(self, operation: StoredOperation, index: int) -> None:
        """After unit `index` is stored: the finishing step once every unit is, or a gathering last unit once the others are."""
        if operation.state != "running":
            return
        last = operation.units_total - 1
        if operation.units_done >= operation.units_total:
            self.finish_actor.send(operation.id)
        elif KINDS[operation.kind].final_unit is not None and operation.units_done == last and index != last:
            self.run_unit_actor.send(operation.id, last)  # every other unit is stored: gather them

    def _follow_up(self, operation_id: str, index: int) -> None:
        """A unit found stored already (a redelivered message): its first delivery may have died
        between storing the result and sending what comes next, so send that again (both are idempotent)."""
        with self._sessions() as session:
            try:
                operation = Operations(session).get(operation_id)
            except NotFoundError:
                return
        if index < operation.units_total:
            self._send_next(operation, index)

    @staticmethod
    def _waits_for_others(operations: Operations, operation_id: str, index: int) -> bool:
        """Whether unit `index` is a gathering last unit whose operation has other units not stored yet."""
        try:
            operation = operations.get(operation_id)
        except NotFoundError:
            return False  # start_unit answers it (nothing to do)
        kind = KINDS.get(operation.kind)
        last = operation.units_total - 1
        return kind is not None and kind.final_unit is not None and index == last and operation.units_done < last

    def finish(self, operation_id: str) -> None:
        """Assemble the operation's result from its units' and mark it succeeded, once."""
        with self._sessions() as session:
            operation = Operations(session).get(operation_id)
            units = Operations(session).unit_results(operation_id)
        if operation.state not in ACTIVE_STATES or operation.units_done < operation.units_total:
            return
        started = operation.started_at or operation.created_at
        sweep_ms = (datetime.now(UTC) - started).total_seconds() * MS_PER_S
        try:
            kind = KINDS[operation.kind]
            result, location = kind.result(self._prepare(operation), units, sweep_ms), kind.location(units)
        except Exception as exc:
            if _attempt() < MAX_UNIT_ATTEMPTS:
                raise  # Dramatiq retries it with backoff
            self._fail(operation_id, _problem(exc, f"assembling the result of operation {operation_id} failed"))
            return
        with self._sessions() as session, session.begin():
            Operations(session).finish(operation_id, result=result, result_location=location)
        with self._prepared_lock:
            self._prepared.pop(operation_id, None)

    def _unit_failed(self, operation_id: str, index: int, exc: Exception) -> None:
        reason = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
        with self._sessions() as session, session.begin():
            attempts = Operations(session).record_unit_error(operation_id, index, reason)
        if isinstance(exc, HeadroomError) and problem_type_for(exc).status < 500:
            # an answer about the request (an infeasible fleet, a model gone from the catalog): the
            # same again on every retry, so the operation fails now with that problem
            problem = _problem(exc, exc.detail)
            self._fail(operation_id, {**exc.extensions, **problem, "unit": index, "attempts": attempts})
            return
        if attempts < MAX_UNIT_ATTEMPTS:
            raise exc  # Dramatiq retries it with backoff
        logger.error("unit %d of operation %s failed %d times: %s", index, operation_id, attempts, reason)
        problem = _problem(exc, restart_problem(operation_id, index, attempts, reason)["detail"])
        self._fail(operation_id, {**problem, "unit": index, "attempts": attempts})

    def _fail(self, operation_id: str, problem: dict[str, Any]) -> None:
        with self._sessions() as session, session.begin():
            Operations(session).fail(operation_id, problem)

    def _prepare(self, operation: StoredOperation) -> Any:
        """The operation's shared specs, read from the catalog once per worker."""
        with self._prepared_lock:
            if operation.id in self._prepared:
                self._prepared.move_to_end(operation.id)
                return self._prepared[operation.id]
        with self._sessions() as session:
            prepared = KINDS[operation.kind].prepare(operation.request, Catalog(session))
        with self._prepared_lock:
            self._prepared[operation.id] = prepared
            while len(self._prepared) > INPUTS_CACHE_SIZE:
                self._prepared.popitem(last=False)
        return prepared


class _StoredMeanwhile(Exception):
    """The unit's result was stored by another delivery while this one computed it."""


def _attempt() -> int:
    """Which delivery of the current message this is (1 for the first)."""
    message = CurrentMessage.get_current_message()
    return 1 + (0 if message is None else int(message.options.get("retries", 0)))


def _problem(exc: Exception, detail: str) -> dict[str, Any]:
    """The RFC 9457 document an operation fails with: the exception's own problem type where the
    API maps it (a solver that gave up, a model no longer in the catalog), else operation-failed."""
    kind = problem_type_for(exc)
    if kind.name == "internal-error":
        return {"type": "urn:headroom:problem:operation-failed", "title": "Operation failed", "status": 500, "detail": detail}
    title = kind.title or getattr(exc, "title", None) or "Operation failed"
    return {"type": kind.uri, "title": title, "status": kind.status, "detail": detail}
