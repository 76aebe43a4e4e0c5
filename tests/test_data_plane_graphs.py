"""Graph replays through the C++ data plane (docs/data-plane.md): a high-priority
job's first replay of a graph goes through Python, which registers the backend's
executable with the plane; its later replays are launched by the plane (counted in
requests_in_cpp and in scheduler.graph_launches). A best-effort job's replays stay
Python's (the policy decides whole or node by node), as do the emulator's (its
issuer launches no graphs), and a redefined graph is Python's again until its next
replay, so no replay ever runs an old copy."""
from __future__ import annotations

import pytest
from e2e_helpers import Server
from test_client_driver_server import Client
from test_graph_server import LEGACY, N, affine, define, functions, ints

from tally.protocol import Priority

REPLAYS = 6


@pytest.fixture(scope="module")
def null_server():
    s = Server("null")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def emulator_server():
    s = Server("emulator")
    yield s
    s.stop()


def in_cpp(server) -> int:
    # the test's client: the newest (an earlier test's may still be leaving)
    newest = max(server.status()["clients"], key=lambda c: c["client_id"])
    return newest["requests_in_cpp"]


def graph_launches(server) -> int:
    return server.status()["server"]["scheduler"]["graph_launches"]


def replay(client, graph, times) -> None:
    for _ in range(times):
        client.send("GraphLaunch", graph=graph, stream=LEGACY)
    assert client.status_of("CtxSynchronize") == 0


@pytest.mark.parametrize("priority", [Priority.HIGH, Priority.BEST_EFFORT])
def test_replays_after_the_first_are_the_planes_at_high_priority(null_server, priority):
    client = Client(null_server.socket, priority=priority)
    try:
        fa, _ = functions(client)
        A = client.alloc(4 * N)
        assert define(client, 1, [affine(fa, A, 3, 1), affine(fa, A, 2, 0)], [(0, 1)]) == ("Done", {})
        before, launches_before = in_cpp(null_server), graph_launches(null_server)
        replay(client, 1, REPLAYS)
        taken = in_cpp(null_server) - before
        if priority == Priority.HIGH:
            # all but the first replay (and perhaps the synchronization) in C++, each one unit
            assert REPLAYS - 1 <= taken <= REPLAYS
            assert graph_launches(null_server) - launches_before == REPLAYS
        else:
            assert taken <= 1       # the synchronization at most
        # redefined: its first replay goes through Python again
        assert define(client, 1, [affine(fa, A, 5, 0)], []) == ("Done", {})
        before = in_cpp(null_server)
        replay(client, 1, 1)
        assert in_cpp(null_server) - before <= 1
    finally:
        client.close()


def test_the_emulators_replays_stay_pythons_and_a_redefined_graph_runs_anew(emulator_server):
    client = Client(emulator_server.socket, priority=Priority.HIGH)
    try:
        fa, _ = functions(client)
        A = client.alloc(4 * N)
        assert define(client, 2, [affine(fa, A, 0, 1)], []) == ("Done", {})     # A = 1
        before = in_cpp(emulator_server)
        replay(client, 2, 3)
        assert in_cpp(emulator_server) - before <= 1
        assert ints(client, A) == [1] * N
        assert define(client, 2, [affine(fa, A, 0, 9)], []) == ("Done", {})     # A = 9
        replay(client, 2, 2)
        assert ints(client, A) == [9] * N
    finally:
        client.close()
