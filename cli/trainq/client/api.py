"""trainqd's HTTP API, one method per endpoint, answering the daemon's JSON as it came.

This is what the `trainq` commands call: no pydantic (its import cost stays off the CLI's
fast path; `trainq.client.library` adds the typed records on top), no path strings outside
this module. Each method is named after its endpoint (`get_job` is `GET /v1/jobs/{id}`,
`post_job_stop` is `POST /v1/jobs/{id}/stop`), takes what the endpoint takes as arguments,
and leaves out of the query what is None. A stream (`get_job_logs`, `get_events`) is a
`ResponseStream` to be closed, or used as a context manager.

A submission with a client token (`Idempotency-Key`: `client_token=` in the library, and
every `trainq submit`) whose answer was lost (the connection closed before the answer, no
answer in time, trainqd restarting) is sent again, for up to `RESUBMIT_SECONDS`: trainqd
queues a token's submission once and answers a repeat with the jobs the first one queued.
"""

from __future__ import annotations

import builtins
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from trainq.client.transport import QueryValue, ResponseStream, Transport
from trainq.core.errors import Busy, DaemonUnreachable, Unavailable

RESUBMIT_SECONDS = 120.0  # a submission with a token, sent again after a lost answer
RESUBMIT_PAUSE = 0.5
IDEMPOTENCY_HEADER = "Idempotency-Key"
PAGE_LIMIT = 1000  # the largest page trainqd gives

Json = Any  # a JSON value as trainqd sent it (an object, for every endpoint here)


def new_token() -> str:
    """A fresh client token, so a resend after a lost answer never queues twice."""
    return os.urandom(16).hex()


def _grace(grace_seconds: float | None) -> dict[str, Any]:
    return {} if grace_seconds is None else {"grace_seconds": grace_seconds}


def _gpus(gpus: Sequence[int] | None) -> dict[str, Any]:
    return {} if gpus is None else {"gpus": builtins.list(gpus)}


class Api(Transport):
    """trainqd's endpoints; every method raises trainq's error for a refusal."""

    # -- jobs ----------------------------------------------------------------------------

    def post_jobs(self, body: Json, token: str | None = None) -> Json:
        """POST /v1/jobs (one spec or a list) and its answer. With a client token, a lost
        answer is no error yet: the same request goes again until trainqd answers, for up
        to RESUBMIT_SECONDS, and a token queues its jobs once whatever happened to the
        first request."""
        if token is None:
            return self.request("POST", "/v1/jobs", json=body)[1]
        headers = {IDEMPOTENCY_HEADER: token}
        give_up_at: float | None = None  # set at the first lost answer
        while True:
            try:
                return self.request("POST", "/v1/jobs", json=body, headers=headers)[1]
            except Unavailable as exc:
                never_sent = isinstance(exc, DaemonUnreachable | Busy) and give_up_at is None
                if never_sent:  # nothing reached trainqd: the usual one line
                    raise
                give_up_at = give_up_at or time.monotonic() + RESUBMIT_SECONDS
                if time.monotonic() >= give_up_at:
                    raise Unavailable(
                        f"{exc.message}; the submission may have been queued: send it again "
                        f"with the token {token} (trainq submit --token {token}) to get its "
                        "jobs, queued once"
                    ) from None
            time.sleep(RESUBMIT_PAUSE)

    def get_jobs(
        self,
        *,
        include_ended: bool | None = None,
        state: str | None = None,
        user: str | None = None,
        group: int | None = None,
        limit: int | None = None,
        after: QueryValue = None,
    ) -> Json:
        """GET /v1/jobs: one page (`jobs`, `total`, `next`: the cursor for `after`)."""
        query = {
            "all": include_ended,
            "state": state,
            "user": user,
            "group": group,
            "limit": limit,
            "after": after,
        }
        return self.request("GET", "/v1/jobs", query=query)[1]

    def all_jobs(
        self,
        *,
        include_ended: bool | None = None,
        state: str | None = None,
        user: str | None = None,
        group: int | None = None,
    ) -> builtins.list[Json]:
        """Every job GET /v1/jobs matches, following its pages (largest allowed) to the end."""
        jobs: builtins.list[Json] = []
        cursor: QueryValue = None
        while True:
            page = self.get_jobs(
                include_ended=include_ended,
                state=state,
                user=user,
                group=group,
                limit=PAGE_LIMIT,
                after=cursor,
            )
            jobs.extend(page.get("jobs", []))
            cursor = page.get("next")
            if not cursor:
                return jobs

    def get_job(self, job_id: int) -> Json:
        """GET /v1/jobs/{id}: the job's record, its spec and attempts."""
        return self.request("GET", f"/v1/jobs/{int(job_id)}")[1]

    def patch_job(self, job_id: int, changes: Mapping[str, Any]) -> Json:
        """PATCH /v1/jobs/{id}: `priority`, `gpus`, `max_runtime_seconds`, `class`, `boost`."""
        return self.request("PATCH", f"/v1/jobs/{int(job_id)}", json=dict(changes))[1]

    def delete_job(self, job_id: int) -> Json:
        """DELETE /v1/jobs/{id}: an ended job's directory, logs and records (`files`)."""
        return self.request("DELETE", f"/v1/jobs/{int(job_id)}")[1]

    def post_job_stop(self, job_id: int, *, grace_seconds: float | None = None) -> Json:
        """POST /v1/jobs/{id}/stop; the record as it is now."""
        path = f"/v1/jobs/{int(job_id)}/stop"
        return self.request("POST", path, json=_grace(grace_seconds))[1]

    def post_job_hold(self, job_id: int) -> Json:
        return self.request("POST", f"/v1/jobs/{int(job_id)}/hold")[1]

    def post_job_release(self, job_id: int) -> Json:
        return self.request("POST", f"/v1/jobs/{int(job_id)}/release")[1]

    def post_job_requeue(self, job_id: int) -> Json:
        """POST /v1/jobs/{id}/requeue: the new job's record."""
        return self.request("POST", f"/v1/jobs/{int(job_id)}/requeue")[1]

    def get_job_metrics(self, job_id: int) -> Json:
        return self.request("GET", f"/v1/jobs/{int(job_id)}/metrics")[1]

    def get_job_logs(
        self,
        job_id: int,
        *,
        follow: bool = False,
        stream: str = "both",
        attempt: int | None = None,
        tail: int | None = None,
        since: float | None = None,
        stamps: bool | None = None,
        node: int | None = None,
    ) -> ResponseStream:
        """GET /v1/jobs/{id}/logs as it comes: raw output, or with `stamps` JSON lines of
        `{"time", "stream", "text"}`; `since` is Unix time; `node`: a job of several nodes'
        node N's (the first's without it)."""
        query: dict[str, QueryValue] = {
            "follow": follow,
            "stream": stream,
            "attempt": attempt,
            "tail": tail,
            "since": None if since is None else f"{since:.6f}",
            "stamps": stamps,
            "node": node,
        }
        return self.stream("GET", f"/v1/jobs/{int(job_id)}/logs", query)

    def post_group_stop(self, group: int, *, grace_seconds: float | None = None) -> Json:
        """POST /v1/groups/{id}/stop: `stopped` and how many were `not_allowed`."""
        path = f"/v1/groups/{int(group)}/stop"
        return self.request("POST", path, json=_grace(grace_seconds))[1]

    # -- events --------------------------------------------------------------------------

    def get_events(self, *, job: int | None = None, since: int | None = None) -> ResponseStream:
        """GET /v1/events: JSON lines (an empty one is a keep-alive), of one job or all;
        `since` replays the stored ones after that event id first."""
        return self.stream("GET", "/v1/events", {"job": job, "since": since})

    # -- the workstation -----------------------------------------------------------------

    def get_gpus(self) -> Json:
        return self.request("GET", "/v1/gpus")[1]

    def get_health(self) -> Json:
        return self.request("GET", "/v1/health")[1]

    def get_report(self, *, since: str, by: str) -> Json:
        """GET /v1/report: usage per user (or class) over `since` (30d, 12h)."""
        return self.request("GET", "/v1/report", query={"since": since, "by": by})[1]

    def get_users(self) -> Json:
        return self.request("GET", "/v1/users")[1]

    def post_drain(self, reason: str, gpus: Sequence[int] | None = None) -> Json:
        """POST /v1/drain (admins): every drain now, as `drains`."""
        return self.request("POST", "/v1/drain", json={"reason": reason, **_gpus(gpus)})[1]

    def post_resume(self, gpus: Sequence[int] | None = None) -> Json:
        """POST /v1/resume (admins): the drains left, as `drains`."""
        return self.request("POST", "/v1/resume", json=_gpus(gpus))[1]

    # -- tuning --------------------------------------------------------------------------

    def post_tunes(self, spec: Mapping[str, Any], tune: Mapping[str, Any]) -> Json:
        body = {"spec": dict(spec), "tune": dict(tune)}
        return self.request("POST", "/v1/tunes", json=body)[1]

    def get_tunes(self) -> Json:
        return self.request("GET", "/v1/tunes")[1]

    def get_tune(self, tune_id: int) -> Json:
        return self.request("GET", f"/v1/tunes/{int(tune_id)}")[1]

    def post_tune_stop(self, tune_id: int) -> Json:
        return self.request("POST", f"/v1/tunes/{int(tune_id)}/stop")[1]
