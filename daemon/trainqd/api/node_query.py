"""The `node` parameter of a job's logs (GET /v1/jobs/{id}/logs?node=N): which node's
output, in one line when the job has no such node."""

from __future__ import annotations

from trainq.core.errors import InvalidRequest
from trainq.core.nodes import HOST_PREFIX, host_name, is_gang
from trainqd.api.routing import Request
from trainqd.store import JobRow


def node_to_read(request: Request, job: JobRow) -> str | None:
    """The host name of the node asked for (the first node's when none is); None for a job
    of one node, whose output is its attempt's own."""
    number = request.query_int("node", None, min=1)
    if not is_gang(job.spec):
        if number is not None and number != 1:
            raise InvalidRequest(f"job {job.id} runs as one node: it has no node {number}")
        return None
    count = job.spec.node_count
    if number is not None and number > count:
        raise InvalidRequest(
            f"job {job.id} has {count} nodes ({HOST_PREFIX}1 to {host_name(count - 1)}):"
            f" it has no node {number}"
        )
    return host_name((number or 1) - 1)
