"""choose_gpus: the closest free GPUs, on the simulated server topology and on odd ones."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainqd.gpus.fake import server_distances
from trainqd.planning.topology import EXACT_SEARCH_MAX_FREE, choose_gpus

Distance = Callable[[int, int], int]


def server(count: int) -> Distance:
    matrix = server_distances(count)
    return lambda a, b: matrix[a][b]


def cost(gpus: tuple[int, ...], distance: Distance) -> tuple[int, int]:
    pairs = [distance(a, b) for a, b in itertools.combinations(gpus, 2)]
    return (max(pairs, default=0), sum(pairs))


def brute_force(free: list[int], count: int, distance: Distance) -> tuple[int, ...]:
    return min(
        itertools.combinations(sorted(free), count),
        key=lambda subset: (*cost(subset, distance), subset),
    )


def test_a_pair_shares_a_pcie_switch() -> None:
    assert choose_gpus(range(8), 2, server(8)) == (0, 1)
    assert choose_gpus({1, 2, 3, 4, 5}, 2, server(8)) == (2, 3)
    assert choose_gpus({0, 2, 5, 7, 6}, 2, server(8)) == (6, 7)


def test_four_gpus_stay_on_one_numa_node() -> None:
    assert choose_gpus(range(8), 4, server(8)) == (0, 1, 2, 3)
    # Node 0 has only three free GPUs left; node 1 has all four.
    assert choose_gpus({0, 2, 3, 4, 5, 6, 7}, 4, server(8)) == (4, 5, 6, 7)


def test_three_gpus_take_a_whole_pair_and_a_neighbour_on_the_same_node() -> None:
    chosen = choose_gpus({1, 2, 3, 4, 5, 6}, 3, server(8))
    assert chosen is not None
    assert cost(chosen, server(8)) == (50, 120)
    assert chosen == (1, 2, 3)


def test_nvlinked_pairs_win_over_pcie_neighbours() -> None:
    # GPUs 1 and 3 joined by NVLink (5); everything else behind PCIe switches (20 and up).
    nvlinked = {frozenset({1, 3})}

    def distance(a: int, b: int) -> int:
        if a == b:
            return 0
        return 5 if frozenset({a, b}) in nvlinked else 20

    assert choose_gpus(range(4), 2, distance) == (1, 3)


def test_count_zero_and_count_above_free() -> None:
    assert choose_gpus({3, 4}, 0, server(8)) == ()
    assert choose_gpus({3, 4}, 3, server(8)) is None
    assert choose_gpus(set(), 1, server(8)) is None
    assert choose_gpus({5, 4}, 2, server(8)) == (4, 5)
    with pytest.raises(ValueError, match="cannot choose -1"):
        choose_gpus({1}, -1, server(8))


def test_one_gpu_is_the_lowest_free_index() -> None:
    assert choose_gpus({6, 3, 7}, 1, server(8)) == (3,)


def test_deterministic_whatever_order_the_free_set_comes_in() -> None:
    answers = {
        choose_gpus(order, 3, server(8)) for order in itertools.permutations([7, 1, 4, 2, 6, 5])
    }
    assert answers == {(4, 5, 6)}


def test_large_hosts_use_the_greedy_search_and_still_find_switch_pairs() -> None:
    count = 64
    assert count > EXACT_SEARCH_MAX_FREE
    free = set(range(count)) - {0, 2, 4, 6, 8}
    assert choose_gpus(free, 2, server(count)) == (10, 11)
    eight = choose_gpus(free, 8, server(count))
    assert eight == tuple(range(10, 18))


@settings(max_examples=150, deadline=None)
@given(
    size=st.integers(min_value=2, max_value=9),
    data=st.data(),
)
def test_exact_search_equals_brute_force(size: int, data: st.DataObject) -> None:
    weights = data.draw(
        st.lists(
            st.integers(min_value=1, max_value=6),
            min_size=size * (size - 1) // 2,
            max_size=size * (size - 1) // 2,
        )
    )
    matrix = [[0] * size for _ in range(size)]
    for (a, b), weight in zip(itertools.combinations(range(size), 2), weights, strict=True):
        matrix[a][b] = matrix[b][a] = weight
    free = data.draw(st.lists(st.integers(0, size - 1), unique=True, min_size=1))
    count = data.draw(st.integers(min_value=0, max_value=len(free)))

    def distance(a: int, b: int) -> int:
        return matrix[a][b]

    assert choose_gpus(free, count, distance) == brute_force(free, count, distance)


@settings(max_examples=30, deadline=None)
@given(
    count=st.integers(min_value=17, max_value=64),
    data=st.data(),
)
def test_greedy_answers_are_valid_and_tight_on_large_hosts(count: int, data: st.DataObject) -> None:
    free = data.draw(st.sets(st.integers(0, count - 1), min_size=1))
    wanted = data.draw(st.integers(min_value=0, max_value=len(free) + 1))
    chosen = choose_gpus(free, wanted, server(count))
    if wanted > len(free):
        assert chosen is None
        return
    assert chosen is not None
    assert len(chosen) == wanted == len(set(chosen))
    assert set(chosen) <= free
    assert list(chosen) == sorted(chosen)
    if wanted <= 3:  # small enough to check against every subset
        assert cost(chosen, server(count)) == cost(
            brute_force(sorted(free), wanted, server(count)), server(count)
        )
