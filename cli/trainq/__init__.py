"""trainq: a GPU job scheduler for one shared workstation (the client side).

Nothing is imported here, so `trainq` starts fast and `trainqd` can import the wire models.
"""

__version__ = "0.1.0"
