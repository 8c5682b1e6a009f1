"""The spec `trainq submit` sends: reading spec files, parsing flags, merging flags over files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainq.core.errors import InvalidSpec
from trainq.core.spec import parse_spec
from trainq.flag_values import (
    ChannelFlag,
    parse_channel,
    parse_env,
    parse_key_value,
    parse_seconds,
    parse_whole_seconds,
)
from trainq.spec_flags import SubmitFlags
from trainq.specfile import build_spec, load_spec_file

ENV = {"PATH": "/opt/conda/bin:/usr/bin", "HOME": "/home/alice", "WANDB_API_KEY": "s3cret"}
CWD = Path("/home/alice/project")

TOML_SPEC = """\
name = "resnet-a"
priority = 10
gpus = 2
command = ["python3", "train.py"]
max_runtime_seconds = 86400

[hyperparameters]
lr = "0.1"
epochs = 3

[environment]
WANDB_MODE = "offline"

[channels.train]
source = "data/train"
mode = "Pipe"
record_wrapper = "RecordIO"
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --- reading files ---


def test_toml_file_by_suffix(tmp_path: Path) -> None:
    write(tmp_path, "job.toml", TOML_SPEC)
    data = load_spec_file("job.toml", tmp_path, ENV)
    assert data["name"] == "resnet-a"
    assert data["channels"]["train"]["mode"] == "Pipe"
    assert data["hyperparameters"]["epochs"] == 3


def test_json_file_by_suffix(tmp_path: Path) -> None:
    path = write(tmp_path, "job.json", json.dumps({"name": "a", "command": ["true"]}))
    assert load_spec_file(str(path), Path("/"), ENV) == {"name": "a", "command": ["true"]}


@pytest.mark.parametrize(
    "text", [TOML_SPEC, json.dumps({"name": "resnet-a", "command": ["python3", "train.py"]})]
)
def test_other_suffix_is_toml_then_json(tmp_path: Path, text: str) -> None:
    write(tmp_path, "job.spec", text)
    assert load_spec_file("job.spec", tmp_path, ENV)["name"] == "resnet-a"


def test_tilde_in_the_file_path(tmp_path: Path) -> None:
    write(tmp_path, "job.toml", TOML_SPEC)
    env = {**ENV, "HOME": str(tmp_path)}
    assert load_spec_file("~/job.toml", Path("/"), env)["gpus"] == 2


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidSpec, match=r"^spec file nope\.toml: no such file$"):
        load_spec_file("nope.toml", tmp_path, ENV)


def test_directory(tmp_path: Path) -> None:
    (tmp_path / "d.toml").mkdir()
    with pytest.raises(InvalidSpec, match="is a directory"):
        load_spec_file("d.toml", tmp_path, ENV)


def test_malformed_toml_names_the_line(tmp_path: Path) -> None:
    write(tmp_path, "job.toml", 'name = "a"\ngpus = \ncommand = ["x"]\n')
    with pytest.raises(InvalidSpec) as caught:
        load_spec_file("job.toml", tmp_path, ENV)
    message = caught.value.message
    assert message.startswith("spec file job.toml: invalid TOML: ")
    assert "line 2" in message
    assert "\n" not in message


def test_malformed_json_names_the_line(tmp_path: Path) -> None:
    write(tmp_path, "job.json", '{\n  "name": "a",\n  "gpus": ,\n}\n')
    with pytest.raises(InvalidSpec, match=r"invalid JSON: .*\(at line 3, column 11\)$"):
        load_spec_file("job.json", tmp_path, ENV)


def test_unknown_suffix_reports_in_the_language_it_looks_like(tmp_path: Path) -> None:
    write(tmp_path, "a.spec", '{"name": }')
    with pytest.raises(InvalidSpec, match="invalid JSON"):
        load_spec_file("a.spec", tmp_path, ENV)
    write(tmp_path, "b.spec", "name = \n")
    with pytest.raises(InvalidSpec, match=r"invalid TOML: .*line 1"):
        load_spec_file("b.spec", tmp_path, ENV)


def test_top_level_must_be_a_table(tmp_path: Path) -> None:
    write(tmp_path, "job.json", '["python3"]')
    with pytest.raises(InvalidSpec, match="expected a table of keys at the top, not list"):
        load_spec_file("job.json", tmp_path, ENV)


def test_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "job.toml").write_bytes(b'name = "\xff"\n')
    with pytest.raises(InvalidSpec, match="not UTF-8 text"):
        load_spec_file("job.toml", tmp_path, ENV)


# --- single flags ---


def test_key_value() -> None:
    assert parse_key_value("lr=0.1") == ("lr", "0.1")
    assert parse_key_value("opts=a=b") == ("opts", "a=b")
    assert parse_key_value("empty=") == ("empty", "")
    with pytest.raises(ValueError, match=r"expected KEY=VALUE, got 'lr'"):
        parse_key_value("lr")
    with pytest.raises(ValueError, match="missing the name"):
        parse_key_value("=1")


def test_env_name_alone_passes_our_value_on() -> None:
    assert parse_env("WANDB_API_KEY") == ("WANDB_API_KEY", None)
    assert parse_env("A=1") == ("A", "1")
    with pytest.raises(ValueError, match="expected NAME=VALUE"):
        parse_env("")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("train=/data/train", ChannelFlag("train", "/data/train")),
        ("train=/data/train:Pipe", ChannelFlag("train", "/data/train", "Pipe")),
        ("train=data:pipe", ChannelFlag("train", "data", "Pipe")),
        ("val=/d:FASTFILE", ChannelFlag("val", "/d", "FastFile")),
        ("x=/data/run:final:File", ChannelFlag("x", "/data/run:final", "File")),
        ("x=/data/2024:01", ChannelFlag("x", "/data/2024:01")),
        ("x=a=b", ChannelFlag("x", "a=b")),
    ],
)
def test_channel(text: str, expected: ChannelFlag) -> None:
    assert parse_channel(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("train", r"expected NAME=PATH\[:File\|Pipe\|FastFile\], got 'train'"),
        ("=/data", "expected NAME=PATH"),
        ("train=", "channel 'train' has no path"),
        ("train=:Pipe", "channel 'train' has no path"),
        ("train=/data:Pip", r"unknown channel mode 'Pip' .*add ':File' after it"),
    ],
)
def test_bad_channel(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_channel(text)


def test_durations() -> None:
    assert parse_seconds("90") == 90
    assert parse_seconds("1.5") == 1.5
    assert parse_seconds("30m") == 1800
    assert parse_seconds("1.5h") == 5400
    assert parse_seconds("2D") == 172800
    assert parse_whole_seconds("0.5") == 1
    assert parse_whole_seconds("12h") == 43200
    for bad in ("", "-1", "1w", "ten", "1h30m"):
        with pytest.raises(ValueError, match="expected a duration like 90, 30m, 12h or 2d"):
            parse_seconds(bad)


# --- merging ---


def file_spec(tmp_path: Path) -> dict[str, object]:
    write(tmp_path, "job.toml", TOML_SPEC)
    return load_spec_file("job.toml", tmp_path, ENV)


def test_flags_alone_make_a_subprocess_spec() -> None:
    flags = SubmitFlags(name="a", gpus=1, command=["python3", "train.py", "--lr", "0.1"])
    spec = build_spec(None, flags, CWD, ENV)
    assert spec == {
        "name": "a",
        "gpus": 1,
        "command": ["python3", "train.py", "--lr", "0.1"],
        "working_dir": "/home/alice/project",
        "environment": {"PATH": "/opt/conda/bin:/usr/bin"},
    }
    parse_spec(spec)  # what the daemon will accept


def test_flags_override_the_file(tmp_path: Path) -> None:
    flags = SubmitFlags(
        name="resnet-b",
        gpus=4,
        priority=-5,
        max_runtime_seconds=60,
        stop_grace_seconds=1.5,
        max_retries=0,
        command=["python3", "other.py"],
    )
    spec = build_spec(file_spec(tmp_path), flags, CWD, ENV)
    assert spec["name"] == "resnet-b"
    assert spec["gpus"] == 4
    assert spec["priority"] == -5
    assert spec["max_runtime_seconds"] == 60
    assert spec["stop_grace_seconds"] == 1.5
    assert spec["max_retries"] == 0
    assert spec["command"] == ["python3", "other.py"]
    parse_spec(spec)


def test_unset_flags_keep_the_file(tmp_path: Path) -> None:
    spec = build_spec(file_spec(tmp_path), SubmitFlags(), CWD, ENV)
    assert spec["name"] == "resnet-a"
    assert spec["gpus"] == 2
    assert spec["command"] == ["python3", "train.py"]
    assert spec["hyperparameters"] == {"lr": "0.1", "epochs": 3}
    assert spec["max_runtime_seconds"] == 86400


def test_tables_merge_by_key(tmp_path: Path) -> None:
    flags = SubmitFlags(
        hyperparameters=[("lr", "0.01"), ("batch", "256")],
        environment=[("WANDB_MODE", "online"), ("SEED", "1"), ("WANDB_API_KEY", None)],
    )
    spec = build_spec(file_spec(tmp_path), flags, CWD, ENV)
    assert spec["hyperparameters"] == {"lr": "0.01", "epochs": 3, "batch": "256"}
    assert spec["environment"] == {
        "WANDB_MODE": "online",
        "SEED": "1",
        "WANDB_API_KEY": "s3cret",
        "PATH": "/opt/conda/bin:/usr/bin",
    }
    assert parse_spec(spec).hyperparameters["epochs"] == "3"


def test_env_passthrough_needs_the_variable() -> None:
    flags = SubmitFlags(environment=[("NOT_SET_HERE", None)], command=["true"])
    with pytest.raises(InvalidSpec, match="--env NOT_SET_HERE: NOT_SET_HERE is not set"):
        build_spec(None, flags, CWD, ENV)


def test_channel_flag_keeps_the_files_options(tmp_path: Path) -> None:
    flags = SubmitFlags(
        channels=[ChannelFlag("train", "/data/v2"), ChannelFlag("val", "val", "File")]
    )
    spec = build_spec(file_spec(tmp_path), flags, CWD, ENV)
    assert spec["channels"] == {
        "train": {"source": "/data/v2", "mode": "Pipe", "record_wrapper": "RecordIO"},
        "val": {"source": "/home/alice/project/val", "mode": "File"},
    }
    parse_spec(spec)


def test_relative_and_home_paths_become_absolute(tmp_path: Path) -> None:
    flags = SubmitFlags(
        channels=[ChannelFlag("a", "../data/a"), ChannelFlag("b", "~/b"), ChannelFlag("c", "~")],
        working_dir="runs/1",
    )
    spec = build_spec(file_spec(tmp_path), flags, CWD, ENV)
    assert spec["channels"]["train"]["source"] == "/home/alice/project/data/train"
    assert spec["channels"]["a"]["source"] == "/home/alice/data/a"
    assert spec["channels"]["b"]["source"] == "/home/alice/b"
    assert spec["channels"]["c"]["source"] == "/home/alice"
    assert spec["working_dir"] == "/home/alice/project/runs/1"


def test_the_files_own_path_settings_win_over_the_defaults() -> None:
    data = {"command": ["x"], "working_dir": "/srv/w", "environment": {"PATH": "/bin"}}
    spec = build_spec(data, SubmitFlags(), CWD, ENV)
    assert spec["working_dir"] == "/srv/w"
    assert spec["environment"] == {"PATH": "/bin"}


def test_container_jobs_get_neither_cwd_nor_path() -> None:
    flags = SubmitFlags(image="localhost/trainer:latest", engine="podman", gpus=1)
    spec = build_spec(None, flags, CWD, ENV)
    assert spec == {"image": "localhost/trainer:latest", "engine": "podman", "gpus": 1}
    parse_spec(spec)


def test_a_containers_working_dir_is_inside_the_image() -> None:
    flags = SubmitFlags(image="trainer", working_dir="src")
    assert build_spec(None, flags, CWD, ENV)["working_dir"] == "src"


def test_no_path_in_our_environment() -> None:
    spec = build_spec(None, SubmitFlags(command=["true"]), CWD, {})
    assert "environment" not in spec


def test_a_file_table_that_is_not_a_table() -> None:
    with pytest.raises(InvalidSpec, match="'hyperparameters' must be a table to add --hp"):
        build_spec({"hyperparameters": ["lr"]}, SubmitFlags(hyperparameters=[("a", "b")]), CWD, ENV)


def test_file_data_is_not_modified(tmp_path: Path) -> None:
    data = file_spec(tmp_path)
    before = json.dumps(data, sort_keys=True)
    build_spec(
        data,
        SubmitFlags(hyperparameters=[("x", "1")], channels=[ChannelFlag("train", "/d")]),
        CWD,
        ENV,
    )
    assert json.dumps(data, sort_keys=True) == before
