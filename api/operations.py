"""The operations service: how a stored operation is answered (GET /v1/operations and POST
/v1/what-if's 202), with its progress and an ETA from the rate its units have been done so far."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Protocol

from catalog.operations import StoredOperation


class OperationQueue(Protocol):
    """Where a route hands an operation to the task workers (api/tasks.py's TaskEngine)."""

    def submit(self, *, kind: str, request: dict[str, Any], units_total: int) -> StoredOperation: ...


#: RFC 7240's preference for an asynchronous answer, and the header that says it was applied.
RESPOND_ASYNC = "respond-async"


def prefers_async(prefer: str | None) -> bool:
    """Whether a `Prefer` header (RFC 7240: comma-separated preferences, each maybe with `;` parameters) asks respond-async."""
    if prefer is None:
        return False
    return any(part.split(";", 1)[0].strip().lower() == RESPOND_ASYNC for part in prefer.split(","))


def operation_location(operation_id: str) -> str:
    return f"/v1/operations/{operation_id}"


def operation_read(operation: StoredOperation, *, with_result: bool = True) -> dict[str, Any]:
    """The OperationRead of a stored operation; the list leaves results out (`with_result`)."""
    return {
        "id": operation.id, "kind": operation.kind, "state": operation.state,
        "progress": {"done": operation.units_done, "total": operation.units_total, "eta_s": _eta_s(operation)},
        "created_at": operation.created_at, "started_at": operation.started_at, "finished_at": operation.finished_at,
        "updated_at": operation.updated_at, "cancel_requested": operation.cancel_requested,
        "attempts": operation.attempts, "result": operation.result if with_result else None,
        "result_location": operation.result_location, "problem": operation.problem,
    }  # fmt: skip


def _eta_s(operation: StoredOperation) -> float | None:
    """Seconds left if the units left go at the rate the done ones went: elapsed / done × left."""
    if operation.state != "running" or operation.started_at is None or operation.units_done == 0:
        return None
    elapsed_s = (datetime.now(UTC) - operation.started_at).total_seconds()
    return max(0.0, elapsed_s / operation.units_done * (operation.units_total - operation.units_done))
