"""A graph replay as the steps the server submits to the job's stream.

The device nodes of a graph (kernels, memsets, device-to-device copies) go to the
executor as units (ops.ReplayGraph). A host node (the job's function, run in the
job's process) and an event record or wait node cannot run inside a device graph
here: they are barriers. A replay of a graph with barriers is its nodes in one
topological order, cut at each barrier: the device nodes between two barriers
make one ReplayGraph (with the edges among them), each barrier becomes its own
stream operation (a GatedCallback, an EventRecord, a StreamWaitEvent), and the
steps are submitted in that order on the launch stream. Stream order then keeps
every edge (a node after a barrier in the order runs after it, which CUDA
allows: a graph's branches may run in any order that respects its edges), at the
cost of the parallelism across a barrier. A graph without barriers is one step.
"""
from __future__ import annotations

from dataclasses import dataclass

from tally.scheduler import ops


@dataclass(frozen=True)
class Barrier:
    """A host node (`host`: its place among the graph's host nodes, in node order:
    the GraphLaunch's callback ids follow that order) or an event node (`event`: the
    job's event id) of a graph."""

    kind: str           # "host" | "record" | "wait"
    host: int = 0
    event: int = 0


Step = ops.ReplayGraph | Barrier


def replay_steps(nodes: tuple, edges: tuple[tuple[int, int], ...], name: str) -> tuple[Step, ...]:
    """`nodes` (device operations and Barriers, in a topological order) and the
    edges among them as the steps of one replay."""
    steps: list[Step] = []
    segment: list[int] = []

    def close_segment() -> None:
        if not segment:
            return
        local = {node: k for k, node in enumerate(segment)}
        inner = tuple((local[a], local[b]) for a, b in edges if a in local and b in local)
        part = f"{name}" if not steps and len(segment) == len(nodes) else f"{name}/{len(steps)}"
        steps.append(ops.ReplayGraph(tuple(nodes[i] for i in segment), inner, part))
        segment.clear()

    for i, node in enumerate(nodes):
        if isinstance(node, Barrier):
            close_segment()
            steps.append(node)
        else:
            segment.append(i)
    close_segment()
    return tuple(steps)
