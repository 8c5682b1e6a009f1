"""trainqd's log: structlog, JSON lines when stderr is not a terminal (journald, files),
readable lines on a terminal. `job_id` is bound wherever a line is about one job."""

from __future__ import annotations

import logging
import sys

import structlog

LEVELS = {
    "debug": logging.DEBUG,
    "info": logging.INFO,
    "warning": logging.WARNING,
    "error": logging.ERROR,
}


def configure(level: str = "info", *, json: bool | None = None) -> None:
    as_json = not sys.stderr.isatty() if json is None else json
    processors: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        structlog.processors.format_exc_info if as_json else structlog.dev.set_exc_info,
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if as_json else structlog.dev.ConsoleRenderer()
    )
    structlog.configure(
        processors=[*processors, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(LEVELS[level]),
        logger_factory=structlog.PrintLoggerFactory(sys.stderr),
        cache_logger_on_first_use=True,
    )
    # Libraries that use the standard library's logging (and the API server's error hook)
    # end up in the same stream.
    logging.basicConfig(level=LEVELS[level], stream=sys.stderr, format="%(name)s: %(message)s")
