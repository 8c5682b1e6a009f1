"""The collector's settling (gc_tuning.py): what is alive moves out of the collector's way,
and a paused burst leaves the collector as it found it."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest

from trainqd import gc_tuning


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    try:
        yield
    finally:
        gc.unfreeze()  # the rest of the suite's objects stay collectable


def test_settling_moves_what_lives_out_of_the_collectors_walk(unfrozen: None) -> None:
    kept = [{"job": n} for n in range(1000)]
    before = gc.get_freeze_count()
    gc_tuning.settle()
    # Frozen: a full collection walks only what is made after this.
    assert gc.get_freeze_count() >= before + len(kept)


def test_settling_first_collects_the_cycles_already_garbage(unfrozen: None) -> None:
    class Node:
        def __init__(self) -> None:
            self.me = self

    gc.collect()
    gc.disable()  # no collection of its own before settle's
    try:
        garbage = weakref.ref(Node())  # a cycle nobody holds
        assert garbage() is not None  # only the collector frees a cycle
        gc_tuning.settle(collect=True)
    finally:
        gc.enable()
    assert garbage() is None  # freed, not frozen for good


def test_a_paused_burst_leaves_the_collector_as_it_found_it() -> None:
    assert gc.isenabled()
    with gc_tuning.paused():
        assert not gc.isenabled()
        with gc_tuning.paused():  # nested: the outer one re-enables
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_tuning.paused():
            pass
        assert not gc.isenabled()  # found disabled, left disabled
    finally:
        gc.enable()
    with pytest.raises(ValueError), gc_tuning.paused():
        raise ValueError
    assert gc.isenabled()
