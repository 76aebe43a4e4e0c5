"""Stream order through either data plane: a seeded random mix of launches,
memsets and copies on four streams of one job (legacy, two blocking, one
non-blocking), and events handing data from one stream to another, run on the
emulator by a high-priority and by a best-effort job; afterwards every stream's
memory holds exactly what CUDA's stream order makes of the mix (a model in
numpy). Each stream writes only its own region, and a copy from another
stream's region happens between an event handshake (the source stream records,
the copying stream waits, copies, records; the source stream waits for that
before it writes again), so the outcome does not depend on timing."""
from __future__ import annotations

import random
import struct

import numpy as np
import pytest
from test_data_plane_server import iota_ptx, plane_server  # noqa: F401 - fixtures: the same servers, either plane
from server_harness import PyClient

from tally import protocol
from tally.protocol.spec import DEST_ARENA, SOURCE_INLINE

STREAMS = (0, 11, 12, 13)           # legacy, blocking, non-blocking, blocking
FLAGS = {11: 0, 12: 1, 13: 0}
INTS = 256                          # per stream's region
OPS = 160
DISABLE_TIMING = 2


class Mix:
    """The job, and the model of what its requests make of its memory."""

    def __init__(self, server, ptx: bytes, priority):
        self.job = PyClient(server.socket, priority=priority)
        kind, values, _ = self.job.call("ModuleLoad", ptx, size=len(ptx))
        assert kind == "ModuleLoadReply", values
        self.iota = self.job.call("GetFunction", b"iota", module=values["module"])[1]["function"]
        self.base = self.job.call("MemAlloc", bytes=4 * INTS * len(STREAMS))[1]["dptr"]
        for key, flags in FLAGS.items():
            assert self.job.call("StreamCreate", stream=key, flags=flags)[0] == "Done"
        for key in STREAMS:
            self.job.send("EventCreate", event=100 + key, flags=DISABLE_TIMING)
            self.job.send("EventCreate", event=200 + key, flags=DISABLE_TIMING)
        self.model = {key: np.zeros(INTS, np.int32) for key in STREAMS}

    def address(self, key: int, index: int) -> int:
        return self.base + 4 * (STREAMS.index(key) * INTS + index)

    def launch(self, key: int, at: int, start: int) -> None:
        self.job.send("LaunchKernel", struct.pack("<Qii", self.address(key, at), 128, start), function=self.iota,
                      stream=key, grid=(1, 1, 1), block=(128, 1, 1))
        self.model[key][at:at + 128] = start + np.arange(128)

    def memset(self, key: int, at: int, count: int, value: int) -> None:
        self.job.send("Memset", dst=self.address(key, at), value=value, element_size=4, width=count, height=1,
                      pitch=4 * count, stream=key)
        self.model[key][at:at + count] = value

    def upload(self, key: int, at: int, values: list[int]) -> None:
        data = struct.pack(f"<{len(values)}i", *values)
        self.job.send("MemcpyHtoD", data, dst=self.address(key, at), width=len(data), height=1,
                      dst_pitch=len(data), stream=key, source=SOURCE_INLINE)
        self.model[key][at:at + len(values)] = values

    def copy(self, key: int, dst: int, src_key: int, src: int, count: int) -> None:
        self.job.send("MemcpyDtoD", dst=self.address(key, dst), src=self.address(src_key, src), width=4 * count,
                      height=1, dst_pitch=4 * count, src_pitch=4 * count, stream=key)
        self.model[key][dst:dst + count] = self.model[src_key][src:src + count]

    def handed_over(self, source: int, key: int, dst: int, src: int, count: int) -> None:
        """`key` copies from `source`'s region between an event handshake."""
        self.job.send("EventRecord", event=100 + source, stream=source)
        self.job.send("StreamWaitEvent", stream=key, event=100 + source)
        self.copy(key, dst, source, src, count)
        self.job.send("EventRecord", event=200 + key, stream=key)
        self.job.send("StreamWaitEvent", stream=source, event=200 + key)

    def read(self, key: int) -> np.ndarray:
        kind, values, _ = self.job.call("MemcpyDtoH", src=self.address(key, 0), width=4 * INTS, height=1,
                                        src_pitch=4 * INTS, stream=0, dest=DEST_ARENA)
        assert kind == "MemcpyDtoHReply", values
        data = self.job.segment.download.read(values["arena_offset"], values["size"])
        self.job.segment.download.release(values["arena_offset"], values["size"])
        return np.frombuffer(data, np.int32)


def run_mix(mix: Mix, seed: int) -> None:
    rng = random.Random(seed)
    for i in range(OPS):
        key = rng.choice(STREAMS)
        what = rng.random()
        if what < 0.5:
            mix.launch(key, rng.choice((0, 64, 128)), rng.randrange(1 << 20))
        elif what < 0.65:
            at = rng.randrange(INTS - 16)
            mix.memset(key, at, rng.randrange(1, 16), rng.randrange(1 << 31))
        elif what < 0.75:
            mix.upload(key, rng.randrange(INTS - 8), [rng.randrange(1 << 31) for _ in range(rng.randrange(1, 8))])
        elif what < 0.85:
            mix.copy(key, rng.randrange(128, INTS - 32), key, rng.randrange(0, 96), 32)   # apart: never overlap
        else:
            source = rng.choice([s for s in STREAMS if s != key])
            mix.handed_over(source, key, rng.randrange(INTS - 32), rng.randrange(INTS - 32), 32)
        if i % 40 == 39:
            assert mix.job.call(rng.choice(("CtxSynchronize", "StreamSynchronize")), stream=key)[0] == "Done"


@pytest.mark.parametrize("priority", [protocol.Priority.HIGH, protocol.Priority.BEST_EFFORT])
@pytest.mark.parametrize("seed", [1, 2])
def test_every_stream_ends_as_stream_order_says(plane_server, iota_ptx, priority, seed):
    plane, server = plane_server
    mix = Mix(server, iota_ptx, priority)
    try:
        run_mix(mix, seed)
        assert mix.job.call("CtxSynchronize")[0] == "Done"
        for key in STREAMS:
            got = mix.read(key)
            assert np.array_equal(got, mix.model[key]), (key, np.flatnonzero(got != mix.model[key])[:10])
        status = server.status()
        mine = [c for c in status["clients"] if c["client_id"] == mix.job.reply["client_id"]][0]
        if plane == "cpp":      # the mix went through the C++ plane's fast path, not only through Python
            assert mine["requests_in_cpp"] >= (40 if priority == protocol.Priority.HIGH else 5), mine
    finally:
        mix.job.close()
