"""trainqd: the trainq daemon.

Kept free of imports: every job's monitor imports `trainqd.monitor` with the standard library
alone, and this file runs first.
"""
