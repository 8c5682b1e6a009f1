"""Which free GPUs a multi-GPU job should get: the ones closest together.

A job's GPUs talk to each other constantly (all-reduce every step), so the slowest link
between any two of them sets its pace. `choose_gpus` therefore minimises the largest
pairwise distance first, then the sum of distances (fewer slow links), then prefers lower
indices so the same situation always gives the same answer. Pure: distances come from the
caller (the GPU backend's topology).

The search is exact while that is cheap (up to 16 free GPUs: at most 12,870 subsets, and
pruning visits far fewer); beyond that a greedy growth from every starting GPU is used,
which finds the best answer on the usual tree-shaped topologies (NVLink or switch pairs
inside NUMA nodes) and a good one elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

EXACT_SEARCH_MAX_FREE = 16

# (largest pairwise distance, sum of pairwise distances): smaller is better.
_Cost = tuple[int, int]


def choose_gpus(
    free: Collection[int], count: int, distance: Callable[[int, int], int]
) -> tuple[int, ...] | None:
    """The `count` GPUs out of `free` that are closest together, in ascending order; None
    when fewer than `count` are free, () for count 0."""
    if count < 0:
        raise ValueError(f"cannot choose {count} GPUs")
    candidates = sorted(set(free))
    if count > len(candidates):
        return None
    if count == len(candidates):
        return tuple(candidates)
    if count <= 1:
        return tuple(candidates[:count])
    matrix = _distance_matrix(candidates, distance)
    if len(candidates) <= EXACT_SEARCH_MAX_FREE:
        positions = _exact(matrix, count)
    else:
        positions = _greedy(matrix, count)
    return tuple(candidates[position] for position in positions)


def _distance_matrix(gpus: Sequence[int], distance: Callable[[int, int], int]) -> list[list[int]]:
    # The backend promises symmetry; asking once per pair halves the calls.
    size = len(gpus)
    matrix = [[0] * size for _ in range(size)]
    for a in range(size):
        for b in range(a + 1, size):
            matrix[a][b] = matrix[b][a] = distance(gpus[a], gpus[b])
    return matrix


def _exact(matrix: list[list[int]], count: int) -> list[int]:
    """Depth-first over subsets in lexicographic order, keeping only strictly better ones, so
    among equally good subsets the first (lowest indices) wins."""
    size = len(matrix)
    smallest = min(matrix[a][b] for a in range(size) for b in range(a + 1, size))
    total_pairs = count * (count - 1) // 2
    best: list[int] = []
    best_cost: _Cost | None = None
    chosen: list[int] = []

    def extend(start: int, largest: int, total: int) -> None:
        nonlocal best, best_cost
        if len(chosen) == count:
            if best_cost is None or (largest, total) < best_cost:
                best, best_cost = list(chosen), (largest, total)
            return
        if best_cost is not None:
            # Every pair still to come costs at least `smallest`: a bound on what this
            # branch can reach. Ties cannot win, so a tie prunes too.
            pairs_left = total_pairs - len(chosen) * (len(chosen) - 1) // 2
            bound = (max(largest, smallest), total + pairs_left * smallest)
            if bound >= best_cost:
                return
        for candidate in range(start, size - (count - len(chosen)) + 1):
            row = matrix[candidate]
            new_largest = max([largest, *(row[member] for member in chosen)])
            new_total = total + sum(row[member] for member in chosen)
            if best_cost is not None and (new_largest, new_total) >= best_cost:
                continue
            chosen.append(candidate)
            extend(candidate + 1, new_largest, new_total)
            chosen.pop()

    extend(0, 0, 0)
    return best


def _greedy(matrix: list[list[int]], count: int) -> list[int]:
    """From each GPU in turn, add the GPU that raises the cost least; keep the best set."""
    size = len(matrix)
    # Between equally good next GPUs, take the one with a close free neighbour: its
    # neighbour is then a cheap next pick, so NVLink and switch pairs stay whole.
    nearest = [min(matrix[a][b] for b in range(size) if b != a) for a in range(size)]
    best: list[int] = []
    best_key: tuple[int, int, list[int]] | None = None
    for seed in range(size):
        members = [seed]
        in_set = [False] * size
        in_set[seed] = True
        # Per outsider, its largest and total distance to the members so far.
        reach = list(matrix[seed])
        spread = list(matrix[seed])
        largest = total = 0
        while len(members) < count:
            pick = min(
                (index for index in range(size) if not in_set[index]),
                key=lambda index: (
                    max(largest, reach[index]),
                    spread[index],
                    nearest[index],
                    index,
                ),
            )
            largest, total = max(largest, reach[pick]), total + spread[pick]
            members.append(pick)
            in_set[pick] = True
            for index in range(size):
                reach[index] = max(reach[index], matrix[pick][index])
                spread[index] += matrix[pick][index]
        key = (largest, total, sorted(members))
        if best_key is None or key < best_key:
            best, best_key = key[2], key
    return best
