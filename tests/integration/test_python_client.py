"""`import trainq` in a fresh interpreter stays cheap: nothing of the client's transport or
models loads until `trainq.Client` is asked for."""

from __future__ import annotations

import subprocess
import sys


def test_import_trainq_stays_cheap() -> None:
    probe = (
        "import sys, trainq\n"
        "print(sorted(m for m in ('h11', 'pydantic', 'rich', 'typer') if m in sys.modules))\n"
        "trainq.Client\n"
        "print('h11' in sys.modules, 'pydantic' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=30
    )
    assert done.stdout == "[]\nTrue False\n"
