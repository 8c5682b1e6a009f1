"""The GPU confinement of cgroup v2: an eBPF device program on the attempt's cgroup.

cgroup v2 has no devices controller; the kernel asks a BPF_PROG_TYPE_CGROUP_DEVICE program
attached to a cgroup (or to one above it) before a process in it opens or makes a device
node. It needs no controller in cgroup.subtree_control, and on a hybrid host the kernel asks
it in addition to the v1 devices cgroup, each able to refuse.

The program is a few eBPF instructions assembled here, so that nothing beyond the standard
library is needed: it refuses (returns 0) every access to a character device of major 195
(NVIDIA's) whose minor is not in the allowed set, and allows (1) everything else. It is
loaded with bpf(BPF_PROG_LOAD) and attached with bpf(BPF_PROG_ATTACH) by a root monitor;
the cgroup keeps it until the cgroup is removed, and the job, unprivileged, can neither
detach it (bpf(2) needs capabilities it lacks) nor leave the cgroup (root's).

Loading (the verifier's pass) costs about 2 ms; attaching, a fraction of that. A root fork
server (forkserver.py) loads the program for each allowed set once (`preload`) and keeps its
descriptor; the monitors it forks inherit the descriptor and only attach it. One program
may be attached to any number of cgroups; each holds its own reference. A monitor closes
every inherited descriptor once it has attached its own (`forget`), before it drops to the
job's owner. Descriptors of bpf objects are close-on-exec: no trainer inherits one.
"""

from __future__ import annotations

import ctypes
import os
import struct
from collections.abc import Iterable

# bpf(2) syscall numbers; the monitor runs on these two.
_SYS_BPF = {"x86_64": 321, "aarch64": 280}

BPF_PROG_LOAD = 5
BPF_PROG_ATTACH = 8
BPF_PROG_TYPE_CGROUP_DEVICE = 15
BPF_CGROUP_DEVICE = 6  # the attach type
# Further programs may be attached below (or already be above: systemd's DeviceAllow=);
# the kernel runs them all and a single refusal refuses.
BPF_F_ALLOW_MULTI = 2
BPF_DEVCG_DEV_CHAR = 2  # struct bpf_cgroup_dev_ctx.access_type, low 16 bits: the device type

_LOG_SIZE = 1 << 16

# The opcodes used (linux/bpf_common.h, linux/bpf.h): class | size/op | source.
_LDX_MEM_W = 0x61  # BPF_LDX | BPF_MEM | BPF_W: dst = *(u32 *)(src + off)
_ALU64_AND_K = 0x57  # BPF_ALU64 | BPF_AND | BPF_K: dst &= imm
_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K: if dst == imm, skip off instructions
_JNE_K = 0x55  # BPF_JMP | BPF_JNE | BPF_K: if dst != imm, skip off instructions
_MOV64_K = 0xB7  # BPF_ALU64 | BPF_MOV | BPF_K: dst = imm
_EXIT = 0x95  # BPF_JMP | BPF_EXIT: return r0

# The context's fields (struct bpf_cgroup_dev_ctx: u32 access_type, major, minor); r1 points
# to it when the program starts.
_ACCESS_TYPE, _MAJOR, _MINOR = 0, 4, 8


class FilterUnavailable(Exception):
    """The program could not be loaded or attached: why, in one line."""


def _insn(code: int, dst: int = 0, src: int = 0, off: int = 0, imm: int = 0) -> bytes:
    # struct bpf_insn { u8 code; u8 dst_reg:4, src_reg:4; s16 off; s32 imm; }, little-endian
    # (both architectures above are): dst in the low nibble.
    return struct.pack("<BBhi", code, (src << 4) | dst, off, imm)


def program(major: int, allowed_minors: Iterable[int]) -> bytes:
    """The instructions: deny character devices `major`:N for N not in `allowed_minors`."""
    minors = sorted(set(allowed_minors))
    # A jump's offset counts from the instruction after it; "allow" is the last two.
    allow = 6 + len(minors) + 2

    def to_allow(index: int) -> int:
        return allow - (index + 1)

    code = [
        _insn(_LDX_MEM_W, dst=2, src=1, off=_ACCESS_TYPE),  # 0: r2 = type | access << 16
        _insn(_ALU64_AND_K, dst=2, imm=0xFFFF),  # 1: r2 = the device type alone
        _insn(_JNE_K, dst=2, imm=BPF_DEVCG_DEV_CHAR, off=to_allow(2)),  # 2: a block device
        _insn(_LDX_MEM_W, dst=3, src=1, off=_MAJOR),  # 3: r3 = major
        _insn(_JNE_K, dst=3, imm=major, off=to_allow(4)),  # 4: another driver's device
        _insn(_LDX_MEM_W, dst=4, src=1, off=_MINOR),  # 5: r4 = minor
    ]
    for minor in minors:  # 6...: one of the job's GPUs or a control node
        code.append(_insn(_JEQ_K, dst=4, imm=minor, off=to_allow(len(code))))
    code += [
        _insn(_MOV64_K, dst=0, imm=0),  # deny: another GPU's node, whatever the access
        _insn(_EXIT),
        _insn(_MOV64_K, dst=0, imm=1),  # allow
        _insn(_EXIT),
    ]
    assert len(code) == allow + 2
    return b"".join(code)


class _ProgLoad(ctypes.Structure):
    # The leading fields of union bpf_attr for BPF_PROG_LOAD; the kernel takes a prefix.
    _fields_ = [
        ("prog_type", ctypes.c_uint32),
        ("insn_cnt", ctypes.c_uint32),
        ("insns", ctypes.c_uint64),
        ("license", ctypes.c_uint64),
        ("log_level", ctypes.c_uint32),
        ("log_size", ctypes.c_uint32),
        ("log_buf", ctypes.c_uint64),
        ("kern_version", ctypes.c_uint32),
        ("prog_flags", ctypes.c_uint32),
        ("prog_name", ctypes.c_char * 16),
    ]


class _ProgAttach(ctypes.Structure):
    _fields_ = [
        ("target_fd", ctypes.c_uint32),
        ("attach_bpf_fd", ctypes.c_uint32),
        ("attach_type", ctypes.c_uint32),
        ("attach_flags", ctypes.c_uint32),
    ]


_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _bpf(cmd: int, attr: ctypes.Structure) -> int:
    machine = os.uname().machine
    number = _SYS_BPF.get(machine)
    if number is None:
        raise FilterUnavailable(f"no bpf(2) syscall number known for {machine}")
    result = _libc.syscall(
        ctypes.c_long(number),
        ctypes.c_int(cmd),
        ctypes.byref(attr),
        ctypes.c_uint(ctypes.sizeof(attr)),
    )
    if result < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return int(result)


def load(major: int, allowed_minors: Iterable[int]) -> int:
    """Load the program; its descriptor. The verifier's log is in the error if it refuses."""
    code = program(major, allowed_minors)
    insns = ctypes.create_string_buffer(code, len(code))
    license_ = ctypes.create_string_buffer(b"GPL")
    attr = _ProgLoad(
        prog_type=BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt=len(code) // 8,
        insns=ctypes.addressof(insns),
        license=ctypes.addressof(license_),
        prog_name=b"trainq_gpus",
    )
    try:
        return _bpf(BPF_PROG_LOAD, attr)
    except OSError as exc:
        first = exc
    # Once more with the verifier's log, as libbpf does: asked for up front, a log too small
    # for it would itself fail the load on older kernels.
    log = ctypes.create_string_buffer(_LOG_SIZE)
    attr.log_level, attr.log_size, attr.log_buf = 1, _LOG_SIZE, ctypes.addressof(log)
    try:
        return _bpf(BPF_PROG_LOAD, attr)
    except OSError:
        # No syscall here (ENOSYS), BPF forbidden (EPERM) or the verifier's refusal (its log).
        said = " ".join(log.value.decode(errors="replace").split())
        raise FilterUnavailable(
            f"cannot load an eBPF device program: {first.strerror}" + (f": {said}" if said else "")
        ) from None


# (major, allowed minors) -> the loaded program's descriptor, oldest first.
_loaded: dict[tuple[int, frozenset[int]], int] = {}
# A host's jobs use a few sets of GPUs over and over; past this many, the oldest goes.
MAX_LOADED = 64


def preload(major: int, allowed_minors: Iterable[int]) -> int:
    """The program for this set, loaded now if it is not yet; kept for later attaches (and
    for the children forked meanwhile, which inherit the descriptor)."""
    key = (major, frozenset(allowed_minors))
    fd = _loaded.get(key)
    if fd is None:
        fd = load(major, key[1])
        while len(_loaded) >= MAX_LOADED:
            os.close(_loaded.pop(next(iter(_loaded))))
        _loaded[key] = fd
    return fd


def forget() -> None:
    """Close every kept program's descriptor (the cgroups they are attached to keep them)."""
    while _loaded:
        os.close(_loaded.popitem()[1])


def attach(cgroup_dir: str, major: int, allowed_minors: Iterable[int]) -> None:
    """Refuse, to every process in the v2 cgroup `cgroup_dir` (and below), the character
    devices `major`:N but `allowed_minors`; the program preloaded for that set if it was."""
    try:
        prog_fd = preload(major, allowed_minors)
    except FilterUnavailable:
        forget()
        raise
    try:
        cgroup_fd = os.open(cgroup_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        forget()
        raise FilterUnavailable(f"cannot open {cgroup_dir}: {exc.strerror}") from None
    try:
        attr = _ProgAttach(
            target_fd=cgroup_fd,
            attach_bpf_fd=prog_fd,
            attach_type=BPF_CGROUP_DEVICE,
            attach_flags=BPF_F_ALLOW_MULTI,
        )
        _bpf(BPF_PROG_ATTACH, attr)
    except OSError as exc:
        raise FilterUnavailable(
            f"cannot attach the eBPF device program to {cgroup_dir}: {exc.strerror}"
        ) from None
    finally:
        # The cgroup holds the program now; no descriptor is needed any more.
        os.close(cgroup_fd)
        forget()
