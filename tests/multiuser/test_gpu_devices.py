"""A job sees only its GPUs: the device nodes of GPUs it was not given cannot be opened
from it (an eBPF device program on the attempt's cgroup v2 and a devices cgroup v1 per
attempt, each enough alone), while its own can. The simulated GPUs get real character
devices 195:N, as NVIDIA's /dev/nvidiaN are; with no driver behind them, opening one the job
may use fails with ENXIO, and one it may not with EPERM."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import pytest

from tests.support.accounts import ADMINS, Accounts
from tests.support.daemon import Daemon, python_job, running_daemon
from tests.support.gpu_devices import ALLOWED, DENIED, NVIDIA_MAJOR
from tests.support.users import submit_as, trainq_as

pytestmark = pytest.mark.multiuser


def probe(daemon: Daemon, accounts: Accounts, shared_dir: Path, nodes: list[str], gpus: int) -> Any:
    spec = python_job("device_probe.py", *nodes, gpus=gpus, working_dir=str(shared_dir))
    job = submit_as(daemon, accounts.alice, spec)
    done = daemon.wait_state(job["id"], timeout=30)
    assert done["state"] == "COMPLETED", done
    report = json.loads((Path(done["job_dir"]) / "output" / "data" / "devices.json").read_text())
    return done["attempts"][0]["gpus"], report


def test_a_job_opens_its_own_gpus_only(
    gpu_host: tuple[Daemon, list[str]], accounts: Accounts, shared_dir: Path
) -> None:
    workstation, gpu_nodes = gpu_host
    *gpu_paths, ctl = gpu_nodes
    for minor, path in enumerate(gpu_paths):  # as the driver makes them: root's, 0666
        status = os.stat(path)
        assert stat.S_ISCHR(status.st_mode), path
        assert status.st_rdev == os.makedev(NVIDIA_MAJOR, minor)
        assert (status.st_uid, stat.S_IMODE(status.st_mode)) == (0, 0o666)
    assert os.stat(ctl).st_rdev == os.makedev(NVIDIA_MAJOR, 255)
    given, report = probe(workstation, accounts, shared_dir, gpu_nodes, gpus=2)
    assert len(given) == 2
    for index, path in enumerate(gpu_paths):
        assert report[path] == (ALLOWED if index in given else DENIED), (path, given)
    assert report[ctl] == ALLOWED  # the shared control node every CUDA program opens
    # Nor can it leave its devices cgroup, or its cgroup v2 with the eBPF program.
    assert report["escape"] in ("EACCES", "EPERM")
    assert report["escape_v2"] in ("EACCES", "EPERM")
    # trainqd serves another user meanwhile.
    assert trainq_as(workstation, accounts.bob, "ls").returncode == 0

    # A job given no GPU opens none.
    _, report = probe(workstation, accounts, shared_dir, gpu_nodes, gpus=0)
    assert [report[p] for p in gpu_paths] == [DENIED] * 4

    # Nothing changed for the host.
    for path in gpu_nodes:
        with pytest.raises(OSError) as err:
            os.open(path, os.O_RDWR)
        assert err.value.errno == 6  # ENXIO


def test_the_ebpf_device_program_alone_confines_a_job(
    bpf_gpu_host: tuple[Daemon, list[str]], accounts: Accounts, shared_dir: Path
) -> None:
    """What a pure cgroup v2 host has: no devices cgroup, the eBPF program alone."""
    workstation, gpu_nodes = bpf_gpu_host
    *gpu_paths, ctl = gpu_nodes
    given, report = probe(workstation, accounts, shared_dir, gpu_nodes, gpus=1)
    assert len(given) == 1
    for index, path in enumerate(gpu_paths):
        assert report[path] == (ALLOWED if index in given else DENIED), (path, given)
    assert report[ctl] == ALLOWED
    # The job is in no devices cgroup v1 but the root one, and in its attempt's cgroup v2,
    # which it cannot leave.
    v1 = [line for line in report["cgroups"] if ":devices:" in line]
    assert v1 == [] or v1[0].endswith(":/"), v1
    v2 = next(line for line in report["cgroups"] if line.startswith("0::"))
    assert v2.rsplit("/", 1)[1].startswith("job-"), v2
    assert report["escape_v2"] in ("EACCES", "EPERM")


def test_the_nodes_a_killed_trainqd_made_are_removed_by_the_next(
    accounts: Accounts, shared_dir: Path
) -> None:
    """`kill -9` leaves trainqd's nodes behind (mode 0666: anyone may open them); the next
    trainqd knows them for its own by its record and removes them at its clean stop, and
    leaves alone the node it found there and did not make (a driver's, as far as it knows)."""
    nodes = shared_dir / "dev"
    nodes.mkdir()
    os.mknod(nodes / "nvidia1", 0o600 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, 1))
    theirs = os.lstat(nodes / "nvidia1")
    config = {"admin_group": ADMINS, "fake_gpu_device_dir": str(nodes)}
    with running_daemon(gpus="fake:2", config=config) as daemon:
        assert sorted(path.name for path in nodes.iterdir()) == ["nvidia0", "nvidia1", "nvidiactl"]
        daemon.kill()
        assert (nodes / "nvidia0").exists()  # nothing removes them at a SIGKILL
        daemon.start()
        assert "device nodes kept that trainq did not make" in daemon.log()
        assert trainq_as(daemon, accounts.bob, "gpus").returncode == 0
        assert daemon.stop() == 0
    assert sorted(path.name for path in nodes.iterdir()) == ["nvidia1"]
    left = os.lstat(nodes / "nvidia1")
    assert (left.st_ino, left.st_mode, left.st_rdev) == (
        theirs.st_ino,
        theirs.st_mode,
        theirs.st_rdev,
    )
