"""Idempotent submits: a client's token (the `Idempotency-Key` header of POST /v1/jobs) names
one submission of one user. trainqd stores it with the jobs, in their transaction
(`Store.submit_batches`), so a client whose answer was lost (trainqd killed after the commit,
a connection cut) sends the same request with the same token again and gets the jobs its
first request queued, same ids and same answer shape, and nothing is queued twice.

A token belongs to the user who sent it: another user's identical token is another
submission and learns nothing of the first. The same token with a different request is
refused rather than answered with jobs the request did not ask for. Tokens are kept for
`store.SUBMIT_TOKEN_SECONDS` (7 days); after that the token is new again.
"""

from __future__ import annotations

import hashlib
import re

from trainq.core.errors import Conflict, InvalidRequest
from trainqd.store.store import JobRow, Submitted, SubmitToken

IDEMPOTENCY_HEADER = "Idempotency-Key"
IDEMPOTENCY_ABOUT = (
    "A client token (1-128 letters, digits, '.', '_', ':', '-'): the same request with the same "
    "token from the same user is answered with the jobs it first queued; kept 7 days"
)
_TOKEN = re.compile(r"[A-Za-z0-9._:-]{1,128}")


def token_of(given: str | None, body: bytes, uid: int) -> SubmitToken | None:
    """`uid`'s client token (the header's value, `given`), with the request body's digest;
    None without the header."""
    if given is None:
        return None
    if not _TOKEN.fullmatch(given):
        raise InvalidRequest(
            "Idempotency-Key must be 1-128 letters, digits, '.', '_', ':' or '-' (a UUID, say)"
        )
    digest = hashlib.sha256(body).hexdigest()
    return SubmitToken(uid=uid, token=given, body_hash=digest)


def same_request(token: SubmitToken, submitted: Submitted) -> None:
    """A used token comes back with its first request, or is refused in one line."""
    if submitted.body_hash != token.body_hash:
        raise Conflict(
            f"Idempotency-Key {token.token!r} was used for another request; "
            "a new submission needs a new key"
        )


def all_there(token: SubmitToken, submitted: Submitted, jobs: list[JobRow]) -> list[JobRow]:
    """The jobs to answer a repeated submission with, or the one line that says some were
    removed since (`trainq rm`, retention)."""
    if len(jobs) != submitted.job_count:
        last = submitted.first_id + submitted.job_count - 1
        span = f"job {last}" if submitted.job_count == 1 else f"jobs {submitted.first_id}-{last}"
        raise Conflict(
            f"Idempotency-Key {token.token!r} queued {span}, removed since; "
            "a new submission needs a new key"
        )
    return jobs
