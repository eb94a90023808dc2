"""Narrowing μ, the largest per-replica rate that meets every SLO, between a rate known to meet and
one known to miss — shared by the plan search (planner/planning.py) and the fleet candidate tables
(planner/fleet_candidates.py), so both find μ the same way and to the same tolerance.

Each probe is one queueing-model prediction, so the fewer the better. The slack s(λ) =
target/predicted − 1 of the worst SLO metric is > 0 where the SLOs are met, < 0 where missed and
−1 at saturation (unbounded latency). Latency grows roughly like 1/(1 − ρ) near μ, so s is close to
linear in the rate there: regula falsi on the bracket's two slacks lands near μ, and a probe placed
a little past that estimate usually closes the bracket from one side in one step. Without both
slacks the probe is the midpoint (bisection).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: μ is narrowed until (missed − met) ≤ this × met and taken from below: every rate a plan or the
#: fleet MILP uses is one the queueing model verified to meet the SLOs, at most 1 % under the true μ.
MU_RELATIVE_TOLERANCE = 0.01

#: How far past the interpolated μ (in units of the tolerance band MU_RELATIVE_TOLERANCE × met)
#: each probe is placed, so that one probe each side closes the bracket: 0.45 leaves the band
#: 0.9 wide, inside the tolerance. Chosen by the argument, not tuned.
PROBE_STEP = 0.45

#: A probe is kept this fraction of the bracket's width inside it, so each one shrinks the bracket.
PROBE_MARGIN = 0.05


def slack(excess: float) -> float | None:
    """target/predicted − 1 from predicted/target − 1 (the worst metric's); −1 when unstable (excess
    inf); None when the prediction is 0 (excess −1: e.g. no TPOT for one-token outputs), where the
    slack is unbounded and the next probe bisects instead of interpolating."""
    if not math.isfinite(excess):
        return -1.0
    if excess <= -1.0:
        return None
    return 1.0 / (1.0 + excess) - 1.0


@dataclass(slots=True)
class Bracket:
    """What is known of one configuration's μ: `met_rps` meets every SLO, `missed_rps` does not (or
    is the saturation rate, which no stable rate reaches), with the slack at each when known."""

    met_rps: float
    missed_rps: float
    met_slack: float | None = None
    missed_slack: float | None = -1.0
    #: which end moved last (+1 met, −1 missed) times how many probes in a row moved it
    run: int = 0

    def record(self, rate_rps: float, excess: float) -> bool:
        """Enter one prediction's outcome at `rate_rps` (excess = predicted/target − 1 of the worst metric); True when met."""
        met = excess <= 0
        if met:
            self.met_rps, self.met_slack = rate_rps, slack(excess)
            self.run = self.run + 1 if self.run > 0 else 1
        else:
            self.missed_rps, self.missed_slack = rate_rps, slack(excess)
            self.run = self.run - 1 if self.run < 0 else -1
        return met

    def narrow_enough(self, relative_tolerance: float = MU_RELATIVE_TOLERANCE) -> bool:
        """Whether [met, missed) already pins μ to the tolerance (from below)."""
        return self.missed_rps - self.met_rps <= relative_tolerance * self.met_rps

    def next_probe(self, relative_tolerance: float = MU_RELATIVE_TOLERANCE) -> float:
        """The next rate to try: where the slack interpolates to zero between the bracket's ends
        (regula falsi), stepped PROBE_STEP × the tolerance band past it, so the next probe usually
        closes the bracket; the midpoint when a slack is unknown; never within PROBE_MARGIN of the
        bracket's width of an end.

        When the same end has moved several probes in a row (the slack is far from linear, e.g.
        right below saturation), the other end's slack is halved for each repeat (the Illinois
        rule), so the chord's zero moves towards the end that is stuck instead of creeping."""
        met, missed = self.met_rps, self.missed_rps
        width = missed - met
        midpoint = (met + missed) / 2
        met_slack, missed_slack = self.met_slack, self.missed_slack
        if met_slack is None or missed_slack is None or not met_slack > 0 > missed_slack:
            return midpoint
        if self.run >= 2:
            missed_slack *= 0.5 ** (self.run - 1)
        elif self.run <= -2:
            met_slack *= 0.5 ** (-self.run - 1)
        estimate = met + width * met_slack / (met_slack - missed_slack)  # slack = 0 on the chord
        step = PROBE_STEP * relative_tolerance * met
        # Latency is convex in the rate, so the chord's zero lies below μ: step up, and down only
        # when the estimate is nearer the missed end.
        rate = estimate + step if estimate - met < missed - estimate else estimate - step
        return min(max(rate, met + PROBE_MARGIN * width), missed - PROBE_MARGIN * width)
