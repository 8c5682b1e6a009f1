"""The eBPF device program of cgroup v2 against the real kernel: loaded, attached to a fresh
cgroup, it refuses a process in that cgroup the GPU nodes (195:N) it was not given and
nothing else. The v1 devices cgroup is not involved: the process stays in the v1 root, so
what refuses is the program alone (root and a cgroup v2 tree needed)."""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.cgroups import open_in, scratch_cgroup
from trainqd.monitor import cgroup, device_filter, devices

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="BPF and cgroups are root's")


@pytest.fixture
def nodes(tmp_path: Path) -> dict[str, str]:
    """Character devices 195:0..2 and nvidiactl (195:255), as the NVIDIA driver makes them,
    and a block device 195:0 (another driver's: major numbers are per type)."""
    made = {}
    for name, kind, minor in [
        ("nvidia0", stat.S_IFCHR, 0),
        ("nvidia1", stat.S_IFCHR, 1),
        ("nvidia2", stat.S_IFCHR, 2),
        ("nvidiactl", stat.S_IFCHR, 255),
        ("block0", stat.S_IFBLK, 0),
    ]:
        path = tmp_path / name
        os.mknod(path, kind | 0o666, os.makedev(devices.NVIDIA_MAJOR, minor))
        made[name] = str(path)
    return made


@pytest.fixture
def fresh_cgroup() -> Iterator[str]:
    with scratch_cgroup("bpf") as path:
        yield path


def test_the_program_alone_denies_other_gpus_nodes(
    nodes: dict[str, str], fresh_cgroup: str
) -> None:
    device_filter.attach(fresh_cgroup, devices.NVIDIA_MAJOR, {1} | devices.CONTROL_MINORS)
    report = open_in(fresh_cgroup, ["/dev/null", *nodes.values()])

    assert report["/dev/null"] == "opened"
    # Let through (no driver answers, so ENXIO) or refused by the program (EPERM).
    assert report[nodes["nvidia1"]] == "ENXIO"
    assert report[nodes["nvidiactl"]] == "ENXIO"
    assert report[nodes["nvidia0"]] == "EPERM"
    assert report[nodes["nvidia2"]] == "EPERM"
    assert report[nodes["block0"]] == "ENXIO"
    # In the fresh v2 cgroup, and in no v1 devices cgroup but the root.
    cgroups = report["cgroups"]
    assert isinstance(cgroups, list)
    assert "0::" + os.path.join(cgroup.own_cgroup(), os.path.basename(fresh_cgroup)) in cgroups
    assert all(line.endswith(":/") for line in cgroups if ":devices:" in line)

    # Outside the cgroup nothing changed.
    with pytest.raises(OSError) as err:
        os.open(nodes["nvidia0"], os.O_RDWR)
    assert err.value.errno == errno.ENXIO


def test_a_job_given_no_gpu_keeps_the_control_nodes(
    nodes: dict[str, str], fresh_cgroup: str
) -> None:
    device_filter.attach(fresh_cgroup, devices.NVIDIA_MAJOR, devices.CONTROL_MINORS)
    report = open_in(fresh_cgroup, [nodes["nvidia0"], nodes["nvidia1"], nodes["nvidiactl"]])
    assert [report[nodes[n]] for n in ("nvidia0", "nvidia1", "nvidiactl")] == [
        "EPERM",
        "EPERM",
        "ENXIO",
    ]


def test_the_verifiers_refusal_is_said_with_its_log(monkeypatch: pytest.MonkeyPatch) -> None:
    # A program that ends without returning: the verifier must refuse it, and say why.
    monkeypatch.setattr(
        device_filter, "program", lambda major, minors: device_filter._insn(0xB7, imm=1)
    )
    with pytest.raises(device_filter.FilterUnavailable) as err:
        device_filter.load(devices.NVIDIA_MAJOR, set())
    said = str(err.value)
    assert said.startswith("cannot load an eBPF device program: Invalid argument: ")
    assert "last insn is not an exit" in said
    assert "\n" not in said


def test_only_the_attempts_own_cgroup_gets_the_program(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # This process is in no attempt's cgroup (as a monitor whose cgroup could not be made is
    # still in trainqd's): nothing is attached where every process of trainqd would be
    # confined, and with the v1 path left out the job is said to be unconfined.
    monkeypatch.setenv(devices.NO_V1_ENV, "1")
    said = devices.confine(7, 1, {0}, str(tmp_path / "jobs" / "7" / "ml"))
    assert said == (
        "the job could open every GPU's node: no eBPF device program (the monitor is not in "
        f"the attempt's own cgroup), no devices cgroup v1 ({devices.NO_V1_ENV}=1)"
    )
