"""The command surface of the real `trainq`: the bare command's list, `trainq --help`, every
command's `--help` and a few usage errors, each with its exit status, against the text kept
in cli_surface.txt. The README documents these commands and flags: a change to any of them
must be made on purpose, by writing the file again (TRAINQ_WRITE_CLI_SURFACE=1)."""

from __future__ import annotations

import difflib
import os
import re
import subprocess
from pathlib import Path

from tests.support.daemon import TRAINQ

SURFACE = Path(__file__).with_name("cli_surface.txt")
WRITE_ENV = "TRAINQ_WRITE_CLI_SURFACE"
# Lines whose wording passes through trainq's own rewording of click's usage errors.
USAGE_ERRORS = [
    ["sumbit"],
    ["show", "-3"],
    ["show", "--jsno"],
    ["logs", "1", "--stdout", "--stderr"],
    ["submit", "--bogus"],
    ["submit", "--gpus", "two", "--", "true"],
    ["stop"],
    ["stop", "1", "--group", "2"],
    ["tune", "show"],
    ["report", "--json", "--csv"],
    ["export", "--to", "nomad", "1"],
    ["submit", "--follow", "--sweep", "a=1,2", "--", "true"],
    ["drain"],
]


def trainq(argv: list[str], tmp_path: Path) -> str:
    """One run of `trainq argv`, as the text it printed and its exit status."""
    environ = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("TRAINQ", "_TRAINQ"))},
        "TRAINQ_SOCKET": str(tmp_path / "nobody.sock"),  # nothing here needs a daemon
        "COLUMNS": "100",
        "TERMINAL_WIDTH": "100",
        "NO_COLOR": "1",
        "TERM": "dumb",
    }
    done = subprocess.run(
        [TRAINQ, *argv],
        capture_output=True,
        text=True,
        env=environ,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    out = "".join(f"  {line}".rstrip() + "\n" for line in done.stdout.splitlines())
    err = "".join(f"! {line}".rstrip() + "\n" for line in done.stderr.splitlines())
    return f"$ trainq {' '.join(argv)}\n{out}{err}exit {done.returncode}\n\n"


def commands(bare: str) -> list[str]:
    """The commands the bare `trainq` lists, in its order."""
    return re.findall(r"^!   (\S+)", bare, flags=re.MULTILINE)


def surface(tmp_path: Path) -> str:
    bare = trainq([], tmp_path)
    names = commands(bare)
    assert len(names) > 10, bare  # the listing was read
    runs = [["--help"], *([name, "--help"] for name in names), *USAGE_ERRORS]
    return bare + "".join(trainq(argv, tmp_path) for argv in runs)


def test_the_command_surface_is_what_cli_surface_txt_says(tmp_path: Path) -> None:
    now = surface(tmp_path)
    if os.environ.get(WRITE_ENV):
        SURFACE.write_text(now)
    kept = SURFACE.read_text()
    diff = "".join(
        difflib.unified_diff(
            kept.splitlines(keepends=True),
            now.splitlines(keepends=True),
            "cli_surface.txt",
            "trainq now",
        )
    )
    assert now == kept, f"trainq's commands changed ({WRITE_ENV}=1 accepts it):\n{diff}"
