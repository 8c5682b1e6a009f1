"""What keeps a container job from the host: the engine's flags, the image policy and the
environment handed to the engine (daemon/trainqd/attempts/engine.py, image_policy.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainq.core.errors import Forbidden
from trainq.core.spec import parse_spec
from trainqd.access.image_policy import check_image, transport
from trainqd.attempts import engine
from trainqd.config import ConfigError, load_config


def argv(
    name: engine.EngineName,
    capabilities: list[str] | None = None,
    passed_env: list[str] | None = None,
) -> list[str]:
    return engine.run_argv(
        engine.Engine(name, f"/usr/bin/{name}"),
        image="localhost/x:1",
        name="trainq-i-1-1",
        instance="i",
        job_id=1,
        attempt=1,
        owner_uid=1000,
        user=(1000, 1000),
        groups=[1000],
        env_file="/state/env",
        mounts=[engine.Mount("/state/mounts/ml", "/opt/ml", read_only=False)],
        network="none",
        gpu_uuids=[],
        real_gpus=False,
        capabilities=capabilities or [],
        passed_env=passed_env or [],
    )


@pytest.mark.parametrize("name", ["podman", "docker"])
def test_every_run_drops_privileges(name: engine.EngineName) -> None:
    args = argv(name, capabilities=["CAP_SYS_PTRACE"])
    text = " ".join(args)
    assert "--security-opt no-new-privileges" in text
    assert "--cap-drop all" in text
    assert "--cap-add CAP_SYS_PTRACE" in text
    assert args[args.index("--user") + 1] == "1000:1000"
    mount = args[args.index("--mount") + 1]
    assert ("nosuid" in mount and "nodev" in mount) == (name == "podman")


def test_values_never_go_on_the_command_line() -> None:
    long_value = "v" * 70_000
    in_file, passed = engine.split_environment(
        {"A": "1", "SM_TRAINING_ENV": long_value, "SM_HP_X": "two\nlines"}
    )
    assert in_file == {"A": "1"}
    assert passed == {"SM_TRAINING_ENV": long_value, "SM_HP_X": "two\nlines"}
    args = argv("podman", passed_env=list(passed))
    assert "SM_TRAINING_ENV" in args
    assert not any(long_value in a for a in args)
    client = engine.client_environment({"REGISTRY_TOKEN": "s", "CONTAINERS_CONF": "/c"}, passed)
    assert "REGISTRY_TOKEN" not in client
    assert client["CONTAINERS_CONF"] == "/c"
    assert client["SM_HP_X"] == "two\nlines"


@pytest.mark.parametrize(
    "env",
    [{"LD_PRELOAD": "x\ny"}, {"A\nREGISTRY_TOKEN": "1"}, {"SM_HP_A=B": "1"}, {"": "1"}],
)
def test_what_could_inject_a_line_or_reach_the_client_is_refused(env: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="cannot be passed"):
        engine.split_environment(env)


@pytest.mark.parametrize(
    ("reference", "used"),
    [
        ("localhost/trainq-test:latest", None),
        ("docker.io/library/python:3.11", None),
        ("localhost:5000/team/x:1", None),
        ("python@sha256:" + "a" * 64, None),
        ("docker://busybox", None),
        ("oci-archive:/home/a/x.tar", "oci-archive"),
        ("docker-archive:x.tar", "docker-archive"),
        ("dir:/tmp/x", "dir"),
        ("oci:/tmp/x:tag", "oci"),
        ("containers-storage:x", "containers-storage"),
        ("docker-daemon:x:1", "docker-daemon"),
        ("newthing:/tmp/x", "newthing"),
        ("/tmp/x.tar", "path"),
    ],
)
def test_transports(reference: str, used: str | None) -> None:
    assert transport(reference) == used


def test_a_transport_runs_only_where_a_pattern_names_it() -> None:
    with pytest.raises(Forbidden, match="oci-archive"):
        check_image("oci-archive:/srv/x.tar", ["*"])
    check_image("oci-archive:/srv/images/x.tar", ["oci-archive:/srv/images/*"])
    with pytest.raises(Forbidden, match="allowed_images"):
        check_image("docker.io/x:1", ["localhost/*"])
    check_image("localhost/x:1", ["localhost/*"])


def test_capabilities_in_the_configuration_are_names(tmp_path: Path) -> None:
    config = tmp_path / "trainqd.toml"
    config.write_text('container_capabilities = ["ALL"]\n')
    with pytest.raises(ConfigError, match=r"container_capabilities.*'ALL'"):
        load_config(config)
    config.write_text('container_capabilities = ["CAP_SYS_PTRACE", "NET_RAW"]\n')
    assert load_config(config).container_capabilities == ["CAP_SYS_PTRACE", "NET_RAW"]


def test_a_spec_refuses_what_an_env_file_cannot_hold() -> None:
    with pytest.raises(ValueError, match="control character"):
        parse_spec({"command": ["x"], "hyperparameters": {"a\nREGISTRY_TOKEN": "1"}})
    with pytest.raises(ValueError, match="'='"):
        parse_spec({"command": ["x"], "hyperparameters": {"a=b": "1"}})
    with pytest.raises(ValueError, match="line break"):
        parse_spec({"image": "localhost/x", "environment": {"A": "1\n2"}})
    with pytest.raises(ValueError, match="longer than"):
        parse_spec({"image": "localhost/x", "environment": {"A": "v" * (64 * 1024 - 1)}})
    # A subprocess gets its environment from execve: any value goes.
    assert parse_spec({"command": ["x"], "environment": {"A": "1\n2"}}).environment["A"] == "1\n2"
