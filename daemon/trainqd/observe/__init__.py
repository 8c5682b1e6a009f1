"""Observing trainqd: its log, Prometheus metrics, usage reports, loop lag and profiles."""
