"""Text from users made inert for a terminal: what `trainq` prints for people.

A command line, a directory, a channel path, a reason or a value is chosen by whoever
submitted the job and shown to everyone who lists it. A terminal acts on control characters
(clear the screen, move the cursor, set the title or the clipboard with OSC 52) and reorders
text around bidirectional overrides, so each such character is printed as its escape
(`\\x1b`, `\\x9b`, `\\u202e`) instead. Newlines and tabs are layout and stay.

The CLI's human-readable output passes through `inert_drawn` as it is written
(`trainq.commands.Context`): only a `Drawn` text keeps colour sequences, and the drawing
code applies `inert_data` to the daemon's answer before laying it out, so columns line up
on the escaped text and no colour sequence of a user can pass as the CLI's own. JSON
output is never touched.
"""

from __future__ import annotations

import re
from typing import Any

# C0 but newline and tab, DEL, C1, and the bidirectional marks, embeddings, overrides and
# isolates (U+061C, U+200E-F, U+202A-E, U+2066-9).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
# The one sequence the CLI's own drawing writes: a colour or weight (SGR).
_SGR = re.compile("\x1b\\[[0-9;]*m")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def inert(text: str) -> str:
    """`text` with every control character (but newline and tab) and bidi control escaped."""
    return _UNSAFE.sub(_escape, text)


class Drawn(str):
    """Text the CLI drew with colours (`trainq.render`) from data made inert first."""

    __slots__ = ()


def inert_drawn(text: str) -> str:
    """`inert` for a `Drawn` text: its colour sequences (SGR) stay, everything else is
    escaped. Any other text is inert whole: a user's colour is no colour of the CLI."""
    if not isinstance(text, Drawn):
        return inert(text)
    kept: list[str] = []
    start = 0
    for match in _SGR.finditer(text):
        kept += [inert(text[start : match.start()]), match.group()]
        start = match.end()
    kept.append(inert(text[start:]))
    return "".join(kept)


def inert_data(value: Any) -> Any:
    """The daemon's JSON with every string in it (keys too) made inert."""
    if isinstance(value, str):
        return inert(value)
    if isinstance(value, dict):
        return {inert(str(key)): inert_data(item) for key, item in value.items()}
    if isinstance(value, list):
        return [inert_data(item) for item in value]
    return value
