"""Slurm's commands as small stand-ins (the real cluster's are in tests/slurm): sbatch, run
as the job's owner, takes a moment, notes how many sbatch processes run at once, and answers
with its own pid or the id its owner chose; squeue says every job runs; scancel refuses, as
Slurm does, a caller who is neither root nor the owner of the job it names (here tq-bob)."""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from tests.support.accounts import Accounts
from tests.support.daemon import scratch_dir

# Run as the job's owner: what it prints is hers to choose (here, through a file of hers).
SBATCH = """#!/bin/sh
cat >/dev/null
touch {running}/$$
sleep 0.3
ls {running} | wc -l >>{peaks}
rm -f {running}/$$
cat {forged} 2>/dev/null || echo $$
"""
SQUEUE = """#!/bin/sh
for arg in "$@"; do
  case "$arg" in --jobs=*) ids=$(echo "${arg#--jobs=}" | tr , ' ');; esac
done
for id in $ids; do echo "$id RUNNING"; done
"""
# Slurm lets root and a job's owner cancel or signal it, nobody else.
SCANCEL = """#!/bin/sh
job=$(eval echo \\${$#})
owner={owners}
if [ "$(id -u)" != 0 ] && [ "$(id -u)" != "$owner" ]; then
  echo "denied uid=$(id -u) $*" >>{log}
  echo "scancel: error: Kill job error on job id $job: Access/permission denied" >&2
  exit 1
fi
echo "done uid=$(id -u) $*" >>{log}
"""


@contextlib.contextmanager
def fake_slurm_commands(accounts: Accounts) -> Iterator[Path]:
    """sbatch, squeue and scancel in <base>/bin, scancel.log and peaks beside them, and
    tq-alice's own directory (<base>/alice) where she may leave a forged answer."""
    base = scratch_dir("tqslurm")  # the users run these commands
    log = base / "scancel.log"
    log.touch()
    os.chmod(log, 0o666)  # noqa: S103 (written by whoever scancel runs as)
    bin_dir = base / "bin"
    bin_dir.mkdir(mode=0o755)
    scancel = SCANCEL.replace("{owners}", str(accounts.bob.uid)).replace("{log}", str(log))
    hers = base / "alice"  # tq-alice's own directory
    hers.mkdir(mode=0o755)
    os.chown(hers, accounts.alice.uid, accounts.alice.gid)
    running = base / "running"  # one file per sbatch under way
    running.mkdir()
    os.chmod(running, 0o1777)  # noqa: S103 (sbatch runs as each job's owner)
    peaks = base / "peaks"
    peaks.touch()
    os.chmod(peaks, 0o666)  # noqa: S103
    sbatch = SBATCH.replace("{forged}", str(hers / "forged")).replace("{running}", str(running))
    sbatch = sbatch.replace("{peaks}", str(peaks))
    for name, text in (("sbatch", sbatch), ("squeue", SQUEUE), ("scancel", scancel)):
        (bin_dir / name).write_text(text)
        os.chmod(bin_dir / name, 0o755)  # noqa: S103
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)
