"""Which requests a browser sent for a page of another origin (api/connection.cross_origin):
those that would change something are refused, whatever their Host (tests/ui/
test_cross_origin.py tries it with a browser through a forward of the socket)."""

from __future__ import annotations

import h11
import pytest

from trainqd.api.connection import cross_origin


def request(method: str, **headers: str) -> h11.Request:
    fields = [("Host", "localhost:8080")]
    fields += [(name.replace("_", "-"), value) for name, value in headers.items()]
    return h11.Request(method=method, target="/v1/jobs", headers=fields)


@pytest.mark.parametrize(
    "made",
    [
        request("POST"),  # the CLI, the library: no browser's headers
        request("POST", sec_fetch_site="same-origin", origin="http://localhost:8080"),
        request("POST", sec_fetch_site="none"),
        request("POST", origin="http://localhost:8080"),
        request("DELETE", origin="HTTP://LOCALHOST:8080"),
        request("GET", sec_fetch_site="cross-site", origin="https://evil.example"),
        request("HEAD", origin="null"),
    ],
)
def test_own_requests_and_reads_pass(made: h11.Request) -> None:
    assert not cross_origin(made)


@pytest.mark.parametrize(
    "made",
    [
        request("POST", sec_fetch_site="cross-site", origin="https://evil.example"),
        request("POST", sec_fetch_site="same-site", origin="http://localhost:9090"),
        request("POST", sec_fetch_site="cross-site"),
        request("POST", origin="https://evil.example"),
        request("POST", origin="http://localhost:9090"),
        request("POST", origin="http://127.0.0.1:8080"),  # another origin, the same box
        request("POST", origin="null"),  # a sandboxed frame, a data: page
        request("PATCH", origin="file://"),
        request("DELETE", sec_fetch_site="same-site"),
    ],
)
def test_a_page_of_another_origin_changes_nothing(made: h11.Request) -> None:
    assert cross_origin(made)
