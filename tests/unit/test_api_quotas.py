"""Fair shares of the API server: the per-uid and global counts, and the fit to the
process's open-file limit."""

from __future__ import annotations

import resource

import pytest

from trainq.core.errors import Busy
from trainqd.api.limits import ServerLimits
from trainqd.api.quotas import (
    LARGE_BODIES,
    RESERVED_DESCRIPTORS,
    Occupancy,
    descriptors_needed,
    fit_to_descriptors,
    raise_open_files_limit,
)

ALICE, BOB, ROOT = 1001, 1002, 0


def test_one_uid_gets_its_share_and_no_more() -> None:
    occupancy = Occupancy(ServerLimits(max_connections=10, max_connections_per_user=3))
    assert [occupancy.admit(ALICE) for _ in range(3)] == [None, None, None]
    refused = occupancy.admit(ALICE)
    assert isinstance(refused, Busy)
    assert refused.code == "busy"
    assert "3 connections" in refused.message
    assert occupancy.admit(BOB) is None  # others still find room
    occupancy.release(ALICE)
    assert occupancy.admit(ALICE) is None
    assert occupancy.total == 4


def test_the_global_cap_holds_and_root_has_a_reserve() -> None:
    occupancy = Occupancy(ServerLimits(max_connections=4, max_connections_per_user=2))
    for uid in (ALICE, ALICE, BOB, BOB):
        assert occupancy.admit(uid) is None
    refused = occupancy.admit(1003)
    assert isinstance(refused, Busy)
    assert "most connections" in refused.message
    assert occupancy.admit(ROOT) is None
    assert occupancy.admit(ROOT) is None
    assert isinstance(occupancy.admit(ROOT), Busy)  # its own share, like anyone's


def test_streams_are_counted_per_uid_and_given_back() -> None:
    occupancy = Occupancy(ServerLimits(max_streams_per_user=1))
    with occupancy.stream(ALICE):
        with pytest.raises(Busy, match="streams"), occupancy.stream(ALICE):
            pass
        with occupancy.stream(BOB):
            pass
    with occupancy.stream(ALICE):
        assert occupancy.streams == {ALICE: 1}
    assert not occupancy.streams


def test_the_global_cap_is_lowered_to_what_the_descriptors_allow() -> None:
    wanted = ServerLimits(max_connections=1024, max_connections_per_user=64)
    assert fit_to_descriptors(wanted, 1 << 20) == wanted
    fitted = fit_to_descriptors(wanted, 1024)
    assert fitted.max_connections + fitted.max_connections_per_user <= 1024 - RESERVED_DESCRIPTORS
    assert fitted.max_connections_per_user == 64
    tight = fit_to_descriptors(wanted, 300)
    assert tight.max_connections_per_user < tight.max_connections


def test_the_open_files_limit_is_raised_as_far_as_needed() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard < 2048:
        pytest.skip("needs a finite hard limit on open files of at least 2048")
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (512, hard))
        assert raise_open_files_limit(1500) == 1500
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (1500, hard)
        assert raise_open_files_limit(1000) == 1500  # never lowered
        assert raise_open_files_limit(hard + 1) == hard
        assert descriptors_needed(ServerLimits()) == 1024 + 64 + RESERVED_DESCRIPTORS
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_large_bodies_one_per_user_and_a_few_in_all() -> None:
    occupancy = Occupancy(ServerLimits())
    assert occupancy.take_large_body(ALICE) is None
    again = occupancy.take_large_body(ALICE)
    assert isinstance(again, Busy)
    assert "already sending" in again.message
    others = [1100 + n for n in range(LARGE_BODIES - 1)]
    assert [occupancy.take_large_body(uid) for uid in others] == [None] * len(others)
    full = occupancy.take_large_body(BOB)
    assert isinstance(full, Busy)
    assert "most large requests" in full.message
    occupancy.release_large_body(ALICE)
    assert occupancy.take_large_body(BOB) is None
    assert ALICE not in occupancy.large_bodies
