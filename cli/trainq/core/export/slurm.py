"""A job spec as a Slurm batch script.

The script asks Slurm for the job's resources and limits and hands the job itself to
`python -m trainqd.run` (trainqd's own launch, monitor and retry policy, without the queue):

    #SBATCH --gres=gpu:N              the job's GPUs (Slurm sets CUDA_VISIBLE_DEVICES)
    #SBATCH --time=M                  max_runtime_seconds plus the grace, in whole minutes
    #SBATCH --signal=B:TERM@G         SIGTERM to the step G (the grace) seconds before that
    #SBATCH --requeue                 a node failure runs the job again, same job id
    #SBATCH --open-mode=append        a requeued run's output follows the earlier runs'
    #SBATCH --dependency=afterok:ID   the spec's `after`, its ids taken as Slurm job ids
            --kill-on-invalid-dep=yes  (a dependency never met ends the job, as in trainq)
    job dir = <base>/trainq-$SLURM_JOB_ID: the ml root and each attempt's records, so a
              requeued job resumes from checkpoints/ and counts its earlier attempts

A job of several nodes (`instance_count`, `[[instance_groups]]`) asks for one task on each
of its nodes, and the GPUs of its largest node on each (Slurm allocates alike nodes unless
the job is heterogeneous):

    #SBATCH --nodes=N --ntasks-per-node=1 --gres=gpu:G

Its step, on the first node, runs each attempt as one `srun` step that starts every node
(trainqd.backends.slurm_nodes): task SLURM_PROCID is the node of that rank, algo-<rank + 1>,
with its own group's command, GPUs and environment. One task per node, rather than a
heterogeneous Slurm job (`#SBATCH hetjob`) per instance group, keeps SLURM_PROCID the rank
across groups and makes one step of the whole gang, which Slurm ends whole
(`--kill-on-bad-exit`), as trainq's `restart = "job"` does; a node of a group with fewer
GPUs leaves the rest of its allocation idle. The job directory must be on storage every
node shares (the submit directory usually is).

The step's process is the batch shell itself (`exec`), so `--signal=B:` and `scancel` reach
it; it relays a stop to the running attempt as trainqd does. The spec travels inside the
script as one line of JSON in a quoted here-document: the shell expands nothing in it.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence

from trainq.core.dependencies import parse as parse_dependency
from trainq.core.export.common import Unsupported, ceil_seconds, job_name
from trainq.core.nodes import is_gang, layout
from trainq.core.spec import JobSpec

TARGET = "slurm"
# trainqd's default grace (its config's default_stop_grace_seconds) for a spec with none.
DEFAULT_GRACE = 120.0
# `--signal=...@TIME` takes at most this many seconds.
MAX_SIGNAL_LEAD = 0xFFFF
SPEC_END = "TRAINQ_SPEC_END"


def time_limit_minutes(spec: JobSpec) -> int | None:
    """Slurm keeps time limits in whole minutes: the trainer's time plus the grace, rounded
    up, so the trainer runs at least max_runtime_seconds before its SIGTERM."""
    if spec.max_runtime_seconds is None:
        return None
    total = spec.max_runtime_seconds + grace_seconds(spec)
    return max(1, -(-total // 60))


def grace_seconds(spec: JobSpec) -> int:
    own = spec.stop_grace_seconds
    return ceil_seconds(DEFAULT_GRACE if own is None else own)


def notes(spec: JobSpec) -> list[str]:
    """What the script leaves out of the spec, and why (said to the person exporting)."""
    said = []
    if spec.priority > 0:
        # trainq's priority orders only its owner's jobs; on Slurm raising one (a negative
        # --nice) takes an administrator, so the job goes over at Slurm's default.
        said.append(
            f"priority {spec.priority} is not carried over: raising a job on Slurm takes "
            "an administrator (a negative --nice); it runs at Slurm's default"
        )
    gpus = {node.gpus for node in layout(spec)}
    if len(gpus) > 1:
        said.append(
            f"every node is allocated {max(gpus)} GPUs, the most any of its groups asks; "
            "a node of a group that asks fewer leaves the rest idle"
        )
    return said


def gang_refusal(spec: JobSpec) -> tuple[str, str] | None:
    """What of a job of several nodes Slurm cannot run as trainq would: (field, why)."""
    if not is_gang(spec):
        return None
    if spec.restart == "node":
        return (
            "restart",
            'Slurm ends a step of several nodes whole: restart = "node" cannot restart '
            'one node in place; use restart = "job"',
        )
    if any(group.primary for group in spec.instance_groups):
        return (
            "instance_groups.primary",
            "a Slurm step of several nodes ends when all its tasks do: no group can end the others",
        )
    if any(node.image is not None for node in layout(spec)):
        return (
            "image",
            "a job of several nodes runs its nodes' commands under Slurm, not images",
        )
    return None


def _check(spec: JobSpec) -> None:
    refused = gang_refusal(spec)
    if refused is not None:
        raise Unsupported(TARGET, *refused)
    if grace_seconds(spec) > MAX_SIGNAL_LEAD:
        raise Unsupported(
            TARGET,
            "stop_grace_seconds",
            f"Slurm's --signal warns at most {MAX_SIGNAL_LEAD} seconds before the time limit",
        )


_SLURM_AFTER = {"ok": "afterok", "failed": "afternotok", "any": "afterany"}


def dependency(after: Sequence[str]) -> str | None:
    """`--dependency`'s value for the spec's `after`, whose ids are Slurm's here: each
    condition with its ids (`afterok:12:13,afterany:14`), all of them required."""
    if not after:
        return None
    by_kind: dict[str, list[str]] = {}
    for text in after:
        parsed = parse_dependency(text)
        if parsed.group:
            raise Unsupported(
                TARGET, "after", f"Slurm has no groups of jobs: name their job ids ({text})"
            )
        by_kind.setdefault(_SLURM_AFTER[parsed.when], []).append(str(parsed.job_id))
    return ",".join(f"{kind}:{':'.join(ids)}" for kind, ids in by_kind.items())


def directives(spec: JobSpec, partition: str | None = None) -> list[str]:
    """The #SBATCH lines."""
    name = job_name(spec)
    nodes = layout(spec)
    lines = [
        f"--job-name={name}",
        f"--nodes={len(nodes)}",
        "--ntasks-per-node=1" if is_gang(spec) else "--ntasks=1",
        f"--output=trainq-{name}-%j.out",
        f"--error=trainq-{name}-%j.err",
        "--open-mode=append",  # a requeued run adds to the output, as attempts do
        "--requeue",
    ]
    per_node = max(node.gpus for node in nodes)
    if per_node:
        lines.append(f"--gres=gpu:{per_node}")
    minutes = time_limit_minutes(spec)
    if minutes is not None:
        lines.append(f"--time={minutes}")
        lines.append(f"--signal=B:TERM@{grace_seconds(spec)}")
    if spec.priority < 0:
        lines.append(f"--nice={-spec.priority}")
    if partition is not None:
        lines.append(f"--partition={partition}")
    after = dependency(spec.after)
    if after is not None:
        lines += [f"--dependency={after}", "--kill-on-invalid-dep=yes"]
    return [f"#SBATCH {line}" for line in lines]


def batch_script(
    spec: JobSpec,
    *,
    python: str,
    job_dir_base: str | None = None,
    engine: str = "podman",
    partition: str | None = None,
    job_dir: str | None = None,
    spec_file: str | None = None,
    step_args: Sequence[str] = (),
) -> str:
    """The whole script. `python` runs trainqd.run on the node (an interpreter with trainq
    installed); `job_dir_base` is where job directories go (default: the submit directory).
    trainqd's Slurm back end names instead one fixed `job_dir` (its own job directory), a
    `spec_file` the job's owner can write, and `step_args` for trainqd.run."""
    _check(spec)
    base = '"$SLURM_SUBMIT_DIR"' if job_dir_base is None else shlex.quote(job_dir_base)
    where = f'{base}/"trainq-$SLURM_JOB_ID"' if job_dir is None else shlex.quote(job_dir)
    spec_at = '"$job_dir/spec.json"' if spec_file is None else shlex.quote(spec_file)
    spec_json = json.dumps(spec.model_dump(mode="json", exclude_none=True), sort_keys=True)
    run = shlex.join([python, "-m", "trainqd.run"])
    extra = "".join(f" {shlex.quote(arg)}" for arg in step_args)
    engine_flag = f"--engine {spec.engine or engine}"
    return "\n".join(
        [
            "#!/bin/bash",
            f"# trainq job {job_name(spec)!r}, exported for Slurm (sbatch this file).",
            *(f"# {note}" for note in notes(spec)),
            *directives(spec, partition),
            "set -euo pipefail",
            f"job_dir={where}",
            'mkdir -p -m 700 "$job_dir"',
            *_step_comment(spec, run),
            f"cat > {spec_at} <<'{SPEC_END}'",
            spec_json,
            SPEC_END,
            f'exec {run} {spec_at} --job-dir "$job_dir" {engine_flag}{extra}',
            "",
        ]
    )


def _step_comment(spec: JobSpec, run: str) -> list[str]:
    if not is_gang(spec):
        return []
    return [
        f"# Each attempt is one step of every node: srun --nodes={spec.node_count}"
        " --ntasks-per-node=1 --kill-on-bad-exit=1",
        f'#   {run} SPEC --job-dir "$job_dir" --attempt N --node "$SLURM_PROCID"',
    ]
