"""`trainq submit` wall time, the real console script against a real trainqd, with
`python -c pass` and `trainq --version` as baselines taken in the same run.

    .venv/bin/python bench/cli.py [--runs 40] [--importtime]

The daemon has one fake GPU held by a long job, and every submission asks for a GPU, so it
queues: what is timed is the command, not a start. The three commands take turns, round
after round, so drift and noise hit them alike; each is timed from before fork to after
reaping, output captured (and the submit's checked: one job id). With --importtime, the
heaviest imports of one `trainq submit` follow (`-X importtime`, cumulative).
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
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "trainq --version": [*trainq, "--version"],
            "trainq submit --gpus 1 -- /bin/true": [*submit, "/bin/true"],
        }
        times: dict[str, list[float]] = {label: [] for label in commands}
        for argv in commands.values():  # one untimed run each: page cache, pycache
            timed(argv, env)
        for _ in range(args.runs):
            for label, argv in commands.items():
                took, out = timed(argv, env)
                if "submit" in label and not out.strip().isdigit():
                    raise RuntimeError(f"trainq submit printed {out!r}, not a job id")
                times[label].append(took)
        imports = heaviest_imports([*submit, "/bin/true"], env, 25) if args.importtime else []
        client.stop(holder)
    python = Summary.of(times["python -c pass"])
    version = Summary.of(times["trainq --version"])
    print("\n| command | p50 ms | p99 ms | mean ms | vs python -c pass | vs trainq --version |")
    print("|---|---|---|---|---|---|")
    for label, values in times.items():
        s = Summary.of(values)
        print(
            f"| `{label}` | {s.median * 1e3:.1f} | {s.p99 * 1e3:.1f} | {s.mean * 1e3:.1f} | "
            f"{ratio(s.median, python.median)} | {ratio(s.median, version.median)} |"
        )
    if imports:
        print("\nheaviest imports of one `trainq submit` (cumulative, -X importtime):")
        print("\n".join(imports))
    print(load())


if __name__ == "__main__":
    main()
