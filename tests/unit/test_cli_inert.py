"""What a user's text can do to another user's terminal through `trainq`: nothing. Control
characters and bidi overrides in names, command lines, paths and reasons are printed as
escapes in every human-readable view, the CLI's own colours stay, and `--json` is as sent."""

from __future__ import annotations

import io
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from trainq.context import Context
from trainq.humanize import pretty_json
from trainq.inert import Drawn, inert, inert_data, inert_drawn
from trainq.job_detail import job_detail
from trainq.job_tables import gpu_table, job_table
from trainq.render import RenderOptions

NOW = datetime(2026, 5, 1, 12, 0, 0, tzinfo=UTC)
# Clear the screen, write the clipboard (OSC 52), a C1 CSI, a right-to-left override and
# a colour that would make the rest of the line invisible.
HOSTILE = "\x1b[2J\x1b]52;c;ZXZpbA==\x07\x9b2J\u202eevil\x1b[8m\x7f[red]x[/red]"
# Anything a terminal acts on: ESC, BEL, C1, DEL, bidi controls.
ACTIVE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
SGR = re.compile("\x1b\\[[0-9;]*m")


def test_inert_escapes_controls_and_bidi_but_keeps_layout() -> None:
    assert inert("a\x1b[2Jb") == "a\\x1b[2Jb"
    assert inert("\x9b\x7f\x07\r") == "\\x9b\\x7f\\x07\\x0d"
    assert inert("\u202eabc\u2066") == "\\u202eabc\\u2066"
    assert inert("two\nlines\tand a tab, é, 日本") == "two\nlines\tand a tab, é, 日本"
    assert not ACTIVE.search(inert(HOSTILE))


def test_drawn_text_keeps_its_colours_only() -> None:
    drawn = "\x1b[1mID\x1b[0m \x1b]52;c;x\x07 \x1b[2J"
    assert inert_drawn(Drawn(drawn)) == "\x1b[1mID\x1b[0m \\x1b]52;c;x\\x07 \\x1b[2J"
    assert inert_drawn(drawn) == inert(drawn)  # text the CLI did not draw keeps no colour


def test_inert_data_reaches_every_string() -> None:
    data = {"a\x1b": ["\x1b", {"b": "\u202e"}], "n": 3, "t": True, "z": None}
    assert inert_data(data) == {"a\\x1b": ["\\x1b", {"b": "\\u202e"}], "n": 3, "t": True, "z": None}


def hostile_job() -> dict[str, Any]:
    return {
        "id": 7,
        "name": "sweep-1",
        "state": "FAILED",
        "priority": 0,
        "owner": {"uid": 1001, "user": "mallory"},
        "created_at": (NOW - timedelta(minutes=5)).isoformat(),
        "started_at": (NOW - timedelta(minutes=4)).isoformat(),
        "ended_at": (NOW - timedelta(minutes=3)).isoformat(),
        "failure_reason": HOSTILE,
        "spec": {
            "command": ["python3", HOSTILE],
            "working_dir": f"/tmp/{HOSTILE}",
            "channels": {"train": {"source": f"/data/{HOSTILE}", "mode": "File"}},
            "hyperparameters": {"lr": HOSTILE},
        },
        "attempts": [
            {
                "number": 1,
                "started_at": (NOW - timedelta(minutes=4)).isoformat(),
                "ended_at": (NOW - timedelta(minutes=3)).isoformat(),
                "exit_code": 1,
                "outcome": "exited",
                "reason": HOSTILE,
            }
        ],
    }


@pytest.mark.parametrize("color", [False, True])
def test_views_of_a_hostile_job_are_inert(color: bool) -> None:
    opts = RenderOptions(now=NOW, tz=UTC, color=color, width=120 if color else None)
    gpus = {"backend": "fake", "gpus": [{"index": 0, "name": HOSTILE, "drain": {"by": "x"}}]}
    for drawn in (
        job_table([hostile_job()], opts),
        job_table([hostile_job()], opts, wide=True),
        job_detail(hostile_job(), opts),
        gpu_table(gpus, opts),
    ):
        assert not ACTIVE.search(SGR.sub("", drawn)), drawn
        assert "\\x1b[2J" in drawn or "\\x1b" in drawn
        assert "[red]x[/red]" in drawn or "..." in drawn  # rich markup is shown, not applied


def context() -> tuple[Context, io.StringIO, io.StringIO]:
    out, err = io.StringIO(), io.StringIO()
    return (
        Context(socket_path=Path("/nowhere"), environ={}, cwd=None, stdout=out, stderr=err),
        out,
        err,
    )


def test_every_printed_line_is_inert_and_json_is_as_sent() -> None:
    ctx, out, err = context()
    ctx.print(f"job 7 updated: name={HOSTILE}")
    ctx.say(f"stopped: {HOSTILE}")
    assert not ACTIVE.search(out.getvalue())
    assert not ACTIVE.search(err.getvalue())
    ctx, out, _ = context()
    ctx.print(pretty_json({"reason": HOSTILE}))
    assert json.loads(out.getvalue()) == {"reason": HOSTILE}
