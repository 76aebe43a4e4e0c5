"""Which best-effort job goes to which GPU.

The graph is bipartite: free GPUs (each running one online job) on one side,
waiting best-effort jobs on the other; an edge's weight is the predicted
normalized throughput of the job next to that GPU's online job at the SM share
it would get. Edges that cannot be used are absent: the two jobs' memory does not
fit on the GPU, or the GPU is not healthy. The matching of maximum total weight
(scipy's linear_sum_assignment, a Kuhn-Munkres solver) is the placement; greedy
(best predicted pair first) and random are the baselines the benchmark compares.
"""
from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

UNUSABLE = -1.0     # weights are normalized throughputs in [0, 1]: any negative marks a missing edge


def usable_edges(weights: np.ndarray, gpu_memory_free: np.ndarray, job_memory: np.ndarray,
                 gpu_healthy: np.ndarray) -> np.ndarray:
    """weights with the edges that break memory fit or health set to UNUSABLE."""
    fits = job_memory[None, :] <= gpu_memory_free[:, None]
    return np.where(fits & gpu_healthy[:, None], weights, UNUSABLE)


def match(weights: np.ndarray) -> list[tuple[int, int]]:
    """(gpu row, job column) pairs of the maximum-weight matching, usable edges only."""
    if weights.size == 0:
        return []
    rows, cols = linear_sum_assignment(weights, maximize=True)
    return [(int(r), int(c)) for r, c in zip(rows, cols) if weights[r, c] >= 0]


def greedy(weights: np.ndarray) -> list[tuple[int, int]]:
    """Best predicted pair first, then the best among what is left."""
    if weights.size == 0:
        return []
    order = np.argsort(weights, axis=None, kind="stable")[::-1]
    used_r, used_c, out = set(), set(), []
    limit = min(weights.shape)
    for flat in order:
        r, c = divmod(int(flat), weights.shape[1])
        if weights[r, c] < 0:
            break
        if r in used_r or c in used_c:
            continue
        used_r.add(r)
        used_c.add(c)
        out.append((r, c))
        if len(out) == limit:
            break
    return out


def random_fit(weights: np.ndarray, rng: np.random.Generator) -> list[tuple[int, int]]:
    """Jobs in queue order, each to a random free GPU it fits on (weights only say which edges exist)."""
    free = list(rng.permutation(weights.shape[0]))
    out = []
    for c in range(weights.shape[1]):
        for k, r in enumerate(free):
            if weights[r, c] >= 0:
                out.append((int(r), c))
                free.pop(k)
                break
        if not free:
            break
    return out
