"""Stored operations: long-running requests the task workers run (api/tasks.py), one row per
operation and one per independent unit of its work (a sweep's point). Every change a worker makes
is one conditional UPDATE, so several workers (and a message delivered twice) agree: a unit's result
is stored once, the operation is finished once, and a cancelled or failed operation stays so.

Like `Catalog`, this speaks plain dicts and dataclasses and the caller owns the transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, cast

from sqlalchemy import CursorResult, Result, func, select, update
from sqlalchemy.orm import Session

from catalog.documents import aware_utc, is_document_id, new_document_id
from catalog.errors import NotFoundError
from catalog.models import OperationRow, OperationUnitRow

OperationState = Literal["queued", "running", "succeeded", "failed", "cancelled"]
STATES: tuple[OperationState, ...] = ("queued", "running", "succeeded", "failed", "cancelled")
#: States an operation can still leave; the others are final.
ACTIVE_STATES: tuple[OperationState, ...] = ("queued", "running")


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredOperation:
    id: str
    kind: str
    state: OperationState
    request: dict[str, Any]
    units_total: int
    units_done: int
    result: dict[str, Any] | None
    result_location: str | None
    problem: dict[str, Any] | None
    attempts: int
    cancel_requested: bool
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class OperationPage:
    """One page of operations and how many match the filters on all pages."""

    items: list[StoredOperation]
    total: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Resumption:
    """What a restarted service owes an operation it found unfinished: its units to run again
    (empty when every unit is done and only the finishing step was lost)."""

    operation_id: str
    units: list[int]


class Operations:
    """Operations on one session."""

    def __init__(self, session: Session) -> None:
        self._session = session

    def create(self, *, kind: str, request: dict[str, Any], units_total: int) -> StoredOperation:
        """A queued operation with `units_total` queued units (indexes 0 … units_total − 1)."""
        now = datetime.now(UTC)
        row = OperationRow(
            id=new_document_id(), kind=kind, state="queued", request=dict(request), units_total=units_total, units_done=0,
            attempts=1, cancel_requested=False, created_at=now, updated_at=now,
        )  # fmt: skip
        self._session.add(row)
        self._session.flush()
        self._session.add_all(
            OperationUnitRow(operation_id=row.id, index=index, state="queued", attempts=0) for index in range(units_total)
        )
        self._session.flush()
        return _stored(row)

    def get(self, operation_id: str) -> StoredOperation:
        """The operation; NotFoundError (404) for an id nobody issued."""
        row = self._session.get(OperationRow, operation_id) if is_document_id(operation_id) else None
        if row is None:
            raise NotFoundError(f"no operation with id {operation_id!r}", kind="operation", id=operation_id)
        self._session.refresh(row)  # workers change it in other transactions
        return _stored(row)

    def list_operations(
        self, *, state: str | None = None, kind: str | None = None, limit: int = 50, offset: int = 0
    ) -> OperationPage:
        """Operations newest first (ties by id, so pages never overlap), only those in `state` and/or of `kind`."""
        if kind is not None and "\x00" in kind:  # PostgreSQL refuses NUL in text
            return OperationPage(items=[], total=0)
        filters = [OperationRow.state == state] if state is not None else []
        filters += [OperationRow.kind == kind] if kind is not None else []
        total = self._session.scalar(select(func.count()).select_from(OperationRow).where(*filters)) or 0
        rows = self._session.scalars(
            select(OperationRow)
            .where(*filters)
            .order_by(OperationRow.created_at.desc(), OperationRow.id)
            .limit(limit)
            .offset(offset)
        )
        return OperationPage(items=[_stored(row) for row in rows], total=total)

    def start_unit(self, operation_id: str, index: int) -> StoredOperation | None:
        """Claim unit `index` for one attempt (counted) and mark the operation running; None when
        there is nothing to do: the unit's result is stored already, or the operation is finished,
        cancelled or asked to cancel."""
        now = datetime.now(UTC)
        operation = self._session.get(OperationRow, operation_id)
        if operation is None:
            return None
        self._session.refresh(operation)
        if operation.state not in ACTIVE_STATES or operation.cancel_requested:
            return None
        claimed = self._session.execute(
            update(OperationUnitRow)
            .where(
                OperationUnitRow.operation_id == operation_id,
                OperationUnitRow.index == index,
                OperationUnitRow.state != "succeeded",
            )
            .values(state="running", attempts=OperationUnitRow.attempts + 1)
        )
        if _rowcount(claimed) != 1:
            return None
        self._session.execute(
            update(OperationRow)
            .where(OperationRow.id == operation_id, OperationRow.state == "queued")
            .values(state="running", started_at=now, updated_at=now)
        )
        self._session.flush()
        self._session.refresh(operation)
        return _stored(operation)

    def record_unit(self, operation_id: str, index: int, result: Any) -> bool:
        """Store unit `index`'s result and count it done, once: False (and nothing changed) when a
        redelivered unit's result is stored already."""
        stored = self._session.execute(
            update(OperationUnitRow)
            .where(
                OperationUnitRow.operation_id == operation_id,
                OperationUnitRow.index == index,
                OperationUnitRow.state != "succeeded",
            )
            .values(state="succeeded", result=result, error=None)
        )
        if _rowcount(stored) != 1:
            return False
        self._session.execute(
            update(OperationRow)
            .where(OperationRow.id == operation_id)
            .values(units_done=OperationRow.units_done + 1, updated_at=datetime.now(UTC))
        )
        return True

    def record_unit_error(self, operation_id: str, index: int, error: str) -> int:
        """Note why unit `index` failed this attempt; returns how many attempts it has had."""
        self._session.execute(
            update(OperationUnitRow)
            .where(
                OperationUnitRow.operation_id == operation_id,
                OperationUnitRow.index == index,
                OperationUnitRow.state != "succeeded",
            )
            .values(state="queued", error=error)
        )
        attempts = self._session.scalar(
            select(OperationUnitRow.attempts).where(
                OperationUnitRow.operation_id == operation_id, OperationUnitRow.index == index
            )
        )
        return attempts or 0

    def unit_results(self, operation_id: str) -> list[Any]:
        """Every stored unit result, by index (None for a unit not done)."""
        rows = self._session.execute(
            select(OperationUnitRow.result).where(OperationUnitRow.operation_id == operation_id).order_by(OperationUnitRow.index)
        )
        return [result for (result,) in rows]

    def finish(self, operation_id: str, *, result: dict[str, Any] | None, result_location: str | None = None) -> bool:
        """queued or running → succeeded with its result (queued only for an operation of no units);
        True only for the one caller that made the change (two workers finishing at once: the
        second UPDATE matches no row)."""
        now = datetime.now(UTC)
        changed = self._session.execute(
            update(OperationRow)
            .where(
                OperationRow.id == operation_id, OperationRow.state.in_(ACTIVE_STATES), OperationRow.cancel_requested.is_(False)
            )
            .values(state="succeeded", result=result, result_location=result_location, finished_at=now, updated_at=now)
        )
        return _rowcount(changed) == 1

    def fail(self, operation_id: str, problem: dict[str, Any]) -> bool:
        """queued or running → failed with `problem` (an RFC 9457 document); True if this call failed it."""
        now = datetime.now(UTC)
        changed = self._session.execute(
            update(OperationRow)
            .where(OperationRow.id == operation_id, OperationRow.state.in_(ACTIVE_STATES))
            .values(state="failed", problem=problem, finished_at=now, updated_at=now)
        )
        return _rowcount(changed) == 1

    def cancel(self, operation_id: str) -> StoredOperation:
        """Ask the operation to stop: a queued or running one is cancelled now (units not yet
        started are skipped, a unit computing finishes but is not used); a finished one is
        answered as it is. NotFoundError for an unknown id."""
        self.get(operation_id)
        now = datetime.now(UTC)
        self._session.execute(
            update(OperationRow)
            .where(OperationRow.id == operation_id, OperationRow.state.in_(ACTIVE_STATES))
            .values(state="cancelled", cancel_requested=True, finished_at=now, updated_at=now)
        )
        return self.get(operation_id)

    def recover(self, *, max_attempts: int, idle_since: datetime | None = None) -> list[Resumption]:
        """After a restart of a service whose queue lived in its memory (or a broker that lost its
        messages): every queued or running operation — with `idle_since`, only those unchanged since
        then — with the units it still needs run again. A unit interrupted mid-attempt keeps
        that attempt counted; an operation with a unit past `max_attempts` attempts is failed with
        the reason instead. Each resumed operation's `attempts` counts the resumption."""
        resumptions: list[Resumption] = []
        active = self._session.scalars(
            select(OperationRow).where(OperationRow.state.in_(ACTIVE_STATES)).order_by(OperationRow.created_at)
        )
        for operation in list(active):
            if idle_since is not None and aware_utc(operation.updated_at) >= idle_since:
                continue
            units = self._session.scalars(
                select(OperationUnitRow)
                .where(OperationUnitRow.operation_id == operation.id, OperationUnitRow.state != "succeeded")
                .order_by(OperationUnitRow.index)
            ).all()
            spent = [unit for unit in units if unit.attempts >= max_attempts]
            if spent:
                self.fail(operation.id, restart_problem(operation.id, spent[0].index, spent[0].attempts, spent[0].error))
                continue
            for unit in units:
                unit.state = "queued"
            operation.attempts += 1
            operation.updated_at = datetime.now(UTC)
            resumptions.append(Resumption(operation_id=operation.id, units=[unit.index for unit in units]))
        self._session.flush()
        return resumptions


def restart_problem(operation_id: str, index: int, attempts: int, error: str | None) -> dict[str, Any]:
    """The problem an operation fails with when a unit ran out of attempts."""
    reason = error or "its process stopped before it finished (a restart)"
    return {
        "type": "urn:headroom:problem:operation-failed",
        "title": "Operation failed",
        "status": 500,
        "detail": f"unit {index} of operation {operation_id} failed {attempts} time(s), the most it may: {reason}",
        "unit": index,
        "attempts": attempts,
    }


def _rowcount(result: Result[Any]) -> int:
    """Rows an UPDATE matched (SQLAlchemy types execute()'s answer as a Result; an UPDATE's is a CursorResult)."""
    return cast(CursorResult[Any], result).rowcount


def _stored(row: OperationRow) -> StoredOperation:
    return StoredOperation(
        id=row.id, kind=row.kind, state=cast(OperationState, row.state),
        request=row.request, units_total=row.units_total, units_done=row.units_done, result=row.result,
        result_location=row.result_location, problem=row.problem, attempts=row.attempts,
        cancel_requested=row.cancel_requested, created_at=aware_utc(row.created_at),
        started_at=None if row.started_at is None else aware_utc(row.started_at),
        finished_at=None if row.finished_at is None else aware_utc(row.finished_at),
        updated_at=aware_utc(row.updated_at),
    )  # fmt: skip
