"""The systemd files under systemd/: the unit passes `systemd-analyze verify` (on a copy
whose ExecStart is this venv's trainqd), carries the directives that keep jobs running
across restarts and none of the sandboxing that would break them, and the tmpfiles.d and
sysusers.d entries apply cleanly to a scratch root and agree with trainq's default paths."""

from __future__ import annotations

import stat
import subprocess
from collections import defaultdict
from pathlib import Path

from tests.support.daemon import TRAINQD
from trainq.core.paths import SYSTEM_CONFIG, SYSTEM_SOCKET, SYSTEM_STATE_DIR
from trainqd.main import EX_CONFIG

REPO = Path(__file__).resolve().parents[2]
SYSTEMD = REPO / "systemd"
UNIT = SYSTEMD / "trainqd.service"
TMPFILES = SYSTEMD / "trainq.conf"
SYSUSERS = SYSTEMD / "trainq-sysusers.conf"
INSTALLED_TRAINQD = "/opt/trainq/bin/trainqd"

# Each would break jobs or containers (the unit's comments say how), or split a restarted
# daemon's view of the filesystem from that of the jobs it re-attaches to.
BREAKS_JOBS = (
    "ProtectSystem", "ProtectHome", "PrivateTmp", "PrivateDevices", "PrivateNetwork",
    "PrivateMounts", "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs",
    "ProtectControlGroups", "ProtectProc", "ProtectClock", "ProtectHostname", "ReadOnlyPaths",
    "InaccessiblePaths", "TemporaryFileSystem", "DevicePolicy", "DeviceAllow",
    "NoNewPrivileges", "RestrictSUIDSGID", "RestrictNamespaces", "CapabilityBoundingSet",
    "SystemCallFilter", "SystemCallArchitectures", "MemoryDenyWriteExecute",
    "RestrictAddressFamilies", "DynamicUser", "User", "MemoryMax", "CPUQuota",
    "OOMScoreAdjust", "RuntimeDirectory",
)  # fmt: skip


def directives(path: Path) -> dict[str, dict[str, list[str]]]:
    """{section: {key: [values, in order]}} of a unit file; comments ignored."""
    sections: dict[str, dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    current = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
            continue
        key, sep, value = line.partition("=")
        assert sep, f"not a directive: {raw!r}"
        sections[current][key.strip()].append(value.strip())
    return sections


def verify(unit: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["systemd-analyze", "verify", "--man=no", str(unit)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def copy_for_this_venv(directory: Path, extra: str = "") -> Path:
    """The unit as installed, but starting this venv's trainqd (verify checks the binary)."""
    text = UNIT.read_text()
    assert text.count(f"ExecStart={INSTALLED_TRAINQD}\n") == 1
    copy = directory / "trainqd.service"
    copy.write_text(
        text.replace(f"ExecStart={INSTALLED_TRAINQD}\n", f"ExecStart={TRAINQD}\n{extra}")
    )
    return copy


def complaints(done: subprocess.CompletedProcess[str]) -> list[str]:
    """What verify said about our unit (it may mention units of the host as well)."""
    return [line for line in (done.stdout + done.stderr).splitlines() if "trainqd" in line]


def test_the_unit_passes_systemd_analyze_verify(tmp_path: Path) -> None:
    done = verify(copy_for_this_venv(tmp_path))
    assert done.returncode == 0, done.stderr
    assert complaints(done) == []


def test_verify_would_notice_a_broken_unit(tmp_path: Path) -> None:
    """The check above can fail: a bad value is reported (with status 0, hence the scan)."""
    done = verify(copy_for_this_venv(tmp_path, extra="TasksMax=plenty\nKilMode=process\n"))
    said = "\n".join(complaints(done))
    assert "Invalid maximum tasks value 'plenty'" in said
    assert "Unknown key 'KilMode'" in said


def test_the_service_notifies_and_spares_jobs_on_stop_and_restart() -> None:
    service = directives(UNIT)["Service"]
    assert service["Type"] == ["notify"]
    assert service["NotifyAccess"] == ["main"]
    assert service["ExecStart"] == [INSTALLED_TRAINQD]
    assert service["KillMode"] == ["process"]  # SIGTERM to trainqd alone; monitors live on
    assert service["OOMPolicy"] == ["continue"]  # a trainer's OOM kill stops no service
    assert service["TasksMax"] == ["infinity"]
    assert service["Restart"] == ["on-failure"]
    # A bad configuration is not retried: trainqd's EX_CONFIG is the status that says so.
    assert str(EX_CONFIG) in service["RestartPreventExitStatus"][0].split()
    assert directives(UNIT)["Install"]["WantedBy"] == ["multi-user.target"]


def test_no_sandboxing_that_would_break_jobs() -> None:
    set_keys = {key for section in directives(UNIT).values() for key in section}
    assert sorted(set_keys.intersection(BREAKS_JOBS)) == []


def test_the_unit_and_trainq_agree_on_where_things_are() -> None:
    service = directives(UNIT)["Service"]
    assert Path("/var/lib", *service["StateDirectory"]) == SYSTEM_STATE_DIR
    assert Path("/etc", *service["ConfigurationDirectory"]) == SYSTEM_CONFIG.parent
    assert service["StateDirectoryMode"] == ["0755"]  # users reach their jobs' directories
    assert f"d {SYSTEM_SOCKET.parent} 0755 root root -" in TMPFILES.read_text().splitlines()


def test_tmpfiles_makes_the_socket_directory(tmp_path: Path) -> None:
    done = subprocess.run(
        ["systemd-tmpfiles", "--create", f"--root={tmp_path}", str(TMPFILES)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    made = (tmp_path / SYSTEM_SOCKET.parent.relative_to("/")).stat()
    assert stat.S_ISDIR(made.st_mode)
    assert (stat.S_IMODE(made.st_mode), made.st_uid, made.st_gid) == (0o755, 0, 0)


def test_sysusers_makes_the_groups_a_configuration_may_name(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    done = subprocess.run(
        ["systemd-sysusers", f"--root={tmp_path}", str(SYSUSERS)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    groups = [line.split(":")[0] for line in (tmp_path / "etc" / "group").read_text().split()]
    assert groups == ["trainq", "trainq-admins"]


def test_the_install_guide_names_every_file_it_installs() -> None:
    guide = (REPO / "docs" / "service.md").read_text()
    for path in sorted(SYSTEMD.iterdir()):
        assert f"systemd/{path.name}" in guide, path.name
