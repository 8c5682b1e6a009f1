"""Real unix users for the multi-user tests: made with useradd, removed with userdel.

    tq-alice, tq-bob      ordinary users
    tq-carol              a member of tq-admins, the group the tests' trainqd names as
                          its admin_group

Several pytest sessions may run on one machine at once (two people in one tree, CI jobs
sharing a host), and the accounts are machine-wide. Each session holds a shared flock on
IN_USE_LOCK for as long as it uses them. Making them (and opening the directories the users
must pass through) and removing them happen under an exclusive flock on SETUP_LOCK, held for
those moments only. The last session out, the one whose non-blocking upgrade of IN_USE_LOCK
to exclusive succeeds, removes the accounts and restores the directory modes, which are kept
in MODES_FILE so that the session that opened a directory need not be the one that closes it.

The users must be able to run the test's Python and read trainq's source and the test
trainers. On CI that needs nothing; where the interpreter lives under a private directory
(pyenv in /root, mode 0700), that directory gets search permission for others (o+x,
never read) for the session.
"""

from __future__ import annotations

import contextlib
import fcntl
import grp
import json
import os
import pwd
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SETUP_LOCK = Path("/run/trainq-tests-multiuser.setup.lock")
IN_USE_LOCK = Path("/run/trainq-tests-multiuser.in-use.lock")
MODES_FILE = Path("/run/trainq-tests-multiuser.modes.json")
ADMINS = "tq-admins"
ALICE, BOB, CAROL = "tq-alice", "tq-bob", "tq-carol"
MEMBERS_OF_ADMINS = (CAROL,)
COMMENT = "trainq test user (tests/multiuser)"
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]  # every group, the primary one included (as initgroups sets)
    home: str

    @classmethod
    def lookup(cls, name: str) -> User:
        entry = pwd.getpwnam(name)
        groups = tuple(os.getgrouplist(name, entry.pw_gid))
        return cls(name, entry.pw_uid, entry.pw_gid, groups, entry.pw_dir)

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """An environment as a login would give: the user's HOME, USER and LOGNAME."""
        return {**(base or os.environ), "HOME": self.home, "USER": self.name, "LOGNAME": self.name}

    def run(
        self,
        argv: Sequence[str],
        *,
        cwd: Path | str = "/",
        input: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 30,
    ) -> subprocess.CompletedProcess[str]:
        """Run `argv` as this user with all their credentials: uid, primary gid and
        supplementary groups (subprocess's `user=` alone would keep root's groups)."""
        return subprocess.run(
            list(argv),
            user=self.uid,
            group=self.gid,
            extra_groups=list(self.groups),
            cwd=cwd,
            env=self.env(env),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def popen(self, argv: Sequence[str], **kw: Any) -> subprocess.Popen[Any]:
        """Start `argv` as this user with all their credentials, without waiting for it."""
        return subprocess.Popen(
            list(argv),
            user=self.uid,
            group=self.gid,
            extra_groups=list(self.groups),
            env=self.env(kw.pop("env", None)),
            **kw,
        )


@dataclass(frozen=True)
class Accounts:
    alice: User
    bob: User
    carol: User
    admins_gid: int

    @property
    def all(self) -> tuple[User, ...]:
        return (self.alice, self.bob, self.carol)


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()}")


def _exists(lookup: Callable[[str], object], name: str) -> bool:
    try:
        lookup(name)
    except KeyError:
        return False
    return True


def _create_accounts() -> None:
    if not _exists(grp.getgrnam, ADMINS):
        _run("groupadd", ADMINS)
    for name in (ALICE, BOB, CAROL):
        if not _exists(pwd.getpwnam, name):
            _run(
                "useradd",
                "--create-home",
                "--user-group",
                "--shell",
                "/bin/sh",
                "--comment",
                COMMENT,
                name,
            )
    for name in MEMBERS_OF_ADMINS:
        if name not in grp.getgrnam(ADMINS).gr_mem:
            _run("usermod", "--append", "--groups", ADMINS, name)


def _remove_accounts() -> None:
    problems = []
    for name in (ALICE, BOB, CAROL):
        if _exists(pwd.getpwnam, name):
            # --remove takes the home directory too. userdel refuses while a process of the
            # user lives: a test that leaked one is reported here.
            done = subprocess.run(
                ["userdel", "--remove", name], capture_output=True, text=True, check=False
            )
            if done.returncode not in (0, 12):  # 12: no home directory left to remove
                problems.append(f"userdel {name}: {done.stderr.strip()}")
    if _exists(grp.getgrnam, ADMINS):
        _run("groupdel", ADMINS)
    if problems:
        raise RuntimeError("; ".join(problems))


def _dirs_to_pass(paths: Sequence[Path]) -> list[Path]:
    """The directories a user passes through to reach each of `paths`, and each of `paths`
    that is a directory itself."""
    found: list[Path] = []
    for path in paths:
        for directory in [path, *path.parents] if path.is_dir() else list(path.parents):
            if directory not in found:
                found.append(directory)
    return found


def _open_for_others(paths: Sequence[Path]) -> None:
    """Give others search permission on the directories they must pass, remembering each
    mode changed in MODES_FILE (a mode recorded earlier, by another session, is kept)."""
    recorded: dict[str, int] = json.loads(MODES_FILE.read_text()) if MODES_FILE.exists() else {}
    for directory in _dirs_to_pass(paths):
        mode = stat.S_IMODE(directory.stat().st_mode)
        if mode & stat.S_IXOTH:
            continue
        recorded.setdefault(str(directory), mode)
        directory.chmod(mode | stat.S_IXOTH)
    if recorded:
        MODES_FILE.write_text(json.dumps(recorded))


def _restore_modes() -> None:
    if not MODES_FILE.exists():
        return
    for directory, mode in json.loads(MODES_FILE.read_text()).items():
        with contextlib.suppress(FileNotFoundError):
            Path(directory).chmod(mode)
    MODES_FILE.unlink()


def needed_paths() -> list[Path]:
    """What a test user runs or reads: the interpreter (through its symlinks), its standard
    library, the venv with trainq's dependencies, and this repository."""
    return [
        Path(sys.executable).resolve(),
        Path(sys.base_prefix).resolve(),
        Path(sys.prefix),
        REPO,
    ]


def _lock_file(path: Path) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)


@contextlib.contextmanager
def _setup_lock() -> Iterator[None]:
    fd = _lock_file(SETUP_LOCK)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


@contextlib.contextmanager
def shared_accounts() -> Iterator[Accounts]:
    """The test users, made if missing, for as long as the block runs."""
    if os.geteuid() != 0:
        raise RuntimeError("the multi-user tests need root (they create users with useradd)")
    in_use = _lock_file(IN_USE_LOCK)
    try:
        with _setup_lock():
            fcntl.flock(in_use, fcntl.LOCK_SH)
            _create_accounts()
            _open_for_others(needed_paths())
        yield Accounts(
            alice=User.lookup(ALICE),
            bob=User.lookup(BOB),
            carol=User.lookup(CAROL),
            admins_gid=grp.getgrnam(ADMINS).gr_gid,
        )
    finally:
        try:
            with _setup_lock():
                if _last_out(in_use):
                    try:
                        _remove_accounts()
                    finally:
                        _restore_modes()
        finally:
            os.close(in_use)


def _last_out(in_use_fd: int) -> bool:
    try:
        fcntl.flock(in_use_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False  # another session still uses the accounts; it cleans up after itself
    return True
