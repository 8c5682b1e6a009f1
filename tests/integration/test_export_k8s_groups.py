"""The pods of an exported job with instance groups, started as Kubernetes would start
them, in a shell here: the init container's script over the ConfigMap's files, then the
trainer's shell, which must find the node of rank offset(group) + completion index."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.support.k8s_groups import HOSTS, groups_manifest, items_of
from trainq.core.export import kubernetes


def run_pod(tmp_path: Path, job: dict[str, Any], config: dict[str, Any], index: int) -> str:
    """The pod of `index` as Kubernetes starts it: the init container's script over the
    ConfigMap's files, then the trainer's shell printing what its `train` would see."""
    mount, ml = tmp_path / "config", tmp_path / "ml"
    mount.mkdir(exist_ok=True)
    for name, text in config["data"].items():
        (mount / name).write_text(text)
    pod = job["spec"]["template"]["spec"]
    where = {kubernetes.CONFIG_MOUNT: str(mount), kubernetes.BASE: str(ml)}

    def here(args: list[str]) -> list[str]:
        for path, local in where.items():
            args = [arg.replace(path, local) for arg in args]
        return args

    env = {"JOB_COMPLETION_INDEX": str(index), "PATH": "/usr/bin:/bin"}
    subprocess.run(here(pod["initContainers"][0]["command"]), env=env, check=True)
    [trainer] = pod["containers"]
    shown = 'echo "$RANK $SM_CURRENT_HOST"; cat "$0"'
    resources = str(ml / "input/config/resourceconfig.json")
    argv = [*here(trainer["command"]), "/bin/sh", "-c", shown, resources]
    return subprocess.run(argv, env=env, check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize(("group", "index", "rank"), [("pservers", 1, 1), ("trainers", 2, 4)])
def test_a_pod_of_group_g_and_index_k_is_node_offset_plus_k(
    tmp_path: Path, group: str, index: int, rank: int
) -> None:
    items = items_of(groups_manifest())
    config = items["ConfigMap/ps-ml-config"]
    shown = run_pod(tmp_path, items[f"Job/ps-{group}"], config, index)
    first, rest = shown.split("\n", 1)
    assert first == f"{rank} {HOSTS[rank]}"
    assert json.loads(rest)["current_host"] == HOSTS[rank]
    # The trainer's ml root keeps its own config alone.
    left = sorted(p.name for p in (tmp_path / "ml/input/config").iterdir())
    assert left == ["hyperparameters.json", "inputdataconfig.json", "resourceconfig.json"]
