"""The operations store (catalog/operations.py) on SQLite and PostgreSQL: a unit's result is stored
once however often it is delivered, an operation is finished once however many workers race to
finish it, cancel and fail are final, and a restart resumes what is left."""

from __future__ import annotations

import threading

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from catalog.db import make_session_factory
from catalog.errors import NotFoundError
from catalog.operations import Operations


def test_create_get_and_list_with_filters(session: Session) -> None:
    operations = Operations(session)
    first = operations.create(kind="what-if", request={"model": "m"}, units_total=3)
    second = operations.create(kind="fleet-plan", request={}, units_total=1)
    operations.cancel(second.id)
    assert operations.get(first.id).state == "queued"
    assert (operations.get(first.id).units_total, operations.get(first.id).units_done) == (3, 0)
    assert [op.id for op in operations.list_operations(state="queued").items] == [first.id]
    assert [op.id for op in operations.list_operations(kind="fleet-plan").items] == [second.id]
    page = operations.list_operations(limit=1)
    assert page.total == 2 and len(page.items) == 1
    assert operations.list_operations(limit=1, offset=1).items[0].id != page.items[0].id
    with pytest.raises(NotFoundError):
        operations.get("0" * 32)
    with pytest.raises(NotFoundError):
        operations.get("not-an-id")


def test_a_redelivered_unit_is_a_no_op_and_the_operation_finishes_once(session: Session) -> None:
    operations = Operations(session)
    op = operations.create(kind="what-if", request={}, units_total=2)
    assert operations.start_unit(op.id, 0) is not None
    assert operations.get(op.id).state == "running"
    assert operations.record_unit(op.id, 0, [{"point": 1}])
    assert operations.start_unit(op.id, 0) is None  # stored already: a redelivery does nothing
    assert not operations.record_unit(op.id, 0, [{"point": 99}])
    assert operations.start_unit(op.id, 1) is not None
    assert operations.record_unit(op.id, 1, [{"point": 2}])
    assert operations.get(op.id).units_done == 2
    assert operations.unit_results(op.id) == [[{"point": 1}], [{"point": 2}]]
    assert operations.finish(op.id, result={"points": 2})
    assert not operations.finish(op.id, result={"points": 3})
    finished = operations.get(op.id)
    assert finished.state == "succeeded" and finished.result == {"points": 2} and finished.finished_at is not None


def test_two_workers_finishing_at_once_finish_it_once(engine: Engine) -> None:
    sessions = make_session_factory(engine)
    with sessions() as session:
        op = Operations(session).create(kind="what-if", request={}, units_total=1)
        Operations(session).start_unit(op.id, 0)
        Operations(session).record_unit(op.id, 0, [])
        session.commit()
    barrier = threading.Barrier(4)
    wins: list[bool] = []

    def finish() -> None:
        with sessions() as session:
            barrier.wait(timeout=10)
            wins.append(Operations(session).finish(op.id, result={"by": threading.get_ident()}))
            session.commit()

    threads = [threading.Thread(target=finish) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(wins) == [False, False, False, True]


def test_cancel_is_final_and_stops_units(session: Session) -> None:
    operations = Operations(session)
    op = operations.create(kind="what-if", request={}, units_total=2)
    operations.start_unit(op.id, 0)
    cancelled = operations.cancel(op.id)
    assert cancelled.state == "cancelled" and cancelled.cancel_requested
    assert operations.start_unit(op.id, 1) is None
    operations.record_unit(op.id, 0, [])
    assert not operations.finish(op.id, result={})
    assert not operations.fail(op.id, {"detail": "late"})
    assert operations.get(op.id).state == "cancelled"


def test_recover_resumes_what_is_left_and_fails_a_unit_past_its_attempts(session: Session) -> None:
    operations = Operations(session)
    resumable = operations.create(kind="what-if", request={}, units_total=3)
    operations.start_unit(resumable.id, 0)
    operations.record_unit(resumable.id, 0, [])
    operations.start_unit(resumable.id, 1)  # interrupted mid-attempt
    spent = operations.create(kind="what-if", request={}, units_total=1)
    for _ in range(3):
        operations.start_unit(spent.id, 0)
    done = operations.create(kind="what-if", request={}, units_total=1)
    operations.cancel(done.id)
    resumptions = operations.recover(max_attempts=3)
    assert [(r.operation_id, r.units) for r in resumptions] == [(resumable.id, [1, 2])]
    assert operations.get(resumable.id).attempts == 2
    failed = operations.get(spent.id)
    assert failed.state == "failed" and failed.problem is not None
    assert "failed 3 time(s)" in failed.problem["detail"] and "restart" in failed.problem["detail"]
