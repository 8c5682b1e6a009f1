"""trainq: a GPU job scheduler for one shared workstation (the client side).

Nothing is imported here beyond the version, so `trainq` starts fast. The vocabulary shared
with trainqd lives in `trainq.core`.
"""

from trainq.core import __version__

__all__ = ["__version__"]
