"""A real single-host Slurm for the export tests: the repository's `scripts/slurm-local`
(slurmctld, slurmd and munge under a scratch directory, fake GPUs, its own ports), started
once for the session and stopped after it. Needs root and Debian's slurm-wlm and munge (tests/run
installs them); when Slurm cannot start the tests fail with what it said."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

# The real users of the multi-user tests and the container tests' engine and images, for
# jobs of ordinary users and container jobs through trainqd's Slurm back end.
from tests.containers.conftest import engine
from tests.multiuser.conftest import accounts, shared_dir

__all__ = ["accounts", "engine", "shared_dir"]

REPO = Path(__file__).resolve().parents[2]
SLURM_LOCAL = REPO / "scripts" / "slurm-local"
GPUS = 2
START_TIMEOUT = 90


@dataclass(frozen=True)
class Slurm:
    base: Path
    env: dict[str, str]

    def run(self, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv),
            env=self.env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def job_fields(self, job_id: str) -> dict[str, str]:
        """`scontrol show job` as a dict ({} once Slurm has forgotten the job)."""
        shown = self.run("scontrol", "show", "job", "-o", job_id)
        fields: dict[str, str] = {}
        for word in shown.stdout.split():
            key, sep, value = word.partition("=")
            if sep:
                fields.setdefault(key, value)
        return fields


def _free_port_pair() -> int:
    """A port P with P and P + 1 free (slurmctld and slurmd)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port >= 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 1))
            except OSError:
                continue
        return port
    raise RuntimeError("no two free consecutive ports")


@pytest.fixture(scope="session")
def slurm() -> Iterator[Slurm]:
    missing = [t for t in ("sbatch", "slurmctld", "slurmd", "munged") if not shutil.which(t)]
    if os.geteuid() != 0:
        pytest.fail("the Slurm tests need root (slurm-local runs slurmctld and slurmd)")
    if missing:
        pytest.fail(
            f"the Slurm tests need slurm-wlm and munge ({', '.join(missing)} missing): "
            "tests/run installs them"
        )
    # munged wants every directory above its socket searchable by all: pytest's temporary
    # directories are not.
    base = Path(tempfile.mkdtemp(prefix="trainq-slurm-"))
    base.chmod(0o711)
    env = {
        **os.environ,
        "BASE": str(base),
        "GPUS": str(GPUS),
        "CPUS": "8",
        "PORT0": str(_free_port_pair()),
        "SLURM_CONF": str(base / "slurm.conf"),
    }
    started = subprocess.run(
        ["bash", str(SLURM_LOCAL), "start"],
        env=env,
        capture_output=True,
        text=True,
        timeout=START_TIMEOUT,
        check=False,
    )
    try:
        if started.returncode != 0:
            pytest.fail(
                f"Slurm did not start (slurm-local exit {started.returncode}): "
                f"{started.stdout[-2000:]} {started.stderr[-2000:]}"
            )
        yield Slurm(base, env)
    finally:
        subprocess.run(["bash", str(SLURM_LOCAL), "stop"], env=env, timeout=60, check=False)
        shutil.rmtree(base, ignore_errors=True)
