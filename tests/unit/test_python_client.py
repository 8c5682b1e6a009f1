"""The Python library (`from trainq import Client`) against the API stub: a refusal for want
of rights is its own error class (tests/e2e/test_python_client.py runs it against a real
trainqd)."""

from __future__ import annotations

import pytest

from tests.support.apistub import ApiStub, Reply
from trainq import Client, Forbidden


def test_forbidden_is_its_own_class(stub: ApiStub) -> None:
    # Another user's job: what trainqd answers (403) reaches Python as Forbidden.
    message = "job 4 belongs to bob; only bob or an admin may stop it"
    stub.on(
        "POST",
        "/v1/jobs/4/stop",
        Reply(403, {"error": {"code": "forbidden", "message": message}}),
    )
    with pytest.raises(Forbidden, match="belongs to bob"):
        Client(stub.socket_path).stop(4)
