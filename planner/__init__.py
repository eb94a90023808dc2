"""Headroom's pure core: specs, performance model, queueing, simulation and optimisation. No I/O."""
