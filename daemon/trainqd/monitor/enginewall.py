"""The host's users kept off a container gang's network of the engine's (root trainqd).

The engine gives the host an address on an `--internal` network's bridge, and so a route
to every node: any process of the host could connect to a node's ports. Each such network
gets an nftables table of trainq's own, named as the network, made before any node starts
and deleted with the network (by the gang, or by trainqd's clean-up of a lost attempt):
it drops what a process of the host other than root's sends to the network's subnets or
out through its bridge (IPv6's link-local addresses), and what the host would forward
there from elsewhere. Root's packets pass: the engine's DNS (aardvark-dns) answers the
nodes as root. Packets of no socket (the kernel's own replies) pass too: nobody chooses
them. No other table is read or touched.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import shutil
import subprocess

NFT_TIMEOUT = 30.0
_NFT_DIRS = "/usr/sbin:/sbin:/usr/bin:/bin"
# Engine network names of trainq's (`trainq-<job>-<attempt>`): a valid nft identifier.
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,63}")


class Unavailable(Exception):
    """No firewall could be made; the message says why, in one line."""


def nft_path() -> str:
    found = shutil.which("nft", path=_NFT_DIRS)
    if found is None:
        raise Unavailable("nft is not installed (Debian package nftables)")
    return found


def docker_bridge(network: str) -> str:
    """The bridge name trainq gives a network it makes with docker's CLI: docker's own
    default (br-ID) is not what podman's Docker-compatible service uses, and neither says
    which it took. Within Linux's 15 characters."""
    return "tqe" + hashlib.sha256(network.encode()).hexdigest()[:11]


def parse_inspect(text: str) -> tuple[list[str], str | None]:
    """The subnets and bridge of `network inspect`'s JSON, podman's or docker's."""
    try:
        found = json.loads(text)
        item = found[0] if isinstance(found, list) else found
        if isinstance(item.get("subnets"), list):  # podman
            subnets = [str(s["subnet"]) for s in item["subnets"]]
            bridge = item.get("network_interface")
        else:  # docker
            subnets = [str(c["Subnet"]) for c in (item.get("IPAM") or {}).get("Config") or []]
            options = item.get("Options") or {}
            bridge = options.get("com.docker.network.bridge.name") or None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError) as exc:
        raise Unavailable(f"unreadable network inspect output ({exc!r})") from None
    try:
        nets = [ipaddress.ip_network(s, strict=False) for s in subnets]
    except ValueError as exc:
        raise Unavailable(f"unreadable subnet ({exc})") from None
    if not nets:
        raise Unavailable("the network has no subnet")
    if bridge is not None and not (isinstance(bridge, str) and _NAME.fullmatch(bridge)):
        raise Unavailable(f"unexpected bridge name {bridge!r}")
    return [str(n) for n in nets], bridge


def ruleset(network: str, subnets: list[str], bridge: str) -> str:
    """The nft script of `network`'s table."""
    out, forward = [], []
    for subnet in subnets:
        family = "ip6" if ipaddress.ip_network(subnet).version == 6 else "ip"
        out.append(f"{family} daddr {subnet} meta skuid != 0 drop")
        forward.append(f"{family} daddr {subnet} {family} saddr != {subnet} drop")
    out.append(f'oifname "{bridge}" meta skuid != 0 drop')
    lines = [
        f"table inet {network} {{",
        "  chain host_out {",
        "    type filter hook output priority filter; policy accept;",
        *(f"    {rule}" for rule in out),
        "  }",
        "  chain forwarded {",
        "    type filter hook forward priority filter; policy accept;",
        *(f"    {rule}" for rule in forward),
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


def _nft(args: list[str], script: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [nft_path(), *args],
        input=script,
        capture_output=True,
        text=True,
        timeout=NFT_TIMEOUT,
        env={"PATH": _NFT_DIRS, "LANG": "C"},
        check=False,
    )


def add(network: str, inspected: str, bridge: str | None = None) -> None:
    """`network`'s table, from its `network inspect` output (and its bridge, when trainq
    named it); Unavailable if it cannot be."""
    if not _NAME.fullmatch(network):
        raise Unavailable(f"unexpected network name {network!r}")
    subnets, found = parse_inspect(inspected)
    bridge = bridge or found
    if bridge is None:
        raise Unavailable("the network's bridge is unknown")
    remove(network)  # a stale one of an attempt of the same name: replaced, not doubled
    try:
        done = _nft(["-f", "-"], ruleset(network, subnets, bridge))
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise Unavailable(f"nft failed: {exc}") from None
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        raise Unavailable(f"nft failed: {said[0] if said else done.returncode}")


def remove(network: str) -> bool:
    """Delete `network`'s table; whether one was there. Never raises."""
    if os.geteuid() != 0 or not _NAME.fullmatch(network):
        return False
    try:
        return _nft(["delete", "table", "inet", network]).returncode == 0
    except (Unavailable, OSError, subprocess.TimeoutExpired):
        return False
