"""The pages as a person sees them: a real `trainq ui` forwarder in front of a real trainqd,
and Debian's chromium driven by Playwright (the system's browser: nothing is downloaded)."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from playwright.sync_api import Browser, Page

from tests.support.daemon import TRAINQ, Daemon
from tests.support.waiting import wait_for
from tests.support.watching import write_gpu_file

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


TOKEN_HEADER = "X-Trainq-Token"


class Forwarder:
    """A running `trainq ui`: its process and the URL it printed."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.proc = proc
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the first line is the URL (the process flushes it)
        assert line.startswith("trainq pages: http://127.0.0.1:"), line
        self.url = line.split(": ", 1)[1].strip()
        parts = urlsplit(self.url)
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.token = parts.fragment.removeprefix("token=")

    def open(self, browser: Browser, route: str = "#/box", width: int = 1280) -> Page:
        """A fresh browser context on `route`, its address carrying the token as the
        printed URL does (`#/job/12&token=...`)."""
        return open_page(browser, f"{self.origin}/ui/{route}&token={self.token}", width)

    def headers(self) -> dict[str, str]:
        return {TOKEN_HEADER: self.token}


@contextmanager
def forwarder(
    daemon: Daemon, start: Callable[[list[str]], subprocess.Popen[str]] | None = None
) -> Iterator[Forwarder]:
    """`trainq ui` for `daemon`'s socket, started by `start` (default: as this process)."""
    argv = [TRAINQ, "--socket", str(daemon.socket), "ui"]
    kw: dict[str, Any] = {"stdout": subprocess.PIPE, "text": True, "env": daemon.env}
    proc = start(argv) if start is not None else subprocess.Popen(argv, **kw)
    try:
        yield Forwarder(proc)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def fetch(url: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    """One plain HTTP GET, not following redirects: (status, body)."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kw: Any) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    request = urllib.request.Request(url, headers=headers or {})  # noqa: S310 (http on loopback)
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def open_page(browser: Browser, url: str, width: int = 1280) -> Page:
    """A fresh browser context (no cookie yet) on `url`, failing on any script error."""
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on(
        "console",
        lambda message: errors.append(message.text) if message.type == "error" else None,
    )
    page.script_errors = errors  # type: ignore[attr-defined]
    page.goto(url)
    return page


def screenshot(page: Page, name: str) -> Path:
    """Kept as the test's artefact under $TRAINQ_UI_SHOTS (or /tmp/trainq-ui-shots)."""
    folder = Path(os.environ.get("TRAINQ_UI_SHOTS", "/tmp/trainq-ui-shots"))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def cells(page: Page, selector: str) -> list[str]:
    return [text.strip() for text in page.locator(selector).all_inner_texts()]


def write_gpus(path: Path, readings: list[tuple[int, int]]) -> None:
    """The fake GPUs' file: one (utilization %, memory used MiB) per GPU."""
    gpus = [{"utilization": u, "memory_used_mib": m} for u, m in readings]
    write_gpu_file(path, {"count": len(gpus), "gpus": gpus})


def until(condition: Callable[[], Any], what: str, timeout: float = 15) -> Any:
    return wait_for(condition, timeout=timeout, interval=0.1, what=what)


class SocketForward:
    """What `ssh -L PORT:/path/to/socket` does: each TCP connection to 127.0.0.1:PORT
    relayed to the unix socket, as the user who made the forward."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(str(self.target))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(source, sink), daemon=True).start()

    def close(self) -> None:
        self.listener.close()


def _pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()
