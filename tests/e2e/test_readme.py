"""The README's first hour, run as written: its quick start, its `curl` examples and its
Python example are taken from README.md itself and run verbatim (the daemon's socket aside)
against a real trainqd with simulated GPUs, in a copy of the repository's examples, so that
the README cannot drift from what works."""

from __future__ import annotations

import grp
import os
import pwd
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.daemon import TRAINQ, Daemon, scratch_dir, supervised
from tests.support.paddle import paddle_venv
from trainq.core.nodes import layout
from trainq.core.spec import parse_spec
from trainqd.config import load_config

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
SERVICE_SOCKET = "/run/trainq/trainq.sock"


def section(title: str) -> str:
    """The README's text under a heading, to the next heading of the same or a higher level
    (a `# comment` line in a code block is not a heading)."""
    level, fenced, lines = 0, False, []
    for line in README.splitlines(keepends=True):
        fenced ^= line.startswith("```")
        heading = None if fenced else re.match(r"(#+) (.*)$", line.rstrip("\n"))
        if not level:
            level = len(heading.group(1)) if heading and heading.group(2) == title else 0
        elif heading and len(heading.group(1)) <= level:
            break
        else:
            lines.append(line)
    assert level, f"README.md has no section {title!r}"
    return "".join(lines)


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.M | re.S)


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """What a fresh clone has for the README's commands: the examples (not the data they
    make) and the `.venv` that scripts/install makes (this test's own)."""
    root = tmp_path / "trainq"
    shutil.copytree(ROOT / "examples", root / "examples", ignore=shutil.ignore_patterns("data"))
    (root / ".venv").symlink_to(Path(sys.executable).parent.parent)
    return root


def quick_start_daemon_flags() -> list[str]:
    """The flags the quick start starts trainqd with (its install step is scripts/install,
    which made this test's venv)."""
    first = blocks(section("Quick start"), "sh")[0].strip()
    install, daemon = first.split(" && ")
    assert install == "scripts/install"
    words = shlex.split(daemon)
    assert words[0] == ".venv/bin/trainqd"
    return words[1:]


@pytest.fixture
def readme_daemon() -> Iterator[Daemon]:
    flags = quick_start_daemon_flags()
    assert flags[:1] == ["--gpus"], flags  # what a machine without GPUs is told to run
    base = scratch_dir()
    # The embedded defaults, CPU slots included (one per core), as the reader's trainqd has.
    defaults = Daemon(base, gpus=flags[1], config={"cpu_slots": None})
    with supervised(defaults, remove=base) as daemon:
        yield daemon


def run(
    script: str, daemon: Daemon, cwd: Path, *argv: str, path: str | None = None
) -> subprocess.CompletedProcess[str]:
    """`path`: the shell's PATH, if not this process's."""
    return subprocess.run(
        [*argv, script] if argv else ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd,
        env={
            **os.environ,
            "TRAINQ_SOCKET": str(daemon.socket),
            "PATH": path or os.environ["PATH"],
        },
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def test_the_quick_start_runs_as_written(readme_daemon: Daemon, clone: Path) -> None:
    commands = blocks(section("Quick start"), "sh")[1]
    done = run(commands, readme_daemon, clone)
    assert done.returncode == 0, done.stdout + done.stderr
    # `logs -f 1` followed the trainer to its end: every epoch, its Pipe mode validation.
    assert "epoch 3/3: train mse" in done.stdout
    assert "validation mse" in done.stdout
    job = readme_daemon.job(1)
    assert job["state"] == "COMPLETED"
    ml_root = readme_daemon.state_dir / "jobs" / "1" / "ml"
    assert (ml_root / "model" / "model.json").is_file()
    # Where the README says the model is, from what `trainq show` prints.
    told = re.search(r"model is `([^`]+)` in its [^(]*\(`job_dir` in `trainq show`\)", README)
    assert told, "the quick start no longer says where the model is"
    assert (Path(job["job_dir"]) / told.group(1)).is_file(), (job["job_dir"], told.group(1))
    assert (ml_root / "checkpoints" / "state.json").is_file()


def test_the_api_examples_run_as_written(readme_daemon: Daemon, clone: Path) -> None:
    [commands] = blocks(section("The API"), "sh")
    assert SERVICE_SOCKET in commands
    done = run(commands.replace(SERVICE_SOCKET, str(readme_daemon.socket)), readme_daemon, clone)
    assert done.returncode == 0, done.stderr
    jobs = readme_daemon.get("/v1/jobs", params={"all": "true"}).json()["jobs"]
    [job] = [j for j in jobs if j["spec"]["command"] == ["python3", "train.py"]]
    ended = readme_daemon.wait_state(job["id"], timeout=60)
    assert ended["state"] == "COMPLETED", readme_daemon.cli("logs", str(job["id"])).stdout


def test_the_python_example_runs_as_written(readme_daemon: Daemon, clone: Path) -> None:
    [example] = blocks(section("From Python"), "python")
    done = run(example, readme_daemon, clone, sys.executable, "-c")  # where the quick start is
    assert done.returncode == 0, done.stderr
    lines: list[Any] = done.stdout.splitlines()
    assert lines[:3] == [f"lr-{lr} COMPLETED 0" for lr in (0.01, 0.003, 0.001)]
    assert "model y = " in done.stdout  # the first job's logs


def test_the_several_nodes_example_runs_as_written(readme_daemon: Daemon, clone: Path) -> None:
    text = section("Several nodes")
    commands = blocks(text, "sh")[0]  # the next is PaddlePaddle's (below)
    done = run(commands, readme_daemon, clone)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "algo-1: the 2 trainers' ranks sum to 3" in done.stdout
    # The heterogeneous job's spec file is one trainqd takes.
    [spec_file] = blocks(text, "toml")
    spec = parse_spec(tomllib.loads(spec_file))
    assert [n.group for n in layout(spec)] == ["pservers"] * 2 + ["trainers"] * 2
    assert spec.total_gpus == 4


def test_the_job_spec_example_is_one_trainqd_takes() -> None:
    [example] = blocks(section("What a job is"), "toml")
    spec = parse_spec(tomllib.loads(example))
    assert spec.channels["train"].mode == "Pipe"
    assert spec.hyperparameters == {"lr": "0.1"}


def test_the_tuning_example_runs_as_written(readme_daemon: Daemon, clone: Path) -> None:
    """With `trainq` on the PATH as the quick start says to put it there."""
    [commands] = blocks(section("Tuning"), "sh")[:1]
    assert "source .venv/bin/activate" in section("Quick start")
    venv_bin = Path(sys.executable).parent
    bare = ":".join(p for p in os.environ["PATH"].split(":") if Path(p) != venv_bin)
    done = run(f"source .venv/bin/activate\n{commands}", readme_daemon, clone, path=bare)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[0] == "1"  # the tune's id, as its comment says
    assert (clone / "examples" / "tune" / "curves.png").is_file()
    assert readme_daemon.cli("tune", "stop", "1").returncode == 0


@pytest.fixture
def paddle_path() -> str:
    """A PATH whose python3 has PaddlePaddle (made before the daemon starts: a first run
    installs it)."""
    return f"{paddle_venv() / 'bin'}:{os.environ['PATH']}"


def test_the_paddle_example_runs_as_written(
    paddle_path: str, readme_daemon: Daemon, clone: Path
) -> None:
    """A real PaddlePaddle parameter-server job: the server and the trainers find each other
    by the variables trainq sets alone, the trainers fit the model through the server, and
    trainq stops the server once they are done."""
    [commands] = blocks(section("PaddlePaddle's parameter servers"), "sh")
    done = run(commands, readme_daemon, clone, path=paddle_path)
    [job] = readme_daemon.get("/v1/jobs", params={"all": "true"}).json()["jobs"]
    logs = [readme_daemon.cli("logs", str(job["id"]), "--node", str(n)).stdout for n in (1, 2, 3)]
    assert done.returncode == 0, "\n".join([done.stderr, *logs])
    ended = readme_daemon.job(job["id"])
    assert ended["state"] == "COMPLETED"
    assert [(n["name"], n["group"]) for n in ended["nodes"]] == [
        ("algo-1", "pserver"),
        ("algo-2", "trainer"),
        ("algo-3", "trainer"),
    ]
    assert len(ended["attempts"][0]["gpus"]) == 2  # the trainers'; the server is on CPUs
    assert "algo-1: parameter server 0 serving" in logs[0]
    assert done.stdout.splitlines()[-1].startswith("algo-2: trainer 0 loss ")  # its `logs`
    for rank, log in enumerate(logs[1:]):
        found = re.search(
            rf"^algo-{rank + 2}: trainer {rank} loss ([\d.]+) -> ([\d.]+)$", log, re.M
        )
        assert found, log
        first, last = map(float, found.groups())
        assert last < first / 4, log


def synopses() -> dict[str, str]:
    """The Commands section's synopsis of each command, FILTERS spelt out where used."""
    block = blocks(section("Commands"), "")[0]
    filters_line = re.search(r"^\s*FILTERS:(.*)$", block, re.M)
    assert filters_line, "the synopsis no longer spells out FILTERS"
    filters = filters_line.group(1)
    block = block.replace(filters_line.group(0), "")
    found: dict[str, str] = {}
    for part in re.split(r"(?=\btrainq [a-z]+)", block):
        if part.startswith("trainq "):
            name = part.split()[1]
            found[name] = found.get(name, "") + part.replace("FILTERS", filters)
    return found


def help_flags(command: str) -> list[tuple[str, ...]]:
    """Each option of `trainq COMMAND --help`: its long name, and its short one if any."""
    done = subprocess.run(
        [TRAINQ, command, "--help"],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
        timeout=60,
        check=True,
    )
    rows = re.findall(r"^│ (--[a-z0-9-]+)(?:\s+(-[a-zA-Z])\b)?", done.stdout, re.M)
    return [tuple(name for name in row if name) for row in rows]


# Options every command has, or that the README gives with another command's.
NOT_IN_SYNOPSES = {"--help", "--socket"}


@pytest.mark.parametrize("command", sorted(set(synopses()) - {"export", "tune"}))
def test_the_commands_synopsis_lists_every_option(command: str) -> None:
    """export takes submit's flags, tune its subcommands', as the synopsis says."""
    synopsis = synopses()[command]
    missing = [
        names[0]
        for names in help_flags(command)
        if names[0] not in NOT_IN_SYNOPSES
        and not any(re.search(rf"{re.escape(n)}(?![a-z0-9-])", synopsis) for n in names)
    ]
    assert not missing, f"README's `trainq {command}` synopsis lacks {missing}"


def test_the_configuration_example_is_one_trainqd_takes(tmp_path: Path) -> None:
    """The Configuration section's file, as an admin would copy it, once the groups and
    users it names exist (here, the test's own group and user stand for them)."""
    [example] = [block for block in blocks(README, "toml") if "admin_group" in block]
    group, user = grp.getgrgid(os.getgid()).gr_name, pwd.getpwuid(os.getuid()).pw_name
    example = re.sub(r'"(trainq|trainq-admins|ml-staff)"', f'"{group}"', example)
    config_file = tmp_path / "trainqd.toml"
    config_file.write_text(example.replace('users = ["alice"]', f'users = ["{user}"]'))
    config = load_config(config_file)
    assert config.default_class in config.classes
