from __future__ import annotations

from pathlib import Path

import pytest

from trainqd.config import ConfigError, load_config


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trainqd.toml"
    path.write_text(text)
    return path


def test_defaults_without_a_file(tmp_path: Path) -> None:
    config = load_config(None, {"state_dir": tmp_path})
    assert config.gpus == "auto"
    assert config.socket_mode_bits == 0o666
    assert config.default_stop_grace_seconds == 120
    assert config.cpu_slots >= 1


def test_file_then_flags(tmp_path: Path) -> None:
    path = write(tmp_path, 'gpus = "fake:4"\ncpu_slots = 3\nmax_gpus_per_user = 2\n')
    config = load_config(path, {"cpu_slots": 5})
    assert config.gpus == "fake:4"
    assert config.cpu_slots == 5
    assert config.max_gpus_per_user == 2


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpu = 'fake:2'\n", "gpu: unknown key"),
        ("gpus = 'fake:0'\n", "is not one of auto"),
        ("socket_mode = '999'\n", "not an octal mode"),
        ("socket = 'relative.sock'\n", "must be an absolute path"),
        ("cpu_slots = 0\n", "cpu_slots"),
        ("default_engine = 'lxc'\n", "default_engine"),
        ("backend = 'kubernetes'\n", "backend"),
        ("slurm_poll_seconds = 0\n", "slurm_poll_seconds"),
        ("slurm_python = 'python3'\n", "not an absolute path"),
        ("gpus = \n", "Invalid value"),
    ],
)
def test_bad_files_stop_with_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert message in str(err.value)
    assert str(path) in str(err.value)
    assert "\n" not in str(err.value)


def test_missing_explicit_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no such file"):
        load_config(tmp_path / "nope.toml")


def test_bad_flag_is_blamed_on_the_command_line(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^command line: gpus"):
        load_config(write(tmp_path, ""), {"gpus": "lots"})
