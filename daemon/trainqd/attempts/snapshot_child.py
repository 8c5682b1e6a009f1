"""Copy a trainer's source directory as its submitter (standard library only; trainqd starts
it as `access.py` starts its path check, and it drops to the submitter first thing).

The copy keeps directories, regular files and symbolic links that stay inside the source
(relative ones whose target is within it); a link out of it, or anything else (a FIFO, a
device, a socket), refuses the whole copy, as does passing `max_bytes` or `max_files`. Files
are opened without following links, so nothing the submitter could not read is copied. The
answer is one line of JSON on stdout: {"bytes": N} or {"error": "..."}.
"""

from __future__ import annotations

import json
import os
import stat
import sys

CHUNK = 1 << 20


class Refused(Exception):
    pass


class Copier:
    def __init__(self, source: str, dest: str, max_bytes: int, max_files: int) -> None:
        self.source, self.dest = source, dest
        self.max_bytes, self.max_files = max_bytes, max_files
        self.bytes = self.files = 0

    def _count(self, size: int) -> None:
        self.files += 1
        self.bytes += size
        if self.files > self.max_files:
            raise Refused(f"has more than {self.max_files} files")
        if self.bytes > self.max_bytes:
            raise Refused(f"is larger than {self.max_bytes // (1 << 20)} MiB")

    def copy_tree(self, relative: str) -> None:
        src = os.path.join(self.source, relative) if relative else self.source
        with os.scandir(src) as entries:
            names = sorted(entry.name for entry in entries)
        for name in names:
            rel = os.path.join(relative, name) if relative else name
            self._copy_entry(rel)

    def _copy_entry(self, rel: str) -> None:
        src, dst = os.path.join(self.source, rel), os.path.join(self.dest, rel)
        st = os.lstat(src)
        if stat.S_ISDIR(st.st_mode):
            self._count(0)
            os.mkdir(dst, 0o700)
            self.copy_tree(rel)
        elif stat.S_ISREG(st.st_mode):
            allowed = st.st_size + self.max_bytes - self.bytes  # what is left, counted now
            self._count(st.st_size)
            self._copy_file(src, dst, st.st_mode, allowed)
        elif stat.S_ISLNK(st.st_mode):
            target = os.readlink(src)
            inside = os.path.normpath(os.path.join(os.path.dirname(rel), target))
            if os.path.isabs(target) or inside == ".." or inside.startswith("../"):
                raise Refused(f"{rel} is a link out of it (to {target})")
            self._count(0)
            os.symlink(target, dst)
        else:
            raise Refused(f"{rel} is not a file, a directory or a link")

    def _copy_file(self, src: str, dst: str, mode: int, allowed: int) -> None:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            try:
                copied = 0
                while chunk := os.read(fd, CHUNK):
                    copied += len(chunk)
                    if copied > allowed:  # it grew while being copied
                        raise Refused(f"is larger than {self.max_bytes // (1 << 20)} MiB")
                    os.write(out, chunk)
                os.fchmod(out, 0o500 if mode & 0o100 else 0o400)  # read-only: a snapshot
            finally:
                os.close(out)
        finally:
            os.close(fd)


def take(request: dict[str, object]) -> dict[str, object]:
    source, dest = str(request["source"]), str(request["dest"])
    copier = Copier(source, dest, int(str(request["max_bytes"])), int(str(request["max_files"])))
    try:
        if not os.path.isdir(source):
            return {"error": f"source directory {source} is not a directory you can read"}
        os.mkdir(dest, 0o700)
        copier.copy_tree("")
    except Refused as exc:
        return {"error": f"source directory {source} {exc}"}
    except OSError as exc:
        where = exc.filename or source
        return {"error": f"source directory {source}: cannot copy {where}: {exc.strerror}"}
    return {"bytes": copier.bytes}


def main() -> None:
    request = json.loads(sys.stdin.buffer.read())
    if os.getuid() == 0 and request["uid"] != 0:
        os.setgroups(request["groups"])
        os.setresgid(request["gid"], request["gid"], request["gid"])
        os.setresuid(request["uid"], request["uid"], request["uid"])
    os.umask(0o077)
    sys.stdout.write(json.dumps(take(request)))


if __name__ == "__main__":
    main()
