"""The C++ data plane's request loop (tally._core.data_plane.ClientPlane) on a
segment whose client side is this process: what it takes itself and what it
hands to Python, unchanged and in order. The null device's issuer; the
executor's side and real servers are in test_data_plane_server.py."""
from __future__ import annotations

import itertools
import os
import queue
import threading
import time

import pytest

from tally import _core, protocol
from tally.protocol.spec import SOURCE_ARENA, SOURCE_INLINE

_names = itertools.count()
LEGACY, STREAM = 0, 5
FN, PARAMS = 7, 12          # a kernel the plane knows, with a 12-byte parameter block
BASE = 0x7F00_0000_0000


def kind(name: str) -> int:
    return protocol.codec(name).kind


class Loop:
    """A ClientPlane serving on a thread; what it hands to Python lands in `python`."""

    def __init__(self):
        name = f"/tally-dp-{os.getpid()}-{next(_names)}"
        self.server = _core.Segment.create(name, 1 << 16, 1 << 16, 1 << 16, 1 << 16)
        self.client = _core.Segment.open(name)
        self.server.unlink()     # both ends are mapped: the name would only outlive the test
        self.plane = _core.data_plane.ClientPlane(self.server, _core.data_plane.NullIssuer())
        self.python: queue.Queue = queue.Queue()
        self.ended: queue.Queue = queue.Queue()
        self.release_python = threading.Event()     # Notify's handler waits for it
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            ended, reason = self.plane.serve(self._python, 0.05)
            self.ended.put((ended, reason))
            if ended:
                return

    def _python(self, k, tag, payload):
        self.python.put((k, tag, bytes(payload)))
        if k == kind("Notify"):
            self.release_python.wait(5)      # a slow handler, for the hold tests

    def send(self, name: str, tail: bytes = b"", tag: int = 0, **fields) -> None:
        self.client.request_ring.push(kind(name), tag, protocol.codec(name).pack(tail, **fields))

    def ping(self, value: int) -> None:
        """A round trip through the loop: everything sent before it was handled."""
        self.send("Ping", tag=1000 + value, value=value)
        assert self.reply() == ("Pong", 1000 + value, {"value": value})

    def reply(self, timeout: float = 5):
        got = self.client.completion_ring.pop(timeout)
        assert got is not None, "no reply"
        k, tag, payload = got
        codec = protocol.BY_KIND[k]
        return codec.message.name, tag, codec.unpack(payload)[0]

    def handed_to_python(self) -> list[tuple[str, int]]:
        out = []
        while not self.python.empty():
            k, tag, _ = self.python.get()
            out.append((protocol.BY_KIND[k].message.name, tag))
        return out

    def fast(self) -> dict[str, int]:
        return {protocol.BY_KIND[k].message.name: n for k, n in self.plane.counts()[2].items()}

    def open_stream(self, key: int) -> None:
        self.plane.stream_rules(key, True, True)
        self.plane.open_lane(key, 0)
        self.plane.grant(key, True)

    def close(self):
        self.plane.stop()
        assert self.ended.get(timeout=5) == (True, "")
        self.client.close()
        self.server.unlink()


@pytest.fixture
def loop():
    lp = Loop()
    lp.open_stream(LEGACY)
    lp.plane.add_function(FN, PARAMS)
    yield lp
    lp.close()


def launch(lp: Loop, stream=LEGACY, function=FN, params=bytes(PARAMS), grid=(1, 1, 1), tag=0):
    lp.send("LaunchKernel", params, tag=tag, function=function, stream=stream, grid=grid, block=(32, 1, 1))


def test_launches_on_an_open_lane_skip_python_and_the_rest_reaches_python_in_order(loop):
    launch(loop)
    loop.send("EventRecord", event=3, stream=LEGACY)          # never the data plane's
    launch(loop)
    launch(loop)
    loop.send("MemAlloc", tag=9, bytes=4096)
    loop.ping(1)
    assert loop.handed_to_python() == [("EventRecord", 0), ("MemAlloc", 9)]
    assert loop.fast() == {"LaunchKernel": 3, "Ping": 1}
    assert loop.plane.lane_counts(LEGACY)[:2] == (3, 3)      # kernels, operations
    assert loop.plane.take_legacy_touched() and not loop.plane.take_legacy_touched()


@pytest.mark.parametrize("case", ["unknown function", "parameter size", "empty grid", "tagged", "no such stream",
                                  "stream not allowed", "lane revoked", "no executor stream"])
def test_launches_python_must_judge_reach_python_unchanged(loop, case):
    loop.plane.stream_rules(STREAM, True, True)
    args = {"unknown function": dict(function=FN + 1), "parameter size": dict(params=bytes(PARAMS + 4)),
            "empty grid": dict(grid=(0, 1, 1)), "tagged": dict(tag=4), "no such stream": dict(stream=99),
            "no executor stream": dict(stream=STREAM)}.get(case, {})
    if case == "stream not allowed":
        loop.plane.stream_rules(LEGACY, True, False)      # a blocking stream's work needs a fence first
    if case == "lane revoked":
        loop.plane.revoke_all()
    launch(loop, **args)
    loop.ping(2)
    k, tag, payload = loop.python.get(timeout=5)
    assert (protocol.BY_KIND[k].message.name, tag) == ("LaunchKernel", args.get("tag", 0))
    sent = protocol.codec("LaunchKernel").pack(args.get("params", bytes(PARAMS)), function=args.get("function", FN),
                                               stream=args.get("stream", LEGACY), grid=args.get("grid", (1, 1, 1)),
                                               block=(32, 1, 1))
    assert payload == sent
    assert "LaunchKernel" not in loop.fast() and loop.plane.lane_counts(LEGACY)[1] == 0


def test_memsets_and_copies_only_on_memory_the_job_owns(loop):
    loop.plane.add_allocation(BASE, 4096)
    loop.send("Memset", dst=BASE, value=7, element_size=4, width=1024, height=1, pitch=4096, stream=LEGACY)
    loop.send("Memset", dst=BASE, value=7, element_size=4, width=1025, height=1, pitch=4100, stream=LEGACY)
    loop.send("MemcpyDtoD", dst=BASE + 2048, src=BASE, width=2048, height=1, dst_pitch=2048, src_pitch=2048,
              stream=LEGACY)
    loop.send("MemcpyDtoD", dst=BASE + 2048, src=BASE, width=2049, height=1, stream=LEGACY)
    loop.send("MemcpyHtoD", b"x" * 64, dst=BASE + 64, width=64, height=1, dst_pitch=64, stream=LEGACY,
              source=SOURCE_INLINE)
    loop.send("MemcpyHtoD", b"x" * 64, dst=BASE + 4090, width=64, height=1, dst_pitch=64, stream=LEGACY,
              source=SOURCE_INLINE)
    loop.ping(3)
    assert loop.fast() == {"Memset": 1, "MemcpyDtoD": 1, "MemcpyHtoD": 1, "Ping": 1}
    assert [name for name, _ in loop.handed_to_python()] == ["Memset", "MemcpyDtoD", "MemcpyHtoD"]
    loop.plane.remove_allocation(BASE)       # freed: nothing may touch it from here on
    loop.send("Memset", dst=BASE, value=7, element_size=4, width=16, height=1, pitch=64, stream=LEGACY)
    loop.ping(4)
    assert loop.handed_to_python() == [("Memset", 0)]


def test_a_copy_from_the_upload_arena_releases_its_chunk(loop):
    loop.plane.add_allocation(BASE, 1 << 12)
    offset = loop.client.upload.reserve(1000)
    loop.client.upload.write(offset, b"y" * 1000)
    loop.send("MemcpyHtoD", tag=5, dst=BASE, width=1000, height=1, dst_pitch=1000, stream=LEGACY,
              source=SOURCE_ARENA, arena_offset=offset)
    assert loop.reply() == ("Done", 5, {})         # a synchronous copy from pageable memory: done at once
    assert loop.client.upload.used == 0 and loop.fast() == {"MemcpyHtoD": 1}


def test_synchronizations_are_answered_only_while_python_has_nothing_pending(loop):
    loop.send("CtxSynchronize", tag=1)
    loop.ping(5)
    assert loop.handed_to_python() == [("CtxSynchronize", 1)]
    loop.plane.set_quiet(True)           # what the Python handler does after answering Done at idle
    launch(loop)
    loop.send("CtxSynchronize", tag=2)
    loop.send("StreamSynchronize", tag=3, stream=LEGACY)
    assert [loop.reply()[:2] for _ in range(2)] == [("Done", 2), ("Done", 3)]
    loop.send("StreamSynchronize", tag=4, stream=77)    # not a stream: Python says so
    loop.send("CtxSynchronize", tag=6)                  # and anything Python handled ends the quiet
    loop.ping(6)
    assert loop.handed_to_python() == [("StreamSynchronize", 4), ("CtxSynchronize", 6)]


def test_a_disabled_plane_hands_everything_to_python(loop):
    loop.plane.set_enabled(False)        # the job's context is unusable: Python fails every request
    launch(loop)
    loop.send("Ping", tag=8, value=8)
    loop.send("Goodbye")
    for expected in (("LaunchKernel", 0), ("Ping", 8), ("Goodbye", 0)):
        k, tag, _ = loop.python.get(timeout=5)
        assert (protocol.BY_KIND[k].message.name, tag) == expected
    assert loop.fast() == {}


def test_the_loop_ends_when_the_job_is_gone():
    lp = Loop()
    lp.client.mark_closed()
    assert lp.ended.get(timeout=5) == (True, "client process died")
    lp.client.close()
    lp.server.unlink()


def _mapped(name: str) -> bool:
    """Whether this process maps the shared-memory object `name` (its name unlinked or not)."""
    paths = {f"/dev/shm{name}", f"/dev/shm{name} (deleted)"}
    with open("/proc/self/maps") as f:
        return any(line.rstrip("\n").split(None, 5)[-1] in paths for line in f)


def test_close_unmaps_the_segment_while_the_plane_object_lives():
    """A closed session's plane let go of the job's segment only when Python's
    garbage collector got to the session (reference cycles): dead jobs' segments
    stayed mapped in the server, megabytes each (the chaos campaign's RSS growth)."""
    lp = Loop()
    lp.ping(1)
    name = lp.server.name
    lp.plane.stop()
    assert lp.ended.get(timeout=5) == (True, "")
    lp.client.close()
    lp.server.close()                     # the session's own handle goes first, as in Session.close
    assert _mapped(name), "the plane still holds the mapping"
    lp.plane.close()
    assert not _mapped(name)
    assert not lp.plane.push_completion(kind("Done"), 12, b"")
    assert lp.plane.serve(lp._python, 0.05) == (True, "the session closed")
    lp.plane.close()                      # idempotent


def test_replies_after_close_go_nowhere(loop):
    assert loop.plane.push_completion(kind("Done"), 11, b"")
    assert loop.reply() == ("Done", 11, {})
    loop.plane.close_replies()
    assert not loop.plane.push_completion(kind("Done"), 12, b"")
    loop.send("Ping", tag=13, value=13)             # answered into the void, not to Python
    assert loop.client.completion_ring.pop(0.3) is None and loop.python.empty()


def test_a_best_effort_plane_launches_only_whole_shapes_through_an_open_gate(loop):
    gate = _core.data_plane.BestEffortGate()
    loop.plane.set_lane_rule(gate, False, True, True)   # a best-effort job's plane
    loop.plane.add_whole_shape(FN, (1, 1, 1), (32, 1, 1), 0)
    launch(loop)                                    # the gate is closed
    loop.ping(6)
    gate.open()
    launch(loop)
    launch(loop, grid=(2, 1, 1))                    # not a shape the planner runs whole
    loop.ping(7)
    assert loop.handed_to_python() == [("LaunchKernel", 0)] * 2 and loop.fast()["LaunchKernel"] == 1
    loop.plane.remove_function(FN)                  # its shapes go with it
    loop.plane.add_function(FN, PARAMS)
    launch(loop)
    loop.ping(8)
    assert loop.handed_to_python() == [("LaunchKernel", 0)]


def test_a_high_priority_plane_closes_the_gate_with_its_first_kernel(loop):
    gate = _core.data_plane.BestEffortGate()
    loop.plane.set_lane_rule(gate, True, False, False)
    gate.open()
    loop.send("Memset", dst=BASE, value=0, element_size=4, width=0, height=1, pitch=0, stream=LEGACY)
    loop.ping(9)
    assert gate.is_open                             # only kernels close it
    launch(loop)
    loop.ping(10)
    assert not gate.is_open and loop.fast()["LaunchKernel"] == 1


def test_a_held_plane_leaves_requests_in_the_ring_until_released(loop):
    assert loop.plane.hold(1.0) and loop.plane.held
    launch(loop)
    loop.send("Ping", tag=21, value=21)
    assert loop.client.completion_ring.pop(0.3) is None and loop.python.empty() and not loop.fast()
    assert not loop.plane.enter()                   # nor may Python start one of its own
    loop.plane.release()
    assert loop.reply() == ("Pong", 21, {"value": 21})
    assert loop.fast() == {"LaunchKernel": 1, "Ping": 1}


def test_hold_waits_for_the_request_python_is_handling(loop):
    loop.release_python.clear()
    loop.send("Notify", value=0)                    # its handler waits for release_python
    deadline = time.monotonic() + 5
    while loop.python.empty():
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert not loop.plane.hold(0.05)                # still being handled: not held
    assert not loop.plane.held
    loop.release_python.set()
    assert loop.plane.hold(5.0)
    loop.plane.release()
    loop.ping(22)


def test_poke_returns_to_python_and_the_loop_goes_on(loop):
    loop.plane.poke()
    assert loop.ended.get(timeout=5) == (False, "")
    loop.ping(23)
