"""A fork whose child is born in a given cgroup v2: clone3(CLONE_INTO_CGROUP), made the way
os.fork is made.

Moving a process into a cgroup (a write to cgroup.procs) takes the kernel's threadgroup lock
for writing and waits out an RCU grace period: 7-20 ms on a quiet 2-core machine, the
largest step of a dispatch. A child cloned into the cgroup is there from its first
instruction, with no migration at all (under 1 ms for the whole fork here). The fork server
(forkserver.py) forks each root attempt's monitor this way.

os.fork is PyOS_BeforeFork(), glibc's fork(), then PyOS_AfterFork_Child() or
PyOS_AfterFork_Parent(). Here the middle is the raw syscall, through a PyDLL so that the GIL
stays held across it, as os.fork holds it. The interpreter's own fork bookkeeping (the
import lock, the GIL and thread states in the child, the `os.register_at_fork` hooks,
signal state) is therefore done exactly as for os.fork. What glibc's fork() does that the
raw syscall skips, and why none of it matters in the single-threaded fork server (checked
before each clone: /proc/self/task has one entry, else `fork_into` refuses):

- pthread_atfork handlers (glibc's malloc arenas, stdio's list lock, the loader's lock, the
  NSS database, and any a loaded C library registered): they take those locks before the
  fork and reset them in the child, so that a lock another thread held is not inherited
  locked. With one thread, which is inside syscall() and so in none of them, every lock is
  free at the moment of the clone, and the child's copies are free too. No C library the
  server loads needs a child hook for anything else (OpenSSL 3 notices a fork by the pid).
- The thread descriptor's cached tid: fork() has the kernel write the child's tid into it
  (CLONE_CHILD_SETTID); here the child's keeps the server's. glibc 2.34+ reads it only for
  the owner field of recursive, error-checking, robust and priority-inheritance mutexes and
  for thread-directed calls naming another thread; raise() and pthread_kill() on the calling
  thread ask the kernel (gettid). The monitor uses no process-shared or PI mutex, and an
  owner field that is consistently the server's tid within one thread locks and unlocks as
  well as the right one. CPython asks gettid for threading.get_native_id.
- The robust futex list: the kernel gives a cloned child none, and fork() registers the
  main thread's again. It only lets the kernel release robust mutexes of a dying thread;
  CPython and the monitor lock none. Threads the child starts register their own, and a
  process the child forks gets its own from glibc's fork.
- clear_child_tid (CLONE_CHILD_CLEARTID): used by pthread_join on the thread that exits;
  nobody joins a process's main thread.
- The thread stacks' cache and the count of threads: with one thread there is nothing to
  reclaim and the count is already 1.

The child then becomes a monitor, which forks its helpers with os.fork and starts its
trainer with posix_spawn: each of those gets glibc's full treatment.

The failures (none leaves a child): ENOSYS (a kernel before 5.3, or a seccomp profile such
as a container engine's default, which answers ENOSYS for clone3), E2BIG or EINVAL (a kernel
before 5.7, which has clone3 but not CLONE_INTO_CGROUP), EPERM (a seccomp profile that
forbids it) mean that this process can never clone this way: `fork_into` raises
`Unavailable` with `lasting` set, and its callers stop trying. Anything else (the cgroup
removed meanwhile: ENOENT; a cgroup with controllers in the way: EOPNOTSUPP) is about that
cgroup alone.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal

CLONE_INTO_CGROUP = 0x200000000
SYS_CLONE3 = 435  # the same number on every architecture (the generic syscall table)
_LASTING = frozenset({errno.ENOSYS, errno.E2BIG, errno.EINVAL, errno.EPERM})
TASKS = "/proc/self/task"


class Unavailable(Exception):
    """No child was made: why, in a few words; `lasting` when no later call can do better."""

    def __init__(self, reason: str, lasting: bool) -> None:
        super().__init__(reason)
        self.lasting = lasting


class _CloneArgs(ctypes.Structure):
    # struct clone_args (linux/sched.h) up to `cgroup`: CLONE_ARGS_SIZE_VER2, 88 bytes.
    _fields_ = [
        (name, ctypes.c_uint64)
        for name in (
            "flags",
            "pidfd",
            "child_tid",
            "parent_tid",
            "exit_signal",
            "stack",
            "stack_size",
            "tls",
            "set_tid",
            "set_tid_size",
            "cgroup",
        )
    ]


# PyDLL, not CDLL: the GIL is not released around the call, as os.fork does not release it.
_syscall = ctypes.PyDLL(None, use_errno=True).syscall
_syscall.restype = ctypes.c_long
_syscall.argtypes = [ctypes.c_long, ctypes.c_void_p, ctypes.c_size_t]
_before = ctypes.pythonapi.PyOS_BeforeFork
_after_child = ctypes.pythonapi.PyOS_AfterFork_Child
_after_parent = ctypes.pythonapi.PyOS_AfterFork_Parent
for _hook in (_before, _after_child, _after_parent):
    _hook.restype = None
    _hook.argtypes = []


def single_threaded() -> bool:
    return len(os.listdir(TASKS)) == 1


def fork_into(cgroup_fd: int) -> int:
    """Fork, the child in the cgroup v2 whose directory `cgroup_fd` is open on (O_DIRECTORY).
    As os.fork: the child's pid in the parent, 0 in the child."""
    if not single_threaded():
        # glibc's locks held by another thread would be inherited held: os.fork's job.
        raise Unavailable("this process has more than one thread", lasting=False)
    args = _CloneArgs(flags=CLONE_INTO_CGROUP, exit_signal=signal.SIGCHLD, cgroup=cgroup_fd)
    pointer, size = ctypes.addressof(args), ctypes.sizeof(args)
    _before()
    pid = -1
    try:
        pid = _syscall(SYS_CLONE3, pointer, size)
    finally:
        if pid == 0:
            _after_child()
        else:
            _after_parent()
    if pid < 0:
        err = ctypes.get_errno()
        raise Unavailable(f"clone3: {os.strerror(err)}", lasting=err in _LASTING)
    return int(pid)
