"""Graphs the server keeps (GraphDefine / GraphLaunch / GraphNodeUpdate /
GraphDestroy), spoken to over the wire protocol from Python against a real
tally-server on the emulator: a fork/join graph whose nodes arrive out of
order replays in an order its edges allow, one message per replay; exec
updates and disabled nodes reach the server's copy; bad graphs are refused at
instantiate with CUDA's error and the server carries on."""
from __future__ import annotations

import struct
import time
from pathlib import Path

import pytest
from e2e_helpers import emulator_server_process
from ptx_corpus import compile_ptx
from test_client_driver_server import Client

from tally.protocol import Priority
from tally.protocol.spec import GRAPH_NODE_FORMAT

INVALID_VALUE, INVALID_HANDLE = 1, 400
LEGACY = 0
N = 64
KERNELS = Path(__file__).parent / "cuda" / "graph_server_kernels.cu"
EMPTY, KERNEL, MEMSET, MEMCPY = 0, 1, 2, 3


@pytest.fixture(scope="module")
def server():
    s = emulator_server_process()
    yield s
    s.stop()


@pytest.fixture
def client(server):
    c = Client(server.socket)
    yield c
    c.close()


def node(function=0, params=b"", kind=KERNEL, enabled=True, grid=(1, 1, 1), block=(N, 1, 1)) -> bytes:
    head = struct.pack(GRAPH_NODE_FORMAT, kind, int(enabled), function, *grid, *block, 0, len(params))
    return head + params + bytes(-len(params) % 8)


def edges(*pairs) -> bytes:
    return b"".join(struct.pack("<II", a, b) for a, b in pairs)


def affine(fn, x, a, b) -> bytes:
    return node(fn, struct.pack("<Qiii", x, a, b, N))


def combine(fn, out, p, q) -> bytes:
    return node(fn, struct.pack("<QQQi", out, p, q, N))


def define(client, graph, nodes, pairs) -> tuple[str, dict]:
    kind, values, _ = define_why(client, graph, nodes, pairs)
    return kind, values


def define_why(client, graph, nodes, pairs) -> tuple[str, dict, bytes]:
    return client.call("GraphDefine", b"".join(nodes) + edges(*pairs), graph=graph,
                       node_count=len(nodes), edge_count=len(pairs))


def functions(client) -> tuple[int, int]:
    ptx = compile_ptx(KERNELS, arch="sm_90").encode() + b"\0"
    kind, values, _ = client.call("ModuleLoad", ptx, size=len(ptx))
    assert kind == "ModuleLoadReply", values
    out = []
    for name in (b"affine", b"combine"):
        kind, fn, _ = client.call("GetFunction", name, module=values["module"])
        assert kind == "FunctionReply", fn
        out.append(fn["function"])
    return out[0], out[1]


def ints(client, ptr) -> list[int]:
    return list(struct.unpack(f"<{N}i", client.download(ptr, 4 * N)))


def scheduler(server) -> dict:
    return server.status()["server"]["scheduler"]


def fork_join(fa, fc, A, B, C, c_scale=3, c_add=0, fork_enabled=True):
    # Listed join-first so only the edges give the order: 3 -> {1, 2} -> 0.
    return ([combine(fc, A, B, C),                               # 0: A += B + C
             affine(fa, B, 2, 1),                                # 1: B = 2B + 1
             affine(fa, C, c_scale, c_add),                      # 2: C = 3C
             node(fc, struct.pack("<QQQi", B, A, A, N), enabled=fork_enabled)],  # 3: B += 2A
            [(3, 1), (3, 2), (1, 0), (2, 0)])


def step(a, b, c, c_scale=3, c_add=0, fork=True):
    if fork:
        b = b + 2 * a
    b, c = 2 * b + 1, c * c_scale + c_add
    return a + b + c, b, c


@pytest.mark.parametrize("priority", [Priority.HIGH, Priority.BEST_EFFORT])
def test_a_fork_join_graph_replays_in_edge_order_one_message_each(server, priority):
    client = Client(server.socket, priority=priority)
    try:
        replays_in_edge_order(server, client, priority)
    finally:
        client.close()


def replays_in_edge_order(server, client, priority):
    # A high-priority job's replay is one unit, one graph launch of all its kernels; the
    # priority policy keeps a best-effort job's preemptible: it runs node by node.
    untouched = "graph_nodes_replayed" if priority == Priority.HIGH else "graph_launches"
    fa, fc = functions(client)
    A, B, C = (client.alloc(4 * N) for _ in range(3))
    start = [list(range(N)), [3] * N, [i % 5 for i in range(N)]]
    for ptr, values in zip((A, B, C), start):
        client.upload(ptr, struct.pack(f"<{N}i", *values))
    nodes, pairs = fork_join(fa, fc, A, B, C)
    assert define(client, 7, nodes, pairs) == ("Done", {})
    before = scheduler(server)
    for _ in range(3):
        client.send("GraphLaunch", graph=7, stream=LEGACY)
    want = [step(*abc) for abc in zip(*start)]
    want = [step(*abc) for abc in want]
    want = [step(*abc) for abc in want]
    assert client.status_of("CtxSynchronize") == 0
    assert ints(client, A) == [w[0] for w in want]
    assert ints(client, B) == [w[1] for w in want]
    after = scheduler(server)
    if priority == Priority.HIGH:
        assert after["graph_launches"] - before["graph_launches"] == 3
    else:
        assert after["graph_nodes_replayed"] - before["graph_nodes_replayed"] == 3 * 4
    assert after["kernels"] - before["kernels"] == 3 * 4
    assert after[untouched] == before[untouched]

    # An exec update between replays (node 2's parameters), then the fork node disabled.
    update = affine(fa, C, 1, 5)
    assert client.call("GraphNodeUpdate", update, graph=7, node=2)[0] == "Done"
    client.send("GraphLaunch", graph=7, stream=LEGACY)
    want = [step(*abc, c_scale=1, c_add=5) for abc in want]
    off = node(fc, struct.pack("<QQQi", B, A, A, N), enabled=False)
    assert client.call("GraphNodeUpdate", off, graph=7, node=3)[0] == "Done"
    client.send("GraphLaunch", graph=7, stream=LEGACY)
    want = [step(*abc, c_scale=1, c_add=5, fork=False) for abc in want]
    assert client.status_of("CtxSynchronize") == 0
    assert ints(client, A) == [w[0] for w in want]
    assert ints(client, C) == [w[2] for w in want]
    # 4 + 3 kernels: the disabled node is not replayed.
    after = scheduler(server)
    assert after["kernels"] - before["kernels"] == 3 * 4 + 4 + 3
    mine = after["clients"]
    if priority == Priority.HIGH:
        assert after["graph_launches"] - before["graph_launches"] == 5
        # this job's (an earlier test's job may still be leaving)
        assert 5 in [c["graph_launches"] for c in mine.values()]
    else:
        assert after["graph_nodes_replayed"] - before["graph_nodes_replayed"] == 3 * 4 + 4 + 3
        assert 3 * 4 + 4 + 3 in [c["graph_nodes_replayed"] for c in mine.values()]
    assert after[untouched] == before[untouched]

    client.send("GraphDestroy", graph=7)
    client.send("GraphLaunch", graph=7, stream=LEGACY)        # destroyed: the next sync reports it
    assert client.status_of("CtxSynchronize") == INVALID_VALUE
    assert client.status_of("CtxSynchronize") == 0


def test_bad_graphs_are_refused_at_instantiate_and_the_server_carries_on(server, client):
    fa, fc = functions(client)
    A = client.alloc(4 * N)
    assert define(client, 1, [affine(12345, A, 1, 1)], [])[1]["status"] == INVALID_HANDLE
    assert define(client, 1, [node(fa, struct.pack("<Qi", A, 1))], [])[1]["status"] == INVALID_VALUE
    kind, values, why = define_why(client, 1, [affine(fa, A, 1, 1), affine(fa, A, 1, 1)], [(0, 1), (1, 0)])
    assert (kind, values["status"]) == ("Error", INVALID_VALUE) and b"cycle through nodes [0, 1]" in why
    assert define(client, 1, [affine(fa, A, 1, 1)], [(0, 3)])[1]["status"] == INVALID_VALUE
    assert define(client, 1, [affine(fa, A, 1, 1, )[:-8]], [])[1]["status"] == INVALID_VALUE   # cut short
    assert define(client, 1, [node(kind=9)], [])[1]["status"] == 801      # CUDA_ERROR_NOT_SUPPORTED
    assert define(client, 1, [affine(fa, A, 1, 1, ), node(kind=EMPTY, function=0)], [(1, 0)]) == ("Done", {})
    assert client.call("GraphNodeUpdate", node(kind=EMPTY), graph=1, node=0)[1]["status"] == INVALID_VALUE
    assert client.call("GraphNodeUpdate", affine(fa, A, 1, 1), graph=1, node=5)[1]["status"] == INVALID_VALUE
    client.upload(A, bytes(4 * N))
    client.send("GraphLaunch", graph=1, stream=LEGACY)
    assert client.status_of("CtxSynchronize") == 0
    assert ints(client, A) == [1] * N
    # The job's first refusal of each kind is in the server's log with its reason.
    deadline = time.monotonic() + 10
    while "its parameters take 20" not in server.process.log():
        assert time.monotonic() < deadline, "the refusal's reason never reached the log"
        time.sleep(0.05)


def memset(dst, count, value, element_size=4) -> bytes:
    return node(0, struct.pack("<QQII", dst, count, value, element_size), kind=MEMSET)


@pytest.mark.parametrize("priority", [Priority.HIGH, Priority.BEST_EFFORT])
def test_memset_nodes_replay_with_the_kernels_in_edge_order(server, priority):
    # memset(A, 7) -> affine(A: 3A + 1) -> memset of A's second half to 5 -> affine(A: 2A):
    # [44] * half + [10] * half, whichever way the replay runs.
    client = Client(server.socket, priority=priority)
    try:
        fa, _ = functions(client)
        A = client.alloc(4 * N)
        half = N // 2
        nodes = [affine(fa, A, 2, 0), memset(A + 4 * half, half, 5), memset(A, N, 7), affine(fa, A, 3, 1)]
        assert define(client, 3, nodes, [(2, 3), (3, 1), (1, 0)]) == ("Done", {})
        before = scheduler(server)
        for _ in range(2):
            client.send("GraphLaunch", graph=3, stream=LEGACY)
        assert client.status_of("CtxSynchronize") == 0
        assert ints(client, A) == [44] * half + [10] * half
        after = scheduler(server)
        assert after["kernels"] - before["kernels"] == 2 * 2           # memsets are no kernels
        if priority == Priority.HIGH:
            assert after["graph_launches"] - before["graph_launches"] == 2
        else:
            assert after["graph_nodes_replayed"] - before["graph_nodes_replayed"] == 2 * 2
        # A memset outside the job's memory, of a bad element size, or of the wrong record
        # size is refused at instantiate.
        assert define(client, 4, [memset(A, N + 1, 0)], [])[1]["status"] == INVALID_VALUE
        assert define(client, 4, [memset(A, N, 0, element_size=3)], [])[1]["status"] == INVALID_VALUE
        assert define(client, 4, [memset(A, 2 * N + 2, 0, element_size=2)], [])[1]["status"] == INVALID_VALUE
        assert define(client, 4, [node(0, struct.pack("<QQ", A, 1), kind=MEMSET)], [])[1]["status"] == INVALID_VALUE
        assert client.status_of("CtxSynchronize") == 0
    finally:
        client.close()


def memcpy(dst, src, nbytes) -> bytes:
    return node(0, struct.pack("<QQQ", dst, src, nbytes), kind=MEMCPY)


@pytest.mark.parametrize("priority", [Priority.HIGH, Priority.BEST_EFFORT])
def test_copy_nodes_replay_with_the_kernels_in_edge_order(server, priority):
    # memset(A, 7) -> affine(A: 3A + 1) -> B = A -> affine(A: 2A): A is [44] * N, B [22] * N.
    client = Client(server.socket, priority=priority)
    try:
        fa, _ = functions(client)
        A, B = client.alloc(4 * N), client.alloc(4 * N)
        nodes = [memset(A, N, 7), affine(fa, A, 3, 1), memcpy(B, A, 4 * N), affine(fa, A, 2, 0)]
        assert define(client, 5, nodes, [(0, 1), (1, 2), (2, 3)]) == ("Done", {})
        client.send("GraphLaunch", graph=5, stream=LEGACY)
        assert client.status_of("CtxSynchronize") == 0
        assert (ints(client, A), ints(client, B)) == ([44] * N, [22] * N)
        # A copy reaching outside the job's memory on either side, of no bytes, or of
        # the wrong record size is refused at instantiate.
        assert define(client, 6, [memcpy(B, A, 4 * N + 4)], [])[1]["status"] == INVALID_VALUE
        assert define(client, 6, [memcpy(B + 8, A, 4 * N)], [])[1]["status"] == INVALID_VALUE
        assert define(client, 6, [memcpy(B, A, 0)], [])[1]["status"] == INVALID_VALUE
        assert define(client, 6, [node(0, struct.pack("<QQ", B, A), kind=MEMCPY)], [])[1]["status"] == INVALID_VALUE
        assert client.status_of("CtxSynchronize") == 0
    finally:
        client.close()


HOST, EVENT_RECORD, EVENT_WAIT = 4, 5, 6


def test_event_and_host_nodes_are_checked_at_instantiate_and_launch(server, client):
    fa, _ = functions(client)
    A = client.alloc(4 * N)
    # an event node naming an event the job never created
    kind, values = define(client, 7, [node(0, struct.pack("<Q", 999), kind=EVENT_RECORD)], [])
    assert values["status"] == INVALID_HANDLE
    # an event node with the wrong parameter size, a host node with parameters
    assert define(client, 7, [node(0, b"\0" * 4, kind=EVENT_WAIT)], [])[1]["status"] == INVALID_VALUE
    assert define(client, 7, [node(0, b"\0" * 8, kind=HOST)], [])[1]["status"] == INVALID_VALUE
    # a host node between two kernels: a launch must name one callback for it
    assert define(client, 8, [affine(fa, A, 1, 1), node(0, kind=HOST), affine(fa, A, 1, 1)],
                  [(0, 1), (1, 2)]) == ("Done", {})
    kind, values, _ = client.call("GraphLaunch", graph=8, stream=LEGACY)
    assert values["status"] == INVALID_VALUE
    kind, values, _ = client.call("GraphLaunch", struct.pack("<QQ", 1, 2), graph=8, stream=LEGACY)
    assert values["status"] == INVALID_VALUE
    assert client.status_of("CtxSynchronize") == 0        # the server carries on
