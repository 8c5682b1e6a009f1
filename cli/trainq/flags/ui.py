"""`trainq ui`."""

# No `from __future__ import annotations`: typer reads every command's annotations on each
# run (see trainq.cli).
import argparse
from typing import Annotated

import typer

from trainq.flags.common import Socket, parsed

commands = typer.Typer()  # its commands; trainq.cli adds them to the app in order


@commands.command(short_help="the web pages in your browser, through a local forwarder")
def ui(
    ctx: typer.Context,
    port: Annotated[
        int,
        typer.Option(
            "--port", min=0, max=65535, help="port on 127.0.0.1 (default 0: the kernel picks)"
        ),
    ] = 0,
    socket: Socket = None,
) -> argparse.Namespace:
    """Serve trainqd's web pages on 127.0.0.1 as you, behind a secret token: open the URL
    it prints. Ctrl-C stops it."""
    return parsed(ctx, "ui", socket=socket, port=port)
