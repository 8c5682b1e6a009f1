"""Classes in the configuration (one clear line per mistake), admission's class checks,
and fair share's decayed usage (classes.py, admission.py, fairshare.py)."""

from __future__ import annotations

import os
import pwd
from pathlib import Path

import pytest

from trainq.core.errors import Forbidden, InvalidSpec
from trainq.core.spec import parse_spec
from trainqd.access.admission import HostFacts, check_class
from trainqd.access.authorization import Authorizer
from trainqd.config import ConfigError, load_config
from trainqd.planning.classes import JobClass
from trainqd.planning.fairshare import FairShare, Used

DAY = 86400.0
CLASSES = """
default_class = "normal"
[classes.normal]
[classes.scavenger]
weight = -10
preemptible = true
[classes.urgent]
weight = 10
may_preempt = true
max_gpus_per_user = 2
max_runtime_seconds = 3600
users = ["nobody-in-particular-xyz"]
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trainqd.toml"
    path.write_text(text)
    return path


def test_classes_from_the_file(tmp_path: Path) -> None:
    text = CLASSES.replace("nobody-in-particular-xyz", pwd.getpwuid(os.getuid()).pw_name)
    config = load_config(write(tmp_path, text), {"state_dir": tmp_path})
    assert config.default_class == "normal"
    assert config.job_classes["urgent"].may_preempt
    assert config.job_classes["scavenger"].preemptible
    assert config.fair_share_half_life_days == 7.0


def test_no_classes_is_one_implicit_default(tmp_path: Path) -> None:
    config = load_config(None, {"state_dir": tmp_path})
    assert config.job_classes == {"default": JobClass()}


NO_GROUP = "no-such-group-xyz"
NO_USER = "no-such-user-xyz"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('default_class = "gpu"\n[classes.cpu]\n',
         "default_class 'gpu' is not one of the classes (cpu)"),
        ('[classes.a]\nweight = "high"\n', "classes.a.weight: Input should be a valid integer"),
        ("[classes.a]\npreempt = true\n", "classes.a.preempt: unknown key"),
        ('[classes."a b"]\n', "class name 'a b' must be 1-32 letters"),
        (f'[classes.default]\ngroups = ["{NO_GROUP}"]\n',
         f"classes.default.groups: group '{NO_GROUP}' does not exist"),
        (f'[classes.default]\nusers = ["{NO_USER}"]\n',
         f"classes.default.users: user '{NO_USER}' does not exist"),
        ("fair_share_half_life_days = -1\n",
         "fair_share_half_life_days: Input should be greater than or equal to 0"),
    ],
)  # fmt: skip
def test_class_mistakes_are_one_line(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(write(tmp_path, text))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def host(**classes: JobClass) -> HostFacts:
    return HostFacts("fake", 4, None, classes=classes, default_class="normal")


def spec(**keys: object) -> object:
    return parse_spec({"command": ["true"], **keys})


def test_admission_refuses_an_unknown_class_and_a_long_runtime() -> None:
    facts = host(normal=JobClass(), short=JobClass(max_runtime_seconds=60))
    authorizer = Authorizer(None)
    check_class(spec(), 0, facts, authorizer)
    with pytest.raises(InvalidSpec, match=r"^no class 'gpu'; the classes are normal, short$"):
        check_class(spec(**{"class": "gpu"}), 0, facts, authorizer)
    with pytest.raises(InvalidSpec, match="class 'short' runs jobs for at most 60 s"):
        check_class(spec(**{"class": "short"}), 0, facts, authorizer)
    check_class(spec(**{"class": "short", "max_runtime_seconds": 60}), 0, facts, authorizer)


def test_a_restricted_class_is_its_users_and_the_admins_alone() -> None:
    me = pwd.getpwuid(os.getuid()).pw_name
    facts = host(normal=JobClass(), theirs=JobClass(users=["root"]), mine=JobClass(users=[me]))
    authorizer = Authorizer(None)
    nobody = pwd.getpwnam("nobody").pw_uid
    check_class(spec(**{"class": "theirs"}), 0, facts, authorizer)
    with pytest.raises(Forbidden, match=r"^class 'theirs' is for root; nobody may not use it$"):
        check_class(spec(**{"class": "theirs"}), nobody, facts, authorizer)


def test_usage_halves_every_half_life() -> None:
    share = FairShare(7)
    hour = Used(1, "alice", 2, 0.0, 3600.0)
    share.seed([hour], 3600.0)
    now = share.usage([], 3600.0).gpu[1]
    assert now == pytest.approx(2 * 3600.0, rel=1e-2)  # two GPU-hours, barely decayed
    later = share.usage([], 3600.0 + 7 * DAY).gpu[1]
    assert later == pytest.approx(now / 2, rel=1e-9)
    much_later = share.usage([], 3600.0 + 21 * DAY).gpu[1]
    assert much_later == pytest.approx(now / 8, rel=1e-9)


def test_running_attempts_count_up_to_now_and_cpu_slots_apart() -> None:
    share = FairShare(1)
    running = [Used(1, "alice", 1, 1000.0, 10**12), Used(2, "bob", 0, 1000.0, 10**12)]
    usage = share.usage(running, 1600.0)
    assert usage.gpu == {1: pytest.approx(600.0, rel=1e-2)}
    assert usage.cpu == {2: pytest.approx(600.0, rel=1e-2)}
    assert usage.names == {1: "alice", 2: "bob"}


def test_a_job_of_several_cpu_nodes_counts_a_slot_per_node() -> None:
    share = FairShare(1)
    share.add(Used(1, "alice", 0, 1000.0, 1600.0, slots=4))
    running = [Used(2, "bob", 0, 1000.0, 10**12, slots=3), Used(3, "carol", 0, 1000.0, 10**12)]
    usage = share.usage(running, 1600.0)
    assert usage.cpu == {
        1: pytest.approx(4 * 600.0, rel=1e-2),
        2: pytest.approx(3 * 600.0, rel=1e-2),
        3: pytest.approx(600.0, rel=1e-2),
    }


def test_an_older_attempt_weighs_less_than_a_newer_one_of_the_same_length() -> None:
    share = FairShare(1)
    share.seed([Used(1, "old", 1, 0.0, 3600.0), Used(2, "new", 1, DAY, DAY + 3600.0)], DAY + 3600)
    usage = share.usage([], DAY + 3600.0)
    assert usage.gpu[1] == pytest.approx(usage.gpu[2] / 2, rel=1e-9)


def test_a_half_life_of_zero_turns_fair_share_off() -> None:
    share = FairShare(0)
    share.seed([Used(1, "alice", 8, 0.0, 3600.0)], 3600.0)
    assert not share.enabled
    assert share.usage([Used(1, "alice", 8, 0.0, 10**12)], 3600.0).gpu == {}
