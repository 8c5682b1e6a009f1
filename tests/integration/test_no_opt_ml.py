"""Where a subprocess job cannot have /opt/ml, it still runs, with its ml root in
SAGEMAKER_BASE_DIR, and its attempt says so: in the monitor's exit record, in the API's
attempt record and in `trainq show`.

Two ways to get there, each in a mount namespace of the test's own so that nothing of the
host changes for anyone else:
- a personal trainqd's monitor (not root) where the kernel refuses it a user namespace:
  run in a chroot (onto a bind of `/`, so every path is the same), where unshare(2)
  refuses CLONE_NEWUSER;
- a root trainqd on a host where /opt/ml cannot be made (/opt is read-only).
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import Daemon, scratch_dir, supervised
from tests.support.monitor import NOBODY, PYTHON, attempt_of, give_to, personal_monitor, python
from trainq.job_detail import NO_OPT_ML_NOTE
from trainqd.monitor.records import parse_exit_record

pytestmark = pytest.mark.multiuser

# Writes where it found its ml root: SAGEMAKER_BASE_DIR always, /opt/ml only if it is that.
WHERE_AM_I = """
import json, os
base = os.environ["SAGEMAKER_BASE_DIR"]
at_opt_ml = os.path.isdir("/opt/ml") and os.path.samefile("/opt/ml", base)
os.makedirs(os.path.join(base, "checkpoints"), exist_ok=True)
with open(os.path.join(base, "checkpoints", "where.json"), "w") as f:
    json.dump({"at_opt_ml": at_opt_ml}, f)
"""


def in_chroot_as_nobody(launch_json: bytes, jail: Path) -> subprocess.CompletedProcess[bytes]:
    enter = 'mount --rbind / "$0" && exec chroot "$0" "$@"'
    drop = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    command = personal_monitor()
    return subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation=private",
            "sh",
            "-c",
            enter,
            str(jail),
            *drop,
            *command,
        ],
        input=launch_json,
        capture_output=True,
        timeout=30,
        check=False,
    )


def test_a_personal_monitor_refused_a_user_namespace_says_there_was_no_opt_ml() -> None:
    with attempt_of(python(WHERE_AM_I), owner=NOBODY) as a:
        give_to(a, NOBODY)
        for path in (a.ml_root, *a.ml_root.rglob("*")):
            os.chown(path, 65534, 65534)
        a.launch = replace(a.launch, env={**a.launch.env, "SAGEMAKER_BASE_DIR": str(a.ml_root)})
        jail = a.root / "jail"
        jail.mkdir()
        done = in_chroot_as_nobody(a.launch.to_json(), jail)
        assert done.returncode == 0, done.stderr.decode()
        record = a.record()
        assert record is not None
        assert record.outcome == "exited", a.stderr() + a.monitor_log()
        assert record.exit_code == 0, a.stderr() + a.monitor_log()
        assert record.opt_ml is False
        where = json.loads((a.ml_root / "checkpoints" / "where.json").read_text())
        assert where == {"at_opt_ml": False}  # it ran all the same, from SAGEMAKER_BASE_DIR
        assert "no private mount namespace" in a.monitor_log()


def test_the_exit_record_s_opt_ml_is_a_boolean_or_nothing() -> None:
    record = {"job_id": 1, "attempt": 1, "outcome": "exited", "ended_at": 1.0, "exit_code": 0}
    assert parse_exit_record(record).opt_ml is None
    assert parse_exit_record({**record, "opt_ml": False}).opt_ml is False
    hostile: object
    for hostile in ("no", 0, 1, [], {"x": 1}, "x" * 100000):
        with pytest.raises(ValueError, match="opt_ml"):
            parse_exit_record({**record, "opt_ml": hostile})


class NoOptMlDaemon(Daemon):
    """trainqd (root) in a mount namespace where /opt is read-only and has no ml in it."""

    def argv(self) -> list[str]:
        hide = 'mount -t tmpfs -o ro,size=64k tmpfs /opt && exec "$@"'
        return [
            "unshare",
            "--mount",
            "--propagation=private",
            "sh",
            "-c",
            hide,
            "-",
            *super().argv(),
        ]


def run_where_am_i(daemon: Daemon) -> tuple[dict[str, Any], dict[str, Any], str]:
    """(the job as the API shows it, what its trainer found, `trainq show`'s output)."""
    job = daemon.submit({"command": [PYTHON, "-c", WHERE_AM_I]})
    done = daemon.wait_state(job["id"], "COMPLETED", "FAILED", timeout=30)
    assert done["state"] == "COMPLETED", done
    where = json.loads((Path(done["job_dir"]) / "checkpoints" / "where.json").read_text())
    shown = daemon.cli("show", str(job["id"]))
    assert shown.returncode == 0, shown.stderr
    return done, where, " ".join(shown.stdout.split())


def test_trainq_show_says_a_job_had_no_opt_ml() -> None:
    base = scratch_dir()
    with supervised(NoOptMlDaemon(base), remove=base) as daemon:
        done, where, shown = run_where_am_i(daemon)
        assert where == {"at_opt_ml": False}  # it ran all the same, from SAGEMAKER_BASE_DIR
        assert done["attempts"][0]["opt_ml"] is False
        assert NO_OPT_ML_NOTE in shown, shown

    # Where /opt/ml is there, the attempt says so and `show` adds nothing.
    base = scratch_dir()
    with supervised(Daemon(base), remove=base) as daemon:
        done, where, shown = run_where_am_i(daemon)
        assert where == {"at_opt_ml": True}
        assert done["attempts"][0]["opt_ml"] is True
        assert "no /opt/ml" not in shown
