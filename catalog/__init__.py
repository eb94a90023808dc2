"""The catalog database: GPUs, models, quantization schemes and efficiency profiles.

`catalog.repository.Catalog` is the only way in or out; it speaks plain record dicts and
planner specs, never ORM rows.
"""
