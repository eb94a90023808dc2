"""What the diff of two plans is made of, for a one-workload plan (planner/diff.py) and a class plan
(planner/class_diff.py) alike: a field's value before and after, the costs, the GPUs added and removed
per type, and records matched by name with their status.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from planner.units import HOURS_PER_MONTH

#: A pool's role: `mixed` (prefill and decode on the same replicas, every aggregated row), `prefill` or `decode`.
PoolRole = Literal["mixed", "prefill", "decode"]

#: Relative difference below which two prices or rates count as equal (float noise from JSON round trips).
SAME_RELATIVE = 1e-9

#: A record (pool or class) from one plan to the next, matched by name.
Status = Literal["added", "removed", "changed", "same"]

_Record = TypeVar("_Record")


@dataclass(frozen=True, slots=True, kw_only=True)
class Change:
    before: Any
    after: Any

    @property
    def changed(self) -> bool:
        return bool(self.before != self.after)


@dataclass(frozen=True, slots=True, kw_only=True)
class CostChange:
    """before: as planned; before_now: the current plan at today's prices; change = after − before_now."""

    before: float
    before_now: float
    after: float
    change: float


def status_of(before: object | None, after: object | None) -> Status:
    """A record's status from its two versions (None where a plan lacks it)."""
    return "added" if before is None else "removed" if after is None else "same" if before == after else "changed"


def names_in_order(before: Sequence[str], after: Sequence[str]) -> list[str]:
    """Before's names in order, then after's new ones."""
    return [*before, *(n for n in after if n not in before)]


def field_change(get: Callable[[_Record], object], before: _Record | None, after: _Record | None) -> Change:
    """One field of a record from one plan to the next: None on the side that lacks the record."""
    return Change(before=None if before is None else get(before), after=None if after is None else get(after))


def gpu_changes(before: Mapping[str, int], after: Mapping[str, int]) -> tuple[Change, dict[str, int], dict[str, int]]:
    """From GPUs per type before and after: the total's change, and the GPUs added and removed per type."""
    added = {gpu: n - before.get(gpu, 0) for gpu, n in after.items() if n > before.get(gpu, 0)}
    removed = {gpu: n - after.get(gpu, 0) for gpu, n in before.items() if n > after.get(gpu, 0)}
    return Change(before=sum(before.values()), after=sum(after.values())), added, removed


def cost_changes(
    before_usd_per_hour: float, before_now_usd_per_hour: float, after_usd_per_hour: float
) -> tuple[CostChange, CostChange]:
    """The cost per hour and per month (730 h) as planned, at today's prices and for the new plan; the change is
    what switching adds to today's bill."""
    change = after_usd_per_hour - before_now_usd_per_hour  # what switching adds to today's bill
    per_hour = CostChange(before=before_usd_per_hour, before_now=before_now_usd_per_hour, after=after_usd_per_hour, change=change)
    per_month = CostChange(
        before=before_usd_per_hour * HOURS_PER_MONTH,
        before_now=before_now_usd_per_hour * HOURS_PER_MONTH,
        after=after_usd_per_hour * HOURS_PER_MONTH,
        change=change * HOURS_PER_MONTH,
    )  # $/h × 730 h
    return per_hour, per_month


def pool_change_summary(pool: str, status: str, fields: Sequence[tuple[str, Change]]) -> str:
    """`pool: name before → after, …` over the fields that changed (`pool: same` when none did), or
    `pool: added` / `pool: removed`; a tuple value (a pool's classes) is shown comma-separated."""
    if status in ("added", "removed"):
        return f"{pool}: {status}"

    def shown(value: object) -> str:
        return ", ".join(str(v) for v in value) if isinstance(value, tuple) else str(value)

    changed = [f"{name} {shown(c.before)} → {shown(c.after)}" for name, c in fields if c.changed]
    return f"{pool}: " + (", ".join(changed) if changed else "same")
