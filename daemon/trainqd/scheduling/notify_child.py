"""The child that runs a job's `--notify` command (or the mail command) as the job's owner
(standard library only; trainqd starts it as `access.py` starts its path check).

Its request comes in TRAINQ_NOTIFY_REQUEST (never in argv, which every user can read): the
credentials, the command, its environment and directory. It drops to the owner first thing,
then execs the command, whose stdin is the child's own (the mail's message). Exit statuses
of its own: 126 the request or the drop failed, 127 the command could not be run.
"""

from __future__ import annotations

import json
import os
import sys

REQUEST = "TRAINQ_NOTIFY_REQUEST"


def main() -> None:
    try:
        request = json.loads(os.environ[REQUEST])
        if os.getuid() == 0 and request["uid"] != 0:
            os.setgroups(request["groups"])
            os.setresgid(request["gid"], request["gid"], request["gid"])
            os.setresuid(request["uid"], request["uid"], request["uid"])
        argv = [str(arg) for arg in request["argv"]]
        env = {str(k): str(v) for k, v in request["env"].items()}
    except (KeyError, ValueError, TypeError, OSError) as exc:
        sys.stderr.write(f"trainq notify: {exc}\n")
        os._exit(126)
    try:
        os.chdir(request.get("cwd") or "/")
    except OSError:
        os.chdir("/")
    try:
        os.execvpe(argv[0], argv, env)  # noqa: S606 (the owner's own command, as the owner)
    except OSError as exc:
        sys.stderr.write(f"trainq notify: {argv[0]}: {exc.strerror}\n")
        os._exit(127)


if __name__ == "__main__":
    main()
