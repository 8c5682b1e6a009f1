"""A personal trainqd's subprocess job (the monitor is not root): /opt/ml and SageMaker's host
name come from a user namespace of the monitor's own, where the kernel allows one, with the
job's uid and gid unchanged and nothing of it visible on the host."""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

import pytest

from tests.support.monitor import NOBODY, attempt_of, give_to, run_as_nobody, trainer
from trainq.core.spec import parse_spec
from trainqd.attempts.contract import config_files
from trainqd.monitor.privileges import SAGEMAKER_ROOT

pytestmark = pytest.mark.multiuser


def test_a_personal_monitor_gives_opt_ml_and_algo_1_in_a_user_namespace() -> None:
    # The mountpoint a root trainqd makes on first use (only root can make it).
    Path(SAGEMAKER_ROOT).mkdir(mode=0o755, parents=True, exist_ok=True)
    hosts_before = Path("/etc/hosts").read_bytes()
    with attempt_of([], owner=NOBODY) as a:
        files = config_files(parse_spec({"command": ["true"]}))
        for rel in files:
            (a.ml_root / rel).parent.mkdir(parents=True, exist_ok=True)
        give_to(a, NOBODY)
        for path in (a.ml_root, *a.ml_root.rglob("*")):
            os.chown(path, 65534, 65534)
        env = {**a.launch.env, "SM_OUTPUT_DATA_DIR": str(a.ml_root / "output" / "data")}
        a.launch = replace(a.launch, argv=trainer("sagemaker_paths.py"), env=env, ml_files=files)
        done = run_as_nobody(a.launch.to_json())
        assert done.returncode == 0, done.stderr.decode()
        record = a.record()
        assert record is not None
        assert record.outcome == "exited", a.stderr() + a.monitor_log()
        written = a.ml_root / "checkpoints" / "x"
        assert written.read_text() == "attempt 1\n"
        assert written.stat().st_uid == 65534  # the job's own uid, not an unmapped one
        report = json.loads(a.data("paths.json").read_text())
        assert report["resolved"] == "127.0.0.1"
        assert report["getent"] == ["127.0.0.1", "algo-1"]
        assert "warning" not in a.monitor_log()
    assert Path("/etc/hosts").read_bytes() == hosts_before
    assert not Path(SAGEMAKER_ROOT).is_mount()
    assert list(Path(SAGEMAKER_ROOT).iterdir()) == []
