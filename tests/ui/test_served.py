"""trainqd serves the pages' files from the package, read-only, with their types and a
policy that keeps a page to its own scripts; nothing else of the package is reachable."""

from __future__ import annotations

import pytest

from tests.support.daemon import Daemon

pytestmark = pytest.mark.ui

FILES = {
    "/ui/": "text/html",
    "/ui/app.js": "text/javascript",
    "/ui/style.css": "text/css",
    "/ui/uplot.min.js": "text/javascript",
    "/ui/uplot.min.css": "text/css",
    "/ui/uplot.LICENSE": "text/plain",
}


def test_every_file_of_the_pages_is_served_with_its_type_and_policy(box: Daemon) -> None:
    for path, media in FILES.items():
        response = box.get(path)
        assert response.status_code == 200, path
        assert response.headers["content-type"].startswith(media), path
        policy = response.headers["content-security-policy"]
        assert "script-src 'self'" in policy
        assert "frame-ancestors 'none'" in policy
        assert response.headers["x-content-type-options"] == "nosniff"
    assert "MIT License" in box.get("/ui/uplot.LICENSE").text
    redirect = box.get("/ui")
    assert (redirect.status_code, redirect.headers["location"]) == (308, "/ui/")


def test_nothing_else_is_reachable_under_ui(box: Daemon) -> None:
    for path in (
        "/ui/ui_routes.py",
        "/ui/..%2Fui_routes.py",
        "/ui/..%2F..%2Ftrainq%2Fcore%2Fspec.py",
        "/ui/%2Fetc%2Fpasswd",
        "/ui/app.js%00.html",
        "/ui/nothing.js",
    ):
        response = box.get(path)
        assert response.status_code == 404, path
        assert response.headers["content-type"].startswith("application/json"), path
    assert box.post("/ui/app.js").status_code == 405
    assert box.get("/v1/health").status_code == 200
