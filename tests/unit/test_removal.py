"""The removal of a job's directory (trainqd/scheduling/removal.py) against what a hostile owner
can leave in it: links out of it, a directory swapped for a link mid-walk, a tree too deep,
mount points (mountinfo's escaped names)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainqd.scheduling import removal
from trainqd.scheduling.removal import MAX_DEPTH, RemovalError, mount_points_under, remove_job_dir


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    target = tmp_path / "outside"
    target.mkdir()
    (target / "keep").write_text("kept")
    return target


def job_dir(tmp_path: Path) -> Path:
    jobs = tmp_path / "jobs"
    (jobs / "7" / "ml" / "model").mkdir(parents=True)
    (jobs / "7" / "ml" / "model" / "weights").write_text("w")
    return jobs


def test_links_go_and_their_targets_stay(tmp_path: Path, outside: Path) -> None:
    jobs = job_dir(tmp_path)
    ml = jobs / "7" / "ml"
    (ml / "dir-link").symlink_to(outside)
    (ml / "file-link").symlink_to(outside / "keep")
    (ml / "dangling").symlink_to(tmp_path / "nothing")
    assert remove_job_dir(jobs, 7) == 7  # 7/, ml/, model/, weights, three links
    assert not (jobs / "7").exists()
    assert (outside / "keep").read_text() == "kept"
    assert remove_job_dir(jobs, 7) == 0  # gone already: nothing to do


def test_a_directory_swapped_for_a_link_mid_walk_is_not_followed(
    tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = job_dir(tmp_path)
    model = jobs / "7" / "ml" / "model"
    real_open = os.open

    def swapping_open(path: str, flags: int, *args: object, **kw: object) -> int:
        # Between the walk's look at `model` and its open: what an owner racing it does.
        if path == "model" and not model.is_symlink():
            model.rename(model.with_name("elsewhere"))
            model.symlink_to(outside)
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(removal.os, "open", swapping_open)
    with pytest.raises(RemovalError, match="changed while it was being removed"):
        remove_job_dir(jobs, 7)
    assert (outside / "keep").read_text() == "kept"


def test_a_tree_too_deep_is_refused(tmp_path: Path) -> None:
    jobs = job_dir(tmp_path)
    deep = jobs / "7" / "ml"
    fd = os.open(deep, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(MAX_DEPTH + 1):  # relative to a descriptor: no PATH_MAX in the way
            os.mkdir("d", dir_fd=fd)
            next_fd = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = next_fd
    finally:
        os.close(fd)
    with pytest.raises(RemovalError, match=f"more than {MAX_DEPTH} directories deep"):
        remove_job_dir(jobs, 7)


def test_mount_points_are_read_with_their_escapes(tmp_path: Path) -> None:
    place = tmp_path / "state dir" / "jobs" / "7"
    place.mkdir(parents=True)
    escaped = str(place).replace(" ", "\\040")
    info = tmp_path / "mountinfo"
    info.write_text(
        "22 1 0:21 / / rw - ext4 /dev/sda1 rw\n"
        f"90 22 0:44 / {escaped}/ml/data rw - tmpfs tmpfs rw\n"
        f"91 22 0:45 / {escaped}0 rw - tmpfs tmpfs rw\n"  # job 70, not job 7
    )
    assert mount_points_under(place, str(info)) == [f"{place}/ml/data"]
