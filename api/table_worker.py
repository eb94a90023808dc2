"""What the fleet candidate-table workers' fork server loads before it forks any worker: the
planner, with the queueing model's compiled kernels already loaded (`planner.queueing.warm_up`),
so each worker a fleet plan starts computes from its first instruction instead of loading them."""

from planner import fleet_candidates as _fleet_candidates  # noqa: F401  (imported for the fork server)
from planner.queueing import warm_up

warm_up()
