"""Unit conversions, each defined once. Inside `planner/` everything is SI (seconds, bytes,
FLOP/s, requests per second); the API speaks milliseconds for per-token latencies, GB for memory
and hours and months for money, and converts at its edge with these.
"""

from __future__ import annotations

#: Milliseconds per second.
MS_PER_S = 1e3
#: Seconds per hour.
SECONDS_PER_HOUR = 3600.0
#: Hours per month: 8,760 h / 12, the convention cloud price sheets use for a monthly figure.
HOURS_PER_MONTH = 730.0
#: Bytes per GB (decimal, as GPU datasheets state memory and bandwidth).
GB = 1e9
