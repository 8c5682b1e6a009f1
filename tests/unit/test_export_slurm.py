"""The Slurm batch script `trainq export --to slurm` writes (its directives and refusals);
tests/slurm runs such scripts on a real Slurm."""

from __future__ import annotations

import pytest

from trainq.core.export import Unsupported, slurm
from trainq.core.spec import JobSpec, parse_spec


def spec(**fields: object) -> JobSpec:
    return parse_spec({"command": ["python3", "train.py"], **fields})


def directives(script: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in script.splitlines() if "#SBATCH" in line]


def test_resources_and_limits_become_directives() -> None:
    script = slurm.batch_script(
        spec(name="resnet", gpus=4, max_runtime_seconds=3600, stop_grace_seconds=30.5),
        python="/opt/venv/bin/python",
    )
    found = directives(script)
    assert "--job-name=resnet" in found
    assert "--gres=gpu:4" in found
    assert "--time=61" in found  # 3600 s + 31 s of grace, in whole minutes, rounded up
    assert "--signal=B:TERM@31" in found  # the grace, before that limit, to the batch step
    assert "--requeue" in found
    assert "--output=trainq-resnet-%j.out" in found
    assert script.startswith("#!/bin/bash\n")


def test_no_limit_no_gpus_no_directive_for_them() -> None:
    found = directives(slurm.batch_script(spec(), python="python3"))
    assert not any(d.startswith(("--time", "--signal", "--gres")) for d in found)
    assert "--job-name=trainq-job" in found


def test_default_grace_is_trainqds() -> None:
    found = directives(slurm.batch_script(spec(max_runtime_seconds=60), python="python3"))
    assert "--signal=B:TERM@120" in found
    assert "--time=3" in found


def test_lower_priority_is_nice_and_higher_is_left_out_with_a_note() -> None:
    found = directives(slurm.batch_script(spec(priority=-5), python="python3"))
    assert "--nice=5" in found
    script = slurm.batch_script(spec(priority=5), python="python3")
    assert not [line for line in directives(script) if "nice" in line or "priority" in line]
    [note] = slurm.notes(spec(priority=5))
    assert note.startswith("priority 5 is not carried over: raising a job on Slurm takes")
    assert f"# {note}\n" in script
    assert slurm.notes(spec(priority=0)) == []


def test_a_grace_beyond_slurms_signal_lead_is_refused() -> None:
    with pytest.raises(Unsupported, match=r"stop_grace_seconds: .*65535"):
        slurm.batch_script(spec(stop_grace_seconds=70000.0), python="python3")


def test_dependencies_become_one_dependency_directive_with_slurms_conditions() -> None:
    after = ["12", "13:ok", "14:any", "15:failed"]
    found = directives(slurm.batch_script(spec(after=after), python="python3"))
    assert "--dependency=afterok:12:13,afterany:14,afternotok:15" in found
    assert "--kill-on-invalid-dep=yes" in found
    assert not any(
        "dependency" in d for d in directives(slurm.batch_script(spec(), python="python3"))
    )


def test_a_group_dependency_is_refused_for_slurm() -> None:
    with pytest.raises(Unsupported, match="Slurm has no groups of jobs"):
        slurm.batch_script(spec(after=["group:12"]), python="python3")


def test_a_job_of_several_nodes_asks_one_task_on_each_with_its_gpus() -> None:
    script = slurm.batch_script(spec(instance_count=3, gpus=2), python="python3")
    found = directives(script)
    assert found[1:3] == ["--nodes=3", "--ntasks-per-node=1"]
    assert "--ntasks=1" not in found
    assert "--gres=gpu:2" in found  # per node
    assert slurm.notes(spec(instance_count=3, gpus=2)) == []
    # The step is trainqd.run, as for a job of one node; it starts every node itself.
    assert script.splitlines()[-1].startswith("exec python3 -m trainqd.run ")


def test_instance_groups_get_the_gpus_of_their_largest_node_with_a_note() -> None:
    job = parse_spec(
        {
            "command": ["python3", "train.py"],
            "instance_groups": [
                {"name": "pservers", "instance_count": 1, "gpus": 0},
                {"name": "trainers", "instance_count": 2, "gpus": 4},
            ],
        }
    )
    found = directives(slurm.batch_script(job, python="python3"))
    assert "--nodes=3" in found
    assert "--gres=gpu:4" in found
    assert slurm.notes(job) == [
        "every node is allocated 4 GPUs, the most any of its groups asks; "
        "a node of a group that asks fewer leaves the rest idle"
    ]


def test_a_job_of_one_node_is_one_task() -> None:
    found = directives(slurm.batch_script(spec(gpus=1), python="python3"))
    assert found[1:3] == ["--nodes=1", "--ntasks=1"]
