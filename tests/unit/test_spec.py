from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainq.core.spec import JobSpec, parse_spec


def spec(**kw: object) -> dict[str, object]:
    return {"command": ["python3", "train.py"], **kw}


def test_minimal_and_defaults() -> None:
    job = parse_spec(spec())
    assert job.runtime == "subprocess"
    assert job.gpus == 0
    assert job.max_retries == 3
    assert job.retry_exit_codes == [6, 134, 11, 139]
    assert job.hyperparameters == {}


def test_hyperparameters_become_strings() -> None:
    job = parse_spec(spec(hyperparameters={"lr": 0.1, "epochs": 3, "amp": True, "opt": "sgd"}))
    assert job.hyperparameters == {"lr": "0.1", "epochs": "3", "amp": "true", "opt": "sgd"}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"image": "x"} | spec(), "exactly one of 'command'"),
        ({}, "exactly one of 'command'"),
        (spec(gpu=2), "gpu: unknown key"),
        (spec(gpus=-1), "gpus: Input should be greater than or equal to 0"),
        (spec(gpus=100000), "gpus"),
        (spec(name="a/b"), "may not contain '/' or '..'"),
        (spec(name=".."), "may not contain '/' or '..'"),
        (spec(name="-x"), "starting with a letter or digit"),
        (spec(channels={"a/b": {"source": "/d"}}), "channel name 'a/b'"),
        (spec(channels={"..": {"source": "/d"}}), "channel name '..'"),
        (spec(channels={"t": {"source": "data/x"}}), "must be an absolute path"),
        (spec(channels={"t": {"source": "/d", "mode": "Stream"}}), "channels.t.mode"),
        (spec(channels={"t": {"source": "/d", "epochs": 2}}), "Pipe mode channels only"),
        (
            spec(channels={"t": {"source": "/d", "mode": "Pipe"}, "t_0": {"source": "/e"}}),
            "clash with the FIFOs",
        ),
        (spec(environment={"CUDA_VISIBLE_DEVICES": "0"}), "set by trainq itself"),
        (spec(environment={"SM_MODEL_DIR": "/x"}), "set by trainq itself"),
        (spec(environment={"1BAD": "x"}), "is not valid"),
        (spec(hyperparameters={"x": [1, 2]}), "must be a string, number or boolean"),
        (spec(hyperparameters={"x": "y" * 3000}), "longer than 2500"),
        (spec(hyperparameters={f"k{i}": "v" * 2000 for i in range(20)}), "SM_HPS"),
        (spec(environment={"BIG": "x" * 70_000}), "longer than 65536 bytes"),
        (spec(engine="docker"), "container jobs"),
        ({"image": "-v/etc:/x"}, "not an image reference"),
        (spec(max_runtime_seconds=0), "max_runtime_seconds"),
        (spec(working_dir="relative"), "must be an absolute path"),
        (spec(working_dir="/" + "d" * 4096), "longer than 4096 characters"),
        (spec(command=[]), "command"),
        (spec(command=[""]), "program may not be empty"),
        (spec(command=["echo", "é" * 65_536]), "command argument 1 is longer than 131071"),
        (spec(command=["true"] * 4097), "at most 4096 items"),
        (spec(environment={f"V{i}": "" for i in range(1001)}), "at most 1000"),
    ],
)
def test_bad_specs_get_one_clear_line(data: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=r"^spec: ") as err:
        parse_spec(data)
    text = str(err.value)
    assert message in text
    assert "\n" not in text


def test_container_spec() -> None:
    job = parse_spec({"image": "localhost/trainer:latest", "engine": "podman", "network": "none"})
    assert job.runtime == "container"


def test_round_trip_through_json() -> None:
    job = parse_spec(
        spec(
            gpus=2,
            hyperparameters={"lr": "0.1"},
            channels={"train": {"source": "/data", "mode": "Pipe", "shuffle_seed": 4}},
        )
    )
    assert JobSpec.model_validate_json(job.model_dump_json()) == job


@given(st.text(min_size=1, max_size=80))
def test_names_never_escape_their_directory(name: str) -> None:
    try:
        job = parse_spec(spec(name=name, channels={name: {"source": "/d"}}))
    except ValueError:
        return
    assert job.name is not None
    assert "/" not in job.name
    assert ".." not in job.name
    assert job.name not in (".", "")
