"""The firewall of a container gang's engine network (monitor/enginewall.py): what it reads
from either engine's `network inspect`, and the one-line refusal of anything else."""

from __future__ import annotations

import json

import pytest

from trainqd.monitor import enginewall

PODMAN = [
    {
        "name": "trainq-ab12-3-1",
        "network_interface": "podman4",
        "subnets": [{"subnet": "10.89.3.0/24", "gateway": "10.89.3.1"}],
        "internal": True,
    }
]
DOCKER = [
    {
        "Name": "trainq-ab12-3-1",
        "Id": "0123456789abcdef0123",
        "IPAM": {"Config": [{"Subnet": "172.18.0.0/16"}, {"Subnet": "fd00:1::/64"}]},
        "Options": {},
    }
]


def test_podmans_subnets_and_bridge() -> None:
    assert enginewall.parse_inspect(json.dumps(PODMAN)) == (["10.89.3.0/24"], "podman4")


def test_dockers_subnets_and_the_bridge_trainq_named() -> None:
    subnets, bridge = enginewall.parse_inspect(json.dumps(DOCKER))
    assert subnets == ["172.18.0.0/16", "fd00:1::/64"]
    assert bridge is None  # podman's Docker-compatible service does not say
    named = enginewall.docker_bridge("trainq-ab12-3-1")
    assert len(named) <= 15
    assert named != enginewall.docker_bridge("trainq-ab12-3-2")


def test_the_rules_drop_what_non_root_sends_in_and_what_is_routed_in() -> None:
    script = enginewall.ruleset("trainq-ab12-3-1", ["10.89.3.0/24", "fd00:1::/64"], "podman4")
    assert script.startswith("table inet trainq-ab12-3-1 {")
    assert "ip daddr 10.89.3.0/24 meta skuid != 0 drop" in script
    assert "ip6 daddr fd00:1::/64 meta skuid != 0 drop" in script
    assert 'oifname "podman4" meta skuid != 0 drop' in script
    assert "ip daddr 10.89.3.0/24 ip saddr != 10.89.3.0/24 drop" in script


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        json.dumps([{"subnets": []}]),
        json.dumps([{"subnets": [{"subnet": "not an address"}]}]),
        json.dumps([{"subnets": [{"subnet": "10.0.0.0/8"}], "network_interface": 'x"; flush'}]),
    ],
)
def test_anything_else_is_refused_in_one_line(text: str) -> None:
    with pytest.raises(enginewall.Unavailable) as caught:
        enginewall.parse_inspect(text)
    assert "\n" not in str(caught.value)


def test_a_name_nft_would_misread_is_refused() -> None:
    with pytest.raises(enginewall.Unavailable, match="unexpected network name"):
        enginewall.add("trainq x; flush ruleset", json.dumps(PODMAN))
