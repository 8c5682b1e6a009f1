"""Shell completion: the real `trainq` answering bash's and zsh's completion requests
(`_TRAINQ_COMPLETE=complete_bash`, as the script of `trainq --show-completion` sends them),
job ids asked of a real trainqd, and nothing at all printed when no daemon answers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.daemon import TRAINERS, TRAINQ, Daemon

SLEEPER = str(TRAINERS / "sleeper.py")


def complete(words: str, kind: str = "bash", env: dict[str, str] | None = None) -> list[str]:
    """What `trainq` offers for the command line `words` (the last word being typed)."""
    line = f"trainq {words}"
    parts = line.split(" ")
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith("TRAINQ_")},
        "_TRAINQ_COMPLETE": f"complete_{kind}",
        "COMP_WORDS": line,
        "COMP_CWORD": str(len(parts) - 1),
        "_TYPER_COMPLETE_ARGS": line,
        **(env or {}),
    }
    done = subprocess.run(
        [TRAINQ], capture_output=True, text=True, env=environ, timeout=30, check=False
    )
    assert (done.returncode, done.stderr) == (0, ""), done
    return [line for line in done.stdout.splitlines() if line]


def test_commands_and_flags_complete() -> None:
    assert {"submit", "stop", "show", "logs"} <= set(complete(""))
    assert complete("sh") == ["show"]
    assert "--max-runtime" in complete("submit --max-")


def test_job_ids_complete_from_the_daemon(daemon: Daemon, tmp_path: Path) -> None:
    running = daemon.submit(
        {"name": "resnet-a", "command": [sys.executable, SLEEPER], "working_dir": str(tmp_path)}
    )["id"]
    ended = daemon.submit(
        {"name": "bert-b", "command": ["/bin/true"], "working_dir": str(tmp_path)}
    )["id"]
    daemon.wait_state(running, "RUNNING")
    daemon.wait_state(ended, "COMPLETED")
    sock = f"--socket {daemon.socket}"

    assert complete(f"{sock} show ") == [str(running), str(ended)]
    assert complete(f"show {sock} ") == [str(running), str(ended)]  # --socket after too
    assert complete(f"{sock} stop ") == [str(running)]  # only unfinished jobs can stop
    assert complete(f"{sock} logs {ended}") == [str(ended)]
    # zsh shows the name and state beside the id
    zsh = "\n".join(complete(f"{sock} wait ", kind="zsh"))
    assert f'"{running}":"resnet-a RUNNING"' in zsh
    assert f'"{ended}":"bert-b COMPLETED"' in zsh
    # the socket from the environment, as the command itself would use it
    assert complete(f"show {running}", env={"TRAINQ_SOCKET": str(daemon.socket)}) == [str(running)]
    # the daemon still serves
    assert daemon.job(running)["state"] == "RUNNING"


def test_no_daemon_completes_nothing_quietly(tmp_path: Path) -> None:
    assert complete(f"--socket {tmp_path / 'none.sock'} show ") == []


def test_the_completion_script() -> None:
    # As a user runs it: from bash, which is how typer (shellingham) knows the shell (a
    # second command keeps bash from exec'ing trainq in its own place).
    done = subprocess.run(
        ["bash", "-c", f"{TRAINQ} --show-completion; exit $?"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert done.returncode == 0
    assert "_TRAINQ_COMPLETE=complete_bash" in done.stdout
    # bash keeps trainq's order (job ids ascending: 2 before 10), not its own sort
    assert "complete -o default -o nosort -F _trainq_completion trainq" in done.stdout


def test_job_ids_complete_in_numeric_order_in_bash(daemon: Daemon, tmp_path: Path) -> None:
    ids = [
        daemon.submit({"command": ["/bin/true"], "working_dir": str(tmp_path)})["id"]
        for _ in range(11)
    ]
    script = subprocess.run(
        ["bash", "-c", f"{TRAINQ} --show-completion; exit $?"],
        capture_output=True, text=True, timeout=30, check=True,
    ).stdout  # fmt: skip
    # A real bash loads the script and completes `trainq show <Tab>` as it would on a terminal.
    shown = subprocess.run(
        ["bash", "-c", script + '\nCOMP_WORDS=(trainq show ""); COMP_CWORD=2\n'
         f'_trainq_completion {TRAINQ}; ' + 'printf "%s\\n" "${COMPREPLY[@]}"; complete -p trainq'],
        capture_output=True, text=True, timeout=30, check=True,
        env={**os.environ, "TRAINQ_SOCKET": str(daemon.socket)},
    ).stdout.splitlines()  # fmt: skip
    assert shown[:-1] == [str(job) for job in ids]
    assert "-o nosort" in shown[-1]


def test_export_targets_complete() -> None:
    assert complete("export --to ") == ["slurm", "kubernetes", "sagemaker"]
    assert complete("export 3 --to s") == ["slurm", "sagemaker"]
