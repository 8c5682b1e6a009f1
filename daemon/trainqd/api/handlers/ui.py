"""The web pages under /ui/: fixed files shipped in the package (daemon/trainqd/ui/), read-only.

The pages are an ordinary API client in the browser: every number they show comes from
`/v1/...` on the same socket, asked with the caller's own identity, so they show a user what
`trainq` shows them and nothing more. The charting library (uPlot 1.6.32, from the npm
registry, with its licence) is vendored beside them: nothing is fetched from elsewhere.
"""

from __future__ import annotations

import functools
from importlib import resources

from trainq.core.errors import NotFound
from trainqd.api.routing import Encoded, Request, Response, Route

_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".LICENSE": "text/plain; charset=utf-8",
}
# The page runs its own scripts and styles and talks to this socket alone; a framing site,
# a referrer or a sniffed content type get nothing.
_HEADERS = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("cache-control", "no-cache"),
]


@functools.cache
def _assets() -> dict[str, Encoded]:
    """Every file of the pages by name, read once (about 70 KB in all)."""
    found: dict[str, Encoded] = {}
    for entry in resources.files("trainqd").joinpath("ui").iterdir():
        media = next((t for ext, t in _TYPES.items() if entry.name.endswith(ext)), None)
        if media is not None and entry.is_file():
            found[entry.name] = Encoded(entry.read_bytes(), media)
    return found


async def _index(request: Request) -> Response:
    return Response(200, _assets()["index.html"], list(_HEADERS))


async def _asset(request: Request) -> Response:
    asset = _assets().get(request.params["name"])
    if asset is None:
        raise NotFound(f"no such page file: {request.params['name']}")
    return Response(200, asset, list(_HEADERS))


async def _to_index(request: Request) -> Response:
    return Response(308, None, [("location", "/ui/")])


def ui_routes() -> list[Route]:
    return [
        Route("GET", "/ui", _to_index, "The web pages (redirects to /ui/)"),
        Route("GET", "/ui/", _index, "The web pages: the box, the queue, a job, the users"),
        Route("GET", "/ui/{name}", _asset, "A file of the web pages"),
    ]
