"""`trainq submit` and `trainq ls` wall time, the real console script against a real trainqd,
with `python -c pass`, a bare `import typer` and `trainq --version` as baselines taken in
the same run.

    .venv/bin/python bench/cli.py [--runs 40] [--importtime]

The daemon has one fake GPU held by a long job, and every submission asks for a GPU, so it
queues: what is timed is the command, not a start (and `ls` draws a table of the jobs queued
so far: one row per round). The commands take turns, round
after round, so drift and noise hit them alike; each is timed from before fork to after
reaping, output captured (and checked: the submit's one job id, a table from ls). With
--importtime, the heaviest imports of one `trainq submit` and one `trainq ls` follow
(`-X importtime`, cumulative).
With `--runs 40` the p99 is the slowest run (nearest rank).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from common import (
    Summary,
    hold_the_gpu,
    load,
    machine,
    ratio,
    running_daemon,
    trainq_argv,
)


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    began = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    took = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(f"{argv[-4:]} exited {done.returncode}: {done.stderr.strip()}")
    return took, done.stdout


def heaviest_imports(argv: list[str], env: dict[str, str], top: int) -> list[str]:
    """The `top` largest cumulative import times of one run, as `-X importtime` says."""
    script = argv[1:] if argv[0] == sys.executable else argv  # the console script is Python
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *script],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    rows = []
    for line in done.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+(\d+) \|(\s*)(\S+)", line)
        if match:
            rows.append((int(match[2]), len(match[3]) // 2, match[4]))
    rows.sort(reverse=True)
    return [f"{us / 1e3:7.1f} ms  {'  ' * depth}{name}" for us, depth, name in rows[:top]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40, help="runs of each command (>= 30)")
    parser.add_argument("--importtime", action="store_true", help="show the heaviest imports")
    parser.add_argument("--source", type=Path, help="run trainq and trainqd from this copy")
    args = parser.parse_args()
    print(machine())
    print(load())
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINQ_", "PYTHON"))}
    with running_daemon("fake:1", args.source) as daemon, daemon.client() as client:
        holder = hold_the_gpu(client)
        trainq = trainq_argv(args.source)
        submit = [*trainq, "--socket", str(daemon.socket), "submit", "--gpus", "1", "--"]
        ls = [*trainq, "--socket", str(daemon.socket), "ls"]
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "python -c 'import typer'": [sys.executable, "-c", "import typer"],
            "trainq --version": [*trainq, "--version"],
            "trainq submit --gpus 1 -- /bin/true": [*submit, "/bin/true"],
            "trainq ls": ls,
        }
        times: dict[str, list[float]] = {label: [] for label in commands}
        for argv in commands.values():  # one untimed run each: page cache, pycache
            timed(argv, env)
        for _ in range(args.runs):
            for label, argv in commands.items():
                took, out = timed(argv, env)
                if "submit" in label and not out.strip().isdigit():
                    raise RuntimeError(f"trainq submit printed {out!r}, not a job id")
                if label == "trainq ls" and "PENDING" not in out:
                    raise RuntimeError(f"trainq ls printed {out!r}, not a table of jobs")
                times[label].append(took)
        imports = {
            label: heaviest_imports(argv, env, 25)
            for label, argv in (("trainq submit", [*submit, "/bin/true"]), ("trainq ls", ls))
            if args.importtime
        }
        client.stop(holder)
    python = Summary.of(times["python -c pass"])
    typer = Summary.of(times["python -c 'import typer'"])
    print("\n| command | p50 ms | p99 ms | mean ms | vs python -c pass | vs import typer |")
    print("|---|---|---|---|---|---|")
    for label, values in times.items():
        s = Summary.of(values)
        print(
            f"| `{label}` | {s.median * 1e3:.1f} | {s.p99 * 1e3:.1f} | {s.mean * 1e3:.1f} | "
            f"{ratio(s.median, python.median)} | {ratio(s.median, typer.median)} |"
        )
    for label, heaviest in imports.items():
        print(f"\nheaviest imports of one `{label}` (cumulative, -X importtime):")
        print("\n".join(heaviest))
    print(load())


if __name__ == "__main__":
    main()
