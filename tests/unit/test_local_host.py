"""Which Host a request over trainqd's socket may name (api/connection.local_host): a local
name or address, never a site's own name, which is what a page rebinding that name to a
forward of the socket sends (tests/ui/test_rebinding.py tries it with a browser)."""

from __future__ import annotations

import h11
import pytest

from trainqd.api.connection import local_host


def request(host: str | None) -> h11.Request:
    headers = [("Host", host)] if host is not None else []
    return h11.Request(method="GET", target="/v1/jobs", headers=headers, http_version="1.0")


@pytest.mark.parametrize(
    "host",
    [
        None,
        "",  # no name at all is no site's name either
        "trainq",
        "t",
        "localhost",
        "LOCALHOST:8080",
        "localhost.",
        "127.0.0.1",
        "127.0.0.1:44017",
        "127.1.2.3:80",
        "[::1]",
        "[::1]:8080",
        "pages.localhost:8080",
    ],
)
def test_local_names_are_served(host: str | None) -> None:
    assert local_host(request(host))


@pytest.mark.parametrize(
    "host",
    [
        "rebind.example",
        "rebind.example:8080",
        "box.lab.example",
        "10.0.0.5:8080",
        "192.168.1.20",
        "127.0.0.1.rebind.example",
        "localhost.rebind.example:8080",
        "[::2]:8080",
        "[fe80::1]",
    ],
)
def test_other_names_are_refused(host: str) -> None:
    assert not local_host(request(host))
