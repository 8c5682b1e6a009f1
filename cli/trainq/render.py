"""How tables and views are laid out, with rich: the `ls` and `gpus` tables
(`trainq.job_tables`) and the `show` view (`trainq.job_detail`) are drawn with this.

rich costs ~40 ms to import and lays a table out at ~0.1 ms a cell, so only `ls`, `show` and
`gpus` import these modules (lazily, in `trainq.commands`), and they import rich only where it
draws with it: a table with no colour, no width limit and plain ASCII cells (`trainq ls`
into a pipe or a script) is laid out here, line for line as rich would (`plain_table`).
Everything works from the daemon's JSON as plain dicts (pydantic stays off the CLI) and
returns a string, so it is tested without a terminal; the words in the cells come from
`trainq.humanize`.

Every string of the daemon's answer is made inert (`trainq.inert`) before it is laid out:
the user's text can neither act on the terminal nor pass for the CLI's own colours.

Output piped into another program has no colour, no width limit (rich wraps and cuts
nothing) and no trailing blanks, so `grep` and `awk` see whole lines. On a terminal, colour
follows NO_COLOR and TERM=dumb, and only free text gives way to a narrow window: the REASON
of `ls` is cut to fit, an attempt's reason and long values in `show` wrap; ids, states and
times are never cut (a line too long for the window is left to the terminal to wrap).
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import TYPE_CHECKING, TextIO

from trainq.inert import Drawn

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.table import Table

UNBOUNDED_WIDTH = 100_000  # for output that is not going to a terminal: never wrap
PAD = 2  # blanks between columns
MIN_FREE_TEXT = 16  # the least room free text gets, however narrow the window
STATE_STYLES = {
    "PENDING": "yellow",
    "RUNNING": "green",
    "STOPPING": "magenta",
    "COMPLETED": "bold green",
    "FAILED": "bold red",
    "STOPPED": "yellow",
    "TIMEOUT": "yellow",
}


@dataclass(frozen=True)
class RenderOptions:
    """How to draw: at what moment, in which time zone (None: local), for what output."""

    now: datetime
    color: bool = False
    width: int | None = None  # None: not a terminal
    tz: tzinfo | None = None


def options_for(stream: TextIO, environ: Mapping[str, str], now: datetime) -> RenderOptions:
    """Colour and width for `stream`: only a terminal has a width or gets colour."""
    try:
        tty = stream.isatty()
    except ValueError:  # a closed stream
        tty = False
    if not tty:
        return RenderOptions(now=now)
    color = not environ.get("NO_COLOR") and environ.get("TERM") != "dumb"
    try:
        width = os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError):
        width = 80
    return RenderOptions(now=now, color=color, width=width)


@dataclass(frozen=True)
class Column:
    header: str
    free_text: bool = False  # may give way to a narrow terminal
    wrap: bool = False  # gives way by wrapping (else by being cut short)


def _cut(text: str, room: int) -> str:
    from rich.cells import cell_len  # noqa: PLC0415 (see the module docstring)

    if cell_len(text) <= room:
        return text
    kept = text
    while kept and cell_len(kept) > room - 3:
        kept = kept[:-1]
    return kept.rstrip() + "..."


def rich_table(
    columns: Sequence[Column],
    rows: Sequence[Sequence[str]],
    opts: RenderOptions,
    styles: Mapping[str, Callable[[str], str]] | None = None,
) -> tuple[Table, int]:
    """A borderless table, and the console width that draws it without cutting a fixed
    column. On a terminal, free text that would not fit is cut (or left to wrap) here."""
    from rich.cells import cell_len  # noqa: PLC0415
    from rich.table import Table  # noqa: PLC0415
    from rich.text import Text  # noqa: PLC0415

    natural = [
        max([cell_len(col.header)] + [cell_len(row[i]) for row in rows])
        for i, col in enumerate(columns)
    ]
    fixed = sum(
        width + PAD for width, col in zip(natural, columns, strict=True) if not col.free_text
    )
    flexible = [i for i, col in enumerate(columns) if col.free_text]
    room = max(MIN_FREE_TEXT, (opts.width or UNBOUNDED_WIDTH) - fixed - PAD * len(flexible))
    table = Table(
        box=None,
        show_edge=False,
        pad_edge=False,
        padding=(0, PAD, 0, 0),
        header_style="bold" if opts.color else "",
    )
    for col in columns:
        table.add_column(col.header, no_wrap=not col.wrap, overflow="fold")
    style_of = styles or {}
    for row in rows:
        cells: list[RenderableType] = []
        for i, (col, value) in enumerate(zip(columns, row, strict=True)):
            text = _cut(value, room) if i in flexible and not col.wrap and opts.width else value
            style = style_of[col.header](value) if opts.color and col.header in style_of else ""
            cells.append(Text(text, style=style))
        table.add_row(*cells)
    return table, fixed + (room + PAD) * len(flexible)


def plain_table(columns: Sequence[Column], rows: Sequence[Sequence[str]]) -> str | None:
    """The table as `draw(rich_table(...))` draws it with no colour and no width limit, for
    cells of printable ASCII (one character, one column); None for anything else, which
    rich draws."""
    cells = [[col.header for col in columns], *rows]
    if not all(cell.isascii() and cell.isprintable() for row in cells for cell in row):
        return None
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = (
        "".join(cell.ljust(w + PAD) for cell, w in zip(row, widths, strict=True)) for row in cells
    )
    return "".join(line.rstrip(" ") + "\n" for line in lines)


def draw(opts: RenderOptions, renderables: Iterable[RenderableType], min_width: int = 0) -> Drawn:
    from rich.console import Console  # noqa: PLC0415

    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=max(opts.width, min_width) if opts.width else UNBOUNDED_WIDTH,
        force_terminal=opts.color,
        no_color=not opts.color,
        color_system="standard" if opts.color else None,
        markup=False,  # names and reasons are the user's text, never markup
        highlight=False,
        emoji=False,
        soft_wrap=False,
    )
    for renderable in renderables:
        console.print(renderable)
    return Drawn("".join(line.rstrip(" ") + "\n" for line in buffer.getvalue().splitlines()))


def state_style(state: str) -> str:
    return STATE_STYLES.get(state, "")
