"""What runs is what was submitted: a job's source directory copied at submit (`--snapshot`,
on by default with `--source-dir` or `sagemaker_submit_directory`), with a real trainqd, real
trainers and the real `trainq`."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.daemon import Daemon, running_daemon
from trainq.core.errors import ExitCode

TRAIN = "import os; print(open('version').read().strip(), os.getcwd())\n"


def source(tmp_path: Path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "train.py").write_text(TRAIN)
    (src / "version").write_text("v1\n")
    (src / "lib").mkdir()
    (src / "lib" / "util.py").write_text("X = 1\n")
    (src / "link").symlink_to("lib/util.py")
    return src


def submit(daemon: Daemon, src: Path, *args: str) -> int:
    done = daemon.cli("submit", "--after", "1:any", *args, "--", "python3", "train.py", cwd=src)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_a_queued_job_runs_its_source_as_it_was_at_submit(daemon: Daemon, tmp_path: Path) -> None:
    blocker = daemon.submit({"command": ["sleep", "60"]})["id"]
    assert blocker == 1
    src = source(tmp_path)
    snapped = submit(daemon, src, "--source-dir", ".")
    unsnapped = submit(daemon, src, "--source-dir", ".", "--no-snapshot")
    assert daemon.job(snapped)["spec"]["source_dir"] == str(src)
    # Edited while the jobs wait.
    (src / "version").write_text("v2\n")
    (src / "train.py").write_text(TRAIN.replace("print(", "print('edited',"))
    daemon.cli("stop", "--grace", "0", "1")
    for job in (snapped, unsnapped):
        daemon.wait_state(job)
    code = daemon.state_dir / "jobs" / str(snapped) / "code"
    assert daemon.cli("logs", str(snapped)).stdout == f"v1 {code}\n"
    assert daemon.cli("logs", str(unsnapped)).stdout == f"edited v2 {src}\n"
    assert (code / "link").readlink() == Path("lib/util.py")
    assert (code / "lib" / "util.py").read_text() == "X = 1\n"
    assert not (daemon.state_dir / "jobs" / str(unsnapped) / "code").exists()


def test_the_sagemaker_submit_directory_is_copied_by_default(
    daemon: Daemon, tmp_path: Path
) -> None:
    src = source(tmp_path)
    spec = {
        "command": ["sh", "-c", "cat $SM_MODULE_DIR/version; echo $SM_MODULE_DIR"],
        "hyperparameters": {"sagemaker_submit_directory": json.dumps(str(src))},
    }
    job = daemon.submit(spec)["id"]
    done = daemon.wait_state(job)
    code = daemon.state_dir / "jobs" / str(job) / "code"
    assert done["state"] == "COMPLETED"
    assert daemon.cli("logs", str(job)).stdout == f"v1\n{code}\n"


def test_a_source_that_cannot_be_copied_is_refused_in_one_line(tmp_path: Path) -> None:
    with running_daemon(config={"snapshot_max_bytes": 1024 * 1024}, gpus="fake:1") as daemon:
        src = source(tmp_path)
        (src / "secrets").symlink_to("/etc/shadow")
        done = daemon.cli("submit", "--source-dir", str(src), "--", "true")
        assert (done.returncode, done.stderr) == (
            ExitCode.USAGE,
            f"trainq: snapshot: source directory {src} secrets is a link out of it "
            "(to /etc/shadow)\n",
        )
        (src / "secrets").unlink()
        (src / "lib" / "up").symlink_to("../../elsewhere")
        done = daemon.cli("submit", "--source-dir", str(src), "--", "true")
        assert done.returncode == ExitCode.USAGE
        assert "lib/up is a link out of it (to ../../elsewhere)" in done.stderr
        (src / "lib" / "up").unlink()
        (src / "big").write_bytes(b"x" * (2 * 1024 * 1024))
        done = daemon.cli("submit", "--source-dir", str(src), "--", "true")
        assert (done.returncode, done.stderr) == (
            ExitCode.USAGE,
            f"trainq: snapshot: source directory {src} is larger than 1 MiB\n",
        )
        done = daemon.cli("submit", "--snapshot", "--", "true")
        assert done.returncode == ExitCode.USAGE
        assert done.stderr.startswith("trainq: snapshot: there is no source to copy")
        # Nothing was queued, no staging copy is left, and trainqd serves on.
        assert daemon.get("/v1/jobs?all=true").json()["jobs"] == []
        assert list((daemon.state_dir / "jobs" / ".staging").iterdir()) == []
        assert daemon.cli("health").returncode == 0
