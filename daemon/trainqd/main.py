"""`trainqd`: start the daemon (docs/architecture.md).

Everything that can refuse to start is done before the event loop runs, each refusal one
line on stderr: the configuration, the state directory's lock (one daemon per state dir),
the database, the GPU backend, the socket. Then one root task group runs the scheduler (which
reconciles with jobs that ran on while no daemon did), the other parts (all built by app.py)
and the API server; SIGTERM and SIGINT cancel it. Stopping trainqd never stops a job: each
runs under its own monitor, and the next trainqd takes them over.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import functools
import os
import signal
import sys
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import anyio
import structlog

from trainq.core import __version__
from trainqd import app, gc_tuning, sdnotify
from trainqd.access.authorization import Authorizer
from trainqd.api.listener import SocketSetupError, bind_unix_socket, remove_unix_socket
from trainqd.api.quotas import (
    descriptors_needed,
    fit_to_descriptors,
    raise_open_files_limit,
)
from trainqd.api.routing import Router
from trainqd.api.scrape_listener import ScrapeAddressError, bind_scrape_socket, serve_scrapes
from trainqd.api.server import ServerLimits, serve
from trainqd.attempts import cgroups
from trainqd.attempts.jobdir import JobDirs
from trainqd.config import Config, ConfigError, load_config
from trainqd.gpus import open_backend
from trainqd.gpus.base import GpuBackend, GpuBackendError
from trainqd.gpus.fake import FakeGpuBackend
from trainqd.gpus.fake_nodes import RECORD_NAME as NODES_RECORD
from trainqd.gpus.fake_nodes import NodeError
from trainqd.observe import daemon_log, loop_lag
from trainqd.store import Store, StoreError

EX_CONFIG = 78  # sysexits.h: systemd shows it as "configuration error"
log = structlog.get_logger("trainqd")


class StartupError(Exception):
    """trainqd cannot start; the message is one line."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="trainqd",
        description="The trainq daemon: a GPU job queue for this workstation.",
        allow_abbrev=False,  # a misspelt flag (`--gpu`) is an error, not a guess
    )
    parser.add_argument("--socket", type=Path, help="unix socket to serve the API on")
    parser.add_argument("--state-dir", type=Path, help="where jobs and the database live")
    parser.add_argument("--gpus", help="auto | nvml | none | fake:N | fake:/file.json")
    parser.add_argument("--cpu-slots", type=int, help="concurrent nodes that use no GPU")
    parser.add_argument("--config", type=Path, help="configuration file (TOML)")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    parser.add_argument("--version", action="version", version=f"trainqd {__version__}")
    return parser.parse_args(argv)


def lock_state_dir(state_dir: Path) -> int:
    """One trainqd per state directory: an flock held for the daemon's whole life."""
    root = os.geteuid() == 0
    try:
        state_dir.mkdir(parents=True, exist_ok=True, mode=0o755 if root else 0o700)
        fd = os.open(state_dir / "trainqd.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise StartupError(f"cannot use state directory {state_dir}: {exc.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise StartupError(f"another trainqd (pid {holder}) is already using {state_dir}") from None
    # The pid only names the holder in the message above: a full disk must not stop the start.
    pid = f"{os.getpid()}\n".encode()
    with contextlib.suppress(OSError):
        os.pwrite(fd, pid.ljust(32), 0)
        os.ftruncate(fd, len(pid))
    return fd


def _open_gpus(config: Config) -> GpuBackend:
    try:
        backend = open_backend(config.gpus)
    except GpuBackendError as exc:
        if config.gpus.startswith("fake:/"):
            raise ConfigError(str(exc)) from None
        raise StartupError(str(exc)) from None
    # A host whose driver broke must not pass silently for a CPU-only one.
    reason = getattr(backend, "reason", None)
    if reason:
        log.warning("no GPUs: running CPU jobs only", gpus=config.gpus, reason=reason)
    for problem in getattr(backend, "unreadable", {}).values():
        log.warning("GPU left out", problem=problem)
    return backend


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        config = load_config(
            args.config,
            {
                "socket": args.socket,
                "state_dir": args.state_dir,
                "gpus": args.gpus,
                "cpu_slots": args.cpu_slots,
                "log_level": args.log_level,
            },
        )
    except ConfigError as exc:
        print(f"trainqd: {exc}", file=sys.stderr)
        return EX_CONFIG
    daemon_log.configure(config.log_level)
    with ExitStack() as cleanup:
        try:
            lock = lock_state_dir(config.state_dir)
            cleanup.callback(os.close, lock)
            try:
                store = Store.open(config.database)
            except StoreError as exc:
                raise StartupError(str(exc)) from None
            cleanup.callback(store.close)
            gpus = _open_gpus(config)
            cleanup.callback(gpus.close)
            if isinstance(gpus, FakeGpuBackend) and os.geteuid() == 0:
                try:
                    record = config.state_dir / NODES_RECORD
                    nodes = gpus.make_device_nodes(config.gpu_device_dir, record)
                except NodeError as exc:
                    raise StartupError(str(exc)) from None
                if nodes.unrecorded is not None:
                    log.warning("simulated GPUs without device nodes", reason=nodes.unrecorded)
                if nodes.foreign:
                    log.warning(
                        "device nodes kept that trainq did not make: jobs given those "
                        "simulated GPUs open them",
                        nodes=[str(path) for path in nodes.foreign],
                    )
            try:
                authorizer = Authorizer(config.admin_group, private_data=config.private_data)
            except ValueError as exc:
                raise StartupError(str(exc)) from None
            dirs = JobDirs(config.jobs_dir)
            dirs.ensure_root()
            # Bound before the event loop starts any thread: the bind narrows the umask.
            try:
                sock = bind_unix_socket(
                    config.socket, mode=config.socket_mode_bits, group=config.socket_group
                )
            except SocketSetupError as exc:
                raise StartupError(str(exc)) from None
            cleanup.callback(remove_unix_socket, config.socket)
            scrapes = None
            if config.metrics_listen is not None:
                try:
                    scrapes = bind_scrape_socket(config.metrics_listen)
                except ScrapeAddressError as exc:
                    raise StartupError(str(exc)) from None
        except StartupError as exc:
            print(f"trainqd: {exc}", file=sys.stderr)
            return 1
        except ConfigError as exc:
            print(f"trainqd: {exc}", file=sys.stderr)
            return EX_CONFIG
        if cgroups.announce(str(config.jobs_dir)):
            cleanup.callback(cgroups.release, str(config.jobs_dir))
        serving = functools.partial(
            _serve,
            config,
            store=store,
            gpus=gpus,
            dirs=dirs,
            authorizer=authorizer,
            sock=sock,
            scrapes=scrapes,
        )
        anyio.run(serving)
    return 0


async def _serve(
    config: Config,
    *,
    store: Store,
    gpus: GpuBackend,
    dirs: JobDirs,
    authorizer: Authorizer,
    sock: Any,
    scrapes: Any,
) -> None:
    daemon = app.build(
        config=config,
        store=store,
        gpus=gpus,
        dirs=dirs,
        authorizer=authorizer,
        started_at=time.time(),
    )
    api, metrics = daemon.api, daemon.metrics
    router = Router(metrics.timed(api.routes()))
    with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with anyio.create_task_group() as tg:
            await tg.start(daemon.run)
            tg.start_soon(loop_lag.watch, metrics.loop_lag.observe, metrics.loop_busy.observe)
            if scrapes is not None:
                tg.start_soon(serve_scrapes, scrapes, metrics.scrape)
            await tg.start(
                functools.partial(
                    serve, sock, router, limits=_server_limits(config), on_error=_log_api_error
                )
            )
            gc_tuning.settle(collect=True)  # the jobs loaded at start-up
            sdnotify.notify("READY=1", f"STATUS=serving on {config.socket}")
            log.info(
                "trainqd ready",
                socket=str(config.socket),
                state_dir=str(config.state_dir),
                gpus=f"{gpus.kind}:{len(daemon.devices)}",
                pid=os.getpid(),
            )
            async for signum in signals:
                log.info(
                    "shutting down; running jobs go on under their monitors",
                    signal=signal.Signals(signum).name,
                )
                api.shutting_down()
                sdnotify.notify("STOPPING=1", "STATUS=shutting down")
                tg.cancel_scope.cancel()
                break


def _server_limits(config: Config) -> ServerLimits:
    """The API server's limits from the configuration, its global cap lowered to what the
    process's descriptors allow (their soft limit raised as far as needed first)."""
    wanted = ServerLimits(
        request_timeout=config.request_timeout_seconds,
        keepalive_timeout=config.idle_timeout_seconds,
        max_connections=config.max_connections,
        max_connections_per_user=min(config.max_connections_per_user, config.max_connections),
        max_streams_per_user=config.max_streams_per_user,
    )
    limits = fit_to_descriptors(wanted, raise_open_files_limit(descriptors_needed(wanted)))
    if limits != wanted:
        log.warning(
            "too few open files allowed for max_connections; serving fewer",
            max_connections=limits.max_connections,
        )
    return limits


def _log_api_error(request: Any, exc: BaseException) -> None:
    where = f"{request.method} {request.path}" if request is not None else "connection"
    log.error("request failed", where=where, exc_info=exc)


if __name__ == "__main__":
    sys.exit(main())
