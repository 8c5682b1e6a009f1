"""Running a job again: `trainq requeue JOB` (the same spec, a new job of its owner's) and
`trainq submit --like JOB [flags]` (a new job from an old one's spec, the flags over it)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from trainq.core.errors import InvalidSpec, Unavailable
from trainq.humanize import pretty_json

if TYPE_CHECKING:
    from trainq.client import Client
    from trainq.commands import Context

HIDDEN = "<hidden>"  # how trainqd shows another user's environment and hyperparameter values
# What `private_data = true` hides of another user's job besides those values.
PRIVATE_FIELDS = ("command", "image", "working_dir", "source_dir")


def spec_of(client: Client, job_id: int) -> dict[str, Any]:
    """Job `job_id`'s spec, whole: refused in one line if trainqd hid values from the caller
    (another user's job), since a copy would run with the placeholders."""
    _, record = client.request("GET", f"/v1/jobs/{job_id}")
    spec = record.get("spec") if isinstance(record, dict) else None
    if not isinstance(spec, dict):
        raise Unavailable(f"trainqd sent no spec for job {job_id}")
    private = [key for key in PRIVATE_FIELDS if spec.get(key) in (HIDDEN, [HIDDEN])]
    if private:  # trainqd's private_data: what the job runs is its owner's and admins' alone
        raise InvalidSpec(
            f"{', '.join(private)}: hidden from you (job {job_id} is not yours and this trainqd "
            "keeps what jobs run private); copy a job of yours"
        )
    env = spec.get("environment")
    if isinstance(env, dict) and env.get("PATH") == HIDDEN:
        # The submitter's PATH, which `submit` adds: the copy gets the caller's, as it would.
        spec["environment"] = {k: v for k, v in env.items() if k != "PATH"}
    if spec.get("notify") == [HIDDEN]:  # another user's command: not the caller's to run
        spec.pop("notify")
    for field in ("environment", "hyperparameters"):
        hidden = sorted(k for k, v in (spec.get(field) or {}).items() if v == HIDDEN)
        if hidden:
            raise InvalidSpec(
                f"{field}: the values of {', '.join(hidden)} are hidden from you "
                f"(job {job_id} is not yours); give them with --env/--hp or copy a job of yours"
            )
    return spec


def requeue(ctx: Context, args: argparse.Namespace) -> int:
    """POST /v1/jobs/{id}/requeue; prints the new job's id."""
    _, job = ctx.client().request("POST", f"/v1/jobs/{args.job}/requeue")
    ctx.print(pretty_json(job) if args.json else str(job["id"]))
    return 0
