"""A job's monitor: one small process per running attempt (docs/architecture.md).

Standard library only, and no import of the rest of trainqd: a monitor is started directly
with `python -S -I` on the dispatch path, and it outlives trainqd restarts and upgrades.
"""
