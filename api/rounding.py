"""How many digits a number keeps when it leaves the service (JSON bodies and CSV cells).

The planner computes with unrounded floats and keeps them; only what is serialised is rounded, so
`2087.7999999999997` reads `2087.8`. A number's unit is in its key (the naming rule of the whole
code base), so the key decides; a key that names no unit (`p50`, list items, `at_percentile`)
takes the unit of the nearest enclosing key that does (`ttft_ms: {p50, p99}`):

- money, a key naming `usd` (`cost_usd_per_hour`, `usd_total`, `usd_per_rps`): cents, 2 decimals;
- a key ending `_ms`: 0.1 ms, 1 decimal;
- a key ending `_s` (seconds, not a rate `_per_s`): 0.1 ms, 4 decimals, or 4 significant figures
  when that keeps more of a small time (a 23 µs all-reduce is 2.3e-05, not 0.0);
- any other float: 6 significant figures, enough for every measured or predicted quantity here
  (none is known to better than 1e-6) and short of the 1e-16 of float noise.

Exceptions, and why:

- A unit price (a key naming `price`, or a member of a price record: `on_demand`, `reserved_1y`,
  …) keeps 6 significant figures, not cents: it is a provider's figure as listed (AWS lists
  $0.8048 per GPU-hour), and cents would misstate it and break cost = Σ price × GPUs.
- A float with an integral value is left as it is: it is an exact count (bytes, tokens, FLOPs)
  with no noise to remove.
- Integers, booleans, strings and None are never touched: identifiers, counts and versions.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

#: Decimal places of money (cents), milliseconds (0.1 ms) and seconds (0.1 ms).
USD_DECIMALS = 2
MS_DECIMALS = 1
S_DECIMALS = 4
#: Significant figures of a small time in seconds, and of any other float.
S_SIGNIFICANT = 4
SIGNIFICANT = 6
#: Members of a price record (catalog prices, a plan's costed prices, a fleet's GpuPriceRead)
#: whose key does not say `price`: unit prices, kept as listed.
PRICE_RECORD_KEYS = frozenset({"on_demand", "reserved_1y", "reserved_3y", "spot"})

_UNITS = ("usd", "price", "ms", "s")


def _significant(value: float, figures: int) -> float:
    return round(value, figures - 1 - math.floor(math.log10(abs(value))))


def unit_of(key: str | None) -> str | None:
    """The rounding unit a key names: "price", "usd", "ms", "s", or None (a key naming none)."""
    if key is None:
        return None
    name = key.lower()
    if "price" in name or name in PRICE_RECORD_KEYS:
        return "price"
    if "usd" in name:
        return "usd"
    if name.endswith("_ms"):
        return "ms"
    if name.endswith("_s") and not name.endswith("_per_s"):
        return "s"
    return None


def round_number(value: float, unit: str | None) -> float:
    """One float rounded for `unit` (module docstring); non-finite and integral values unchanged."""
    if not math.isfinite(value) or value == 0.0 or value.is_integer():
        return value
    if unit == "usd":
        return round(value, USD_DECIMALS)
    if unit == "ms":
        return round(value, MS_DECIMALS)
    if unit == "s":
        return round(value, max(S_DECIMALS, S_SIGNIFICANT - 1 - math.floor(math.log10(abs(value)))))
    return _significant(value, SIGNIFICANT)


def rounded(value: Any, key: str | None = None, unit: str | None = None) -> Any:
    """`value` (a JSON-like tree) with every float rounded by its key's unit, or the nearest enclosing one's.
    Inside a price (`prices: {gpu: {reserved_usd_per_hour: …}}`) a USD amount is a unit price and keeps
    its significant figures: rounded to cents, GPUs × price would no longer make the costs."""
    own = unit_of(key)
    unit = unit if unit == "price" and own == "usd" else (own or unit)
    if isinstance(value, bool) or value is None or isinstance(value, int | str):
        return value
    if isinstance(value, float):
        return round_number(value, unit)
    if isinstance(value, Mapping):
        return {k: rounded(v, k if isinstance(k, str) else None, unit) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [rounded(item, None, unit) for item in value]
    return value


def allowed_digits(value: float, unit: str | None) -> bool:
    """Whether `value` already carries no more digits than the policy keeps for `unit` (tests walk
    whole responses with it)."""
    return round_number(value, unit) == value
