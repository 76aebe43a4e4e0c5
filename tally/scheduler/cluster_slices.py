"""Slicing a best-effort kernel launched with thread-block clusters, keeping each
cluster whole. A sliced kernel runs consecutive ranges of the grid's linear block
indices as one-dimensional launches. The blocks of a (cx, 1, 1) cluster are cx
consecutive linear indices starting at a multiple of cx (the grid's x is a multiple
of cx), so slices that start and end on multiples of cx, launched with cluster
(cx, 1, 1), run exactly the job's clusters, co-scheduled. The blocks of a cluster
that spans y or z are not consecutive: such a launch runs whole. PTB never applies:
its workers take blocks one at a time. A kernel whose code uses its cluster (cluster
registers, barrier.cluster, mapa, distributed shared memory, multicast copies) is sliced
the same way: the slicing pass rebuilds %clusterid and %nclusterid, and the rest sees
the same cluster (ptx_passes/passes/slicing.py); one whose cluster shape is compiled in
(.reqnctapercluster) has no variants, as the launch does not say its shape."""
from __future__ import annotations

from ptx_passes.launch_plan import SliceLaunch
from tally.backends.base import Dim3


def sliceable_cluster_width(cluster: Dim3 | None) -> int | None:
    """The cluster width slices keep whole (1: no cluster, or one-block clusters, which
    need nothing kept), or None when the clusters cannot be kept whole by slicing."""
    if cluster is None or cluster == (1, 1, 1):
        return 1
    return cluster[0] if cluster[1] == cluster[2] == 1 else None


def cluster_slices(total: int, n_slices: int, width: int) -> tuple[SliceLaunch, ...]:
    """At most n_slices contiguous, near-equal ranges of `total` blocks, each a whole
    number of clusters of `width` blocks (total is a multiple of width)."""
    clusters = total // width
    n = max(1, min(n_slices, clusters))
    base, extra = divmod(clusters, n)
    out, start = [], 0
    for i in range(n):
        count = (base + (1 if i < extra else 0)) * width
        out.append(SliceLaunch(start, count))
        start += count
    return tuple(out)


def rest_of(start: int, total: int, size: int, width: int) -> tuple[SliceLaunch, ...]:
    """The slices from block `start` on, `size` blocks each (rounded up to whole clusters)."""
    size = -(-size // width) * width
    return tuple(SliceLaunch(b, min(size, total - b)) for b in range(start, total, size))
