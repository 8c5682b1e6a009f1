"""Which images a user may run: the administrator's `allowed_images`, and no transport that
reads an image from a path on the host (docs/security.md).

The engines take more than registry references: podman (through containers/image) reads
`oci-archive:/x.tar`, `dir:/x`, `docker-daemon:x`, `containers-storage:x` and more, each
named by a `transport:` prefix. Such an image comes from whatever file its user built, so it
is refused unless a pattern of the administrator names that transport explicitly
(`oci-archive:/srv/images/*`). A registry reference (`docker.io/x:1`, `localhost:5000/x`,
`docker://x`) or a local image (`localhost/x:tag`) is checked against the patterns alone.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence

from trainq.core.errors import Forbidden

# containers/image's transports that are not a registry. Any other `word:` prefix followed
# by a path is taken for a transport too: a registry reference has a tag, not a path, after
# its first colon (or a port number before the path).
NON_REGISTRY_TRANSPORTS = frozenset(
    {
        "atomic",
        "containers-storage",
        "dir",
        "docker-archive",
        "docker-daemon",
        "oci",
        "oci-archive",
        "ostree",
        "sif",
        "tarball",
    }
)
_PREFIX = re.compile(r"^([a-z][a-z0-9-]*):(.*)$", re.DOTALL)
_PORT_THEN_PATH = re.compile(r"^[0-9]+/")


def transport(reference: str) -> str | None:
    """The non-registry transport `reference` names (`oci-archive`, ...), `path` for a bare
    path, or None for a registry reference or a local image."""
    if reference.startswith(("/", ".", "~")):
        return "path"
    found = _PREFIX.match(reference)
    if found is None:
        return None
    name, rest = found.groups()
    if name == "docker" and rest.startswith("//"):
        return None  # docker://NAME is the registry, spelled out
    if name in NON_REGISTRY_TRANSPORTS:
        return name
    if "/" in rest and not _PORT_THEN_PATH.match(rest):
        return name  # NAME:something/with/a/path: not a tag, so not a registry reference
    return None


def check_image(reference: str, allowed: Sequence[str]) -> None:
    """Raise Forbidden (one line) unless the configuration lets users run `reference`."""
    used = transport(reference)
    if used is not None:
        named = [p for p in allowed if p.startswith(f"{used}:")]
        if not any(fnmatch.fnmatchcase(reference, p) for p in named):
            what = "a path" if used == "path" else f"the {used}: transport"
            raise Forbidden(
                f"image {reference!r} uses {what}, which this host does not run: only "
                "registry references and local images, unless allowed_images names it"
            )
        return
    if not any(fnmatch.fnmatchcase(reference, p) for p in allowed):
        raise Forbidden(
            f"image {reference!r} is not allowed on this host (allowed_images in trainqd's "
            "configuration)"
        )
