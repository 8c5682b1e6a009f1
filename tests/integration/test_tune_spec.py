"""The CLI never imports Optuna: a fresh interpreter loads the [tune] table's checks without
it."""

from __future__ import annotations

import subprocess
import sys


def test_the_cli_never_imports_optuna() -> None:
    code = (
        "import sys, trainq.cli, trainq.tune_command, trainq.core.tuning; "
        "sys.exit('optuna' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0
