"""scripts/slurm-local refuses bad settings with one line, before it starts or stops anything
(the Slurm it starts is exercised by tests/slurm and bench/trace.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

SLURM_LOCAL = Path(__file__).resolve().parents[2] / "scripts" / "slurm-local"


def run(tmp_path: Path, *argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {
        k: v for k, v in os.environ.items() if k not in {"BASE", "ACCOUNTING", "GPUS", "NODES"}
    }
    return subprocess.run(
        [str(SLURM_LOCAL), *argv],
        env={**clean, **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.parametrize(
    ("argv", "env", "said"),
    [
        (("start",), {}, "slurm-local: BASE must name a scratch directory"),
        (("launch",), {"BASE": "base"}, "slurm-local: usage: BASE=DIR"),
        (("start",), {"BASE": "base", "ACCOUNTING": "yes"}, "ACCOUNTING is 0 or 1, not 'yes'"),
        (("start",), {"BASE": "base", "GPUS": "eight"}, "GPUS must be a whole number, not 'eight'"),
        (("start",), {"BASE": "base", "NODES": "two"}, "NODES must be a whole number, not 'two'"),
        (("start",), {"BASE": "base", "NODES": "0"}, "slurm-local: NODES must be at least 1"),
    ],
)
def test_a_bad_setting_is_refused_in_one_line_and_nothing_is_made(
    tmp_path: Path, argv: tuple[str, ...], env: dict[str, str], said: str
) -> None:
    done = run(tmp_path, *argv, **env)
    assert done.returncode == 1
    assert said in done.stderr
    assert len(done.stderr.splitlines()) == 1
    assert done.stdout == ""
    assert not (tmp_path / "base").exists()
