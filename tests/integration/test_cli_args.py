"""The command line in a fresh interpreter: `python -m trainq`, and the fast commands and
usage errors without rich, pydantic or httpx."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from trainq import __version__


def test_python_dash_m_and_no_heavy_imports(tmp_path: Path) -> None:
    # The fast commands, and usage errors, must not pay for rich, pydantic or httpx (see
    # trainq.cli's docstring); typer is loaded, its rich help is not.
    probe = (
        "import sys\n"
        "from trainq.cli import main\n"
        f"status = main(['--socket', {str(tmp_path / 'x.sock')!r}, 'submit', '--', 'true'])\n"
        "usage = main(['submit', '--gpus', 'two'])\n"
        "heavy = sorted(m for m in ('rich', 'pydantic', 'httpx') if m in sys.modules)\n"
        "print(status, usage, heavy)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=False, timeout=30
    )
    assert result.stdout == "7 2 []\n"
    module = subprocess.run(
        [sys.executable, "-m", "trainq", "--version"],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    )
    assert (module.returncode, module.stdout) == (0, f"trainq {__version__}\n")
