"""Make the GPU tests runnable from a checkout on a GPU machine where trainq is not installed:
`python3 -m pytest tests/gpu -p no:cacheprovider` with torch, nvidia-ml-py and pytest alone."""

from __future__ import annotations

import sys
from pathlib import Path

_REPOSITORY = Path(__file__).resolve().parents[2]

for _source in (_REPOSITORY, _REPOSITORY / "daemon", _REPOSITORY / "cli"):
    if str(_source) not in sys.path:
        sys.path.insert(0, str(_source))
