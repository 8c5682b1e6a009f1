"""trainqd's HTTP/JSON API on a unix socket (docs/architecture.md).

`http` holds the request, response and route types and the router (no I/O); `server` speaks
HTTP/1.1 with h11 over anyio streams and learns each caller from SO_PEERCRED; `listener` binds
the socket safely; `openapi` describes the routes as an OpenAPI 3.1 document.
"""
