"""The handlers of what jobs write and what happens to them: logs, metrics, events."""

from __future__ import annotations

from dataclasses import dataclass, field

import anyio

from trainq.core.errors import InvalidRequest
from trainqd.access.authorization import Authorizer
from trainqd.api.handlers.common import job_id_of
from trainqd.api.node_query import node_to_read
from trainqd.api.routing import Request, Response, StreamResponse
from trainqd.api.streams import (
    EVENTS_PRUNED_HEADER,
    REPLAY_THREADS,
    check_logs,
    event_lines,
    log_chunks,
)
from trainqd.attempts.jobdir import JobDirs
from trainqd.experiments.metric_watch import MetricWatch
from trainqd.scheduling.events import ChangeNotifier
from trainqd.store import Store

MAX_TAIL_LINES = 1_000_000


@dataclass
class Outputs:
    """A job's logs and metrics and the events stream, with what they need of the API."""

    store: Store
    dirs: JobDirs
    notifier: ChangeNotifier
    authorizer: Authorizer
    metric_watch: MetricWatch
    _replays: anyio.CapacityLimiter | None = field(default=None, init=False, repr=False)

    async def logs(self, request: Request) -> StreamResponse:
        job_id = job_id_of(request)
        job = self.store.get(job_id)  # 404 before the stream starts
        self.authorizer.require_manage(request.caller.uid, job, "read the logs of")
        stream = request.query_str("stream", "both") or "both"
        if stream not in ("stdout", "stderr", "both"):
            raise InvalidRequest("query parameter 'stream' must be stdout, stderr or both")
        attempt = request.query_int("attempt", None, min=1, max=max(1, job.attempt_count))
        # A job of several nodes: one node's output (the first's unless asked).
        node = node_to_read(request, job)
        if attempt or job.attempt_count:  # a log the owner made a FIFO or a link: one line
            await anyio.to_thread.run_sync(
                check_logs, self.dirs, job_id, attempt or job.attempt_count, stream, node
            )
        since = request.query_str("since", None)
        stamps = request.query_bool("stamps")
        chunks = log_chunks(
            self.store,
            self.dirs,
            self.notifier,
            job_id,
            attempt=attempt,
            stream=stream,
            follow=request.query_bool("follow"),
            tail=request.query_int("tail", None, min=0, max=MAX_TAIL_LINES),
            since_ns=None if since is None else _unix_ns("since", since),
            stamps=stamps,
            node=node,
        )
        if stamps:
            return StreamResponse("application/x-ndjson", chunks)
        return StreamResponse("text/plain; charset=utf-8", chunks)

    async def job_metrics(self, request: Request) -> Response:
        job = self.store.get(job_id_of(request))
        # Metrics come from the job's output: whoever may read its logs may read them.
        self.authorizer.require_manage(request.caller.uid, job, "read the metrics of")
        return Response(200, await self.metric_watch.job_metrics(job))

    async def events(self, request: Request) -> StreamResponse:
        job_id = request.query_int("job", None, min=1)
        if job_id is not None:
            self.store.get(job_id)
        since = request.query_int("since", None, min=0)
        if since is None:
            since = self.store.last_event_id()
        if self._replays is None:
            self._replays = anyio.CapacityLimiter(REPLAY_THREADS)
        headers = []
        pruned = self.store.events_pruned_before()
        if since + 1 < pruned:  # what it asks for is partly gone: say so, not silently
            headers.append((EVENTS_PRUNED_HEADER, str(pruned)))
        chunks = event_lines(self.store, self.notifier, job_id, since, self._replays)
        return StreamResponse("application/x-ndjson", chunks, headers=headers)


def _unix_ns(name: str, text: str) -> int:
    """A query parameter in Unix seconds (a fraction allowed), as nanoseconds."""
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not 0 <= seconds < 1e11:  # NaN fails too
        raise InvalidRequest(f"query parameter {name!r} must be a time in Unix seconds")
    return round(seconds * 1e6) * 1000  # microseconds: the grain of the times sent
