"""The nodes of a job of several nodes as `trainq show` lists them: one row each, with how
it ended the job's latest attempt (README.md, "Several nodes")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trainq.humanize import exit_cell

HEADERS = ("NODE", "GROUP", "RANK", "GPUS", "STATE", "EXIT", "RESTARTS")
ML_ROOT = "ML ROOT"  # free text: the table's last column
_LIVE = {"RUNNING": "running", "STOPPING": "stopping"}


def node_state(node: Mapping[str, Any], job_state: str) -> str:
    """Its outcome in the latest attempt; while that runs, the job's state; else `-`."""
    outcome = node.get("outcome")
    if outcome:
        return str(outcome)
    return _LIVE.get(job_state, "-")


def node_rows(job: Mapping[str, Any]) -> list[list[str]]:
    nodes = job.get("nodes")
    if not isinstance(nodes, list):
        return []
    state = str(job.get("state", ""))
    rows = []
    for node in nodes:
        if not isinstance(node, dict):
            continue
        restarts = node.get("restarts")
        rows.append(
            [
                str(node.get("name", "?")),
                str(node.get("group", "?")),
                str(node.get("rank", "?")),
                ",".join(str(index) for index in node.get("gpus") or []) or "-",
                node_state(node, state),
                exit_cell(node) if node.get("outcome") else "-",
                "-" if restarts is None else str(restarts),
                str(node.get("job_dir", "-")),
            ]
        )
    return rows
