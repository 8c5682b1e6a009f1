"""Check a submitter's paths with the submitter's own rights (standard library only).

trainqd runs as root, and root can read everything; a channel must be refused at submit if
its submitter could not read it, or root would hand the data to the trainer. Linux has no
"access(2) as another uid" (ACLs, mount options and LSMs all take part), so trainqd runs this
module's `main` in a short-lived child with the submitter's uid, gid and groups, and the
kernel answers for real by opening the paths. The child starts with trainqd's own
credentials and drops to the submitter's first thing (as a monitor does): the submitter need
not be able to run trainqd's interpreter. A personal trainqd, or a submission by root, calls
`inspect_paths` in-process.
"""

from __future__ import annotations

import json
import os
import stat
import sys

# What a path must be, and what it is found to be: "dir", "file", or a problem.
MISSING = "does not exist"
DENIED = "is not readable by you"


def _inspect(path: str, need: str) -> str:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return MISSING
    except PermissionError:
        return DENIED
    except OSError as exc:
        return f"cannot be read: {exc.strerror}"
    if stat.S_ISDIR(st.st_mode):
        if need == "workdir":
            return "dir" if os.access(path, os.X_OK) else "is not accessible to you"
        try:
            with os.scandir(path) as entries:
                next(entries, None)
        except PermissionError:
            return DENIED
        return "dir" if os.access(path, os.X_OK) else DENIED
    if need == "workdir":
        return "is not a directory"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file or a directory"
    try:
        with open(path, "rb"):
            pass
    except PermissionError:
        return DENIED
    except OSError as exc:
        return f"cannot be read: {exc.strerror}"
    return "file"


def inspect_paths(requests: dict[str, list[str]]) -> dict[str, str]:
    """{key: [path, "data"|"workdir"]} -> {key: "dir" | "file" | a problem}."""
    return {key: _inspect(path, need) for key, (path, need) in requests.items()}


def become(uid: int, gid: int, groups: list[int]) -> None:
    """Drop for good to the submitter: groups first, while still allowed to set them."""
    os.setgroups(groups)
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)


def main() -> None:
    message = json.loads(sys.stdin.buffer.read())
    if os.getuid() == 0 and message["uid"] != 0:
        become(message["uid"], message["gid"], message["groups"])
    sys.stdout.write(json.dumps(inspect_paths(message["requests"])))


if __name__ == "__main__":
    main()
