"""trainqd's side of `checkpoint_copy`: the copy run as the job's owner, off the event loop."""

from __future__ import annotations

import json
import os

import anyio

from trainqd.access.identity import account
from trainqd.children import module_child
from trainqd.experiments.checkpoint_copy import copy_checkpoints
from trainqd.store import JobOwner

_COPIER = module_child("experiments.checkpoint_copy")


async def copy_as(owner: JobOwner, source: str, target: str) -> None:
    """Copy `source` over `target` with the owner's rights; OSError if it failed."""
    if os.geteuid() != 0 or owner.uid == 0:
        await anyio.to_thread.run_sync(copy_checkpoints, source, target)
        return
    acct = account(owner.uid)
    message = {
        "uid": owner.uid,
        "gid": owner.gid,
        "groups": list(acct.groups),
        "source": source,
        "target": target,
    }
    done = await anyio.run_process(
        _COPIER, input=json.dumps(message).encode(), env={"LANG": "C.UTF-8"}, cwd="/", check=False
    )
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        raise OSError(said[-1] if said else f"the copy exited with status {done.returncode}")
