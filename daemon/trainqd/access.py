"""Refuse at submit what the submitter could not read (the workstation issue, item 2).

Channel sources must be readable files or listable directories, and a working directory must
be enterable, by the submitter: checked by `trainqd.pathcheck` in a child running with the
submitter's credentials when trainqd is root, in-process otherwise. A refused channel never
reaches the trainer, its FIFOs or its logs, because the job is never created.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio

from trainq.core.errors import InvalidSpec, TrainqError
from trainq.core.spec import JobSpec
from trainqd.identity import Account
from trainqd.pathcheck import inspect_paths

_PACKAGE_PARENT = str(Path(__file__).resolve().parent.parent)
_CHECKER = [
    sys.executable,
    "-S",
    "-I",
    "-c",
    f"import sys; sys.path.insert(0, {_PACKAGE_PARENT!r}); "
    "from trainqd.pathcheck import main; main()",
]


async def _inspect_as(acct: Account, requests: dict[str, list[str]]) -> dict[str, str]:
    if os.geteuid() != 0 or acct.uid == 0:
        return inspect_paths(requests)
    message = {"uid": acct.uid, "gid": acct.gid, "groups": list(acct.groups), "requests": requests}
    done = await anyio.run_process(
        _CHECKER,
        input=json.dumps(message).encode(),
        env={"LANG": "C.UTF-8"},
        cwd="/",
        check=False,
    )
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise TrainqError(
            "trainqd could not check the job's paths as its submitter"
            + (f": {said[-1]}" if said else f" (exit status {done.returncode})")
        )
    result: dict[str, str] = json.loads(done.stdout)
    return result


async def check_job_paths(spec: JobSpec, acct: Account) -> dict[str, str]:
    """{channel name: "dir" | "file"}; InvalidSpec naming the first unusable path."""
    requests = {f"channel:{name}": [ch.source, "data"] for name, ch in spec.channels.items()}
    if spec.working_dir is not None:
        requests["workdir"] = [spec.working_dir, "workdir"]
    if not requests:
        return {}
    found = await _inspect_as(acct, requests)
    for key, verdict in found.items():
        if verdict in ("dir", "file"):
            continue
        if key == "workdir":
            raise InvalidSpec(f"working directory {spec.working_dir} {verdict}")
        name = key.split(":", 1)[1]
        raise InvalidSpec(f"channel {name!r}: {spec.channels[name].source} {verdict}")
    return {key.split(":", 1)[1]: v for key, v in found.items() if key.startswith("channel:")}
