"""The Slurm batch script `trainq export --to slurm` writes, run by bash up to the trainer:
the spec arrives as it was and the shell expands nothing of it (tests/slurm runs such
scripts on a real Slurm)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from trainq.core.export import slurm
from trainq.core.spec import parse_spec


def test_the_spec_travels_verbatim_and_the_shell_expands_nothing_of_it(tmp_path: Path) -> None:
    hostile = "$(touch pwned) `touch pwned2` 'q' \"dq\" \\ TRAINQ_SPEC_END\nTRAINQ_SPEC_END"
    job = parse_spec(
        {
            "command": ["python3", "train.py"],
            "hyperparameters": {"note": hostile},
            "environment": {"X": hostile},
            "channels": {"train": {"source": "/data/a b/$HOME"}},
        }
    )
    script = slurm.batch_script(job, python="/opt/my python/bin/python", job_dir_base=str(tmp_path))
    assert "exec '/opt/my python/bin/python' -m trainqd.run" in script
    # Run the script up to the trainer, with the variables Slurm would set.
    head = script.split("\nexec ", 1)[0]
    done = subprocess.run(
        ["bash", "-c", head],
        env={"SLURM_JOB_ID": "7", "SLURM_SUBMIT_DIR": "/nonexistent", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    written = json.loads((tmp_path / "trainq-7" / "spec.json").read_text())
    assert parse_spec(written) == job
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trainq-7"]  # nothing ran
