"""What a `trainq` command may touch besides the daemon: where to write, which socket, the
caller's directory and environment. No global state, so tests run commands in-process."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import BinaryIO, TextIO

from trainq.client.api import Api
from trainq.humanize import JsonText
from trainq.inert import inert, inert_drawn


@dataclass(frozen=True)
class Context:
    """What a command may touch besides the daemon."""

    socket_path: Path
    environ: Mapping[str, str]
    cwd: Path | None  # None: the current directory was deleted
    stdout: TextIO = field(default_factory=lambda: sys.stdout)
    stderr: TextIO = field(default_factory=lambda: sys.stderr)

    def client(self) -> Api:
        """trainqd's API, as JSON (the commands never pay for pydantic's records)."""
        return Api(self.socket_path)

    def stdout_bytes(self) -> BinaryIO:
        """Where raw bytes go (`logs`): the text stream's buffer, after what it holds."""
        self.stdout.flush()
        return self.stdout.buffer

    def now(self) -> datetime:
        return datetime.now(UTC)

    def say(self, line: str) -> None:
        """One line for the person at the terminal, kept off stdout (which scripts read)."""
        self.stderr.write(f"trainq: {inert(line)}\n")
        self.stderr.flush()

    def print(self, text: str) -> None:
        """Text for stdout: JSON as it came, anything else inert (`trainq.inert`)."""
        if not isinstance(text, JsonText):
            text = inert_drawn(text)
        self.stdout.write(text if text.endswith("\n") else f"{text}\n")
        self.stdout.flush()
