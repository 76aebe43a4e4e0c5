"""A migrating job's device bytes on the wire (tally/server/migration_bytes.py):
chunks of any region size arrive exactly, raw after their record, compressed
only where that halves them; the receiver reads them into two reused buffers
and waits for the device's copies before reusing one; both sides give their
buffers back to the server's store."""
from __future__ import annotations

import os
import socket
import threading

import msgpack

from tally.protocol.framing import recv_record
from tally.protocol.messages_generated import MigrateState
from tally.server import lz4_chunks
from tally.server.migration_bytes import ByteSender, PayloadReceiver
from tally.server.saved_memory import CHUNK_BYTES, SavedMemoryPolicy, SavedMemoryStore

MIB = 1 << 20
BASE = 0x7F00_0000_0000


class FakeDevice:
    """One region of device memory; copies run at once (the stream is a formality)."""

    def __init__(self, data: bytearray):
        self.data = data
        self.syncs = 0

    def stream_create(self):
        return object()

    def stream_destroy(self, stream) -> None:
        pass

    def stream_synchronize(self, stream) -> None:
        self.syncs += 1

    def memcpy_dtoh_async(self, dst: memoryview, src: int, stream) -> None:
        dst[:] = self.data[src - BASE:src - BASE + len(dst)]

    def vmm_read(self, handle, offset: int, dst: memoryview) -> None:
        assert handle == "physical"
        dst[:] = self.data[offset:offset + len(dst)]


def store() -> SavedMemoryStore:
    return SavedMemoryStore(SavedMemoryPolicy(keep_bytes=4 * CHUNK_BYTES), available=lambda: 1 << 40)


def test_chunks_arrive_exactly_and_only_compressible_ones_compressed():
    size = 2 * CHUNK_BYTES + 3 * MIB + 5
    data = bytearray(os.urandom(size))
    data[CHUNK_BYTES:2 * CHUNK_BYTES] = bytes(CHUNK_BYTES)        # the second chunk: zeros
    source, target = store(), store()
    a, b = socket.socketpair()
    received = bytearray(size)
    flags: list[bool] = []
    syncs: list[int] = []

    def receive() -> None:
        receiver = PayloadReceiver(lambda: syncs.append(len(flags)), target)
        while len(flags) < 3:
            _kind, _tag, record = recv_record(b)
            piece = receiver.attach(b, msgpack.unpackb(MigrateState.decode(record).tail))
            data_ = lz4_chunks.decompress(piece["data"]) if piece["lz4"] else piece["data"]
            at = piece["ptr"] - BASE
            received[at:at + len(data_)] = data_
            flags.append(piece["lz4"])
        receiver.close()

    thread = threading.Thread(target=receive)
    thread.start()
    sender = ByteSender(FakeDevice(data), a, source)
    sender.send(BASE, size)
    sender.close()
    thread.join(30)
    assert received == data and sender.sent == size
    assert flags == [False, True, False]
    assert syncs == [2]               # the first buffer again, for the third chunk: after the copies
    assert source.kept_bytes == target.kept_bytes == 2 * CHUNK_BYTES     # both buffers back, warm
    a.close()
    b.close()


def test_physical_memory_goes_the_same_way_under_the_jobs_handle():
    size = CHUNK_BYTES + 7
    data = bytearray(os.urandom(size))
    a, b = socket.socketpair()
    received = bytearray(size)
    pieces: list[dict] = []

    def receive() -> None:
        receiver = PayloadReceiver(lambda: None, store())
        while sum(p["size"] for p in pieces) < size:
            _kind, _tag, record = recv_record(b)
            piece = receiver.attach(b, msgpack.unpackb(MigrateState.decode(record).tail))
            received[piece["offset"]:piece["offset"] + len(piece["data"])] = piece["data"]
            pieces.append({k: v for k, v in piece.items() if k != "data"})
        receiver.close()

    thread = threading.Thread(target=receive)
    thread.start()
    sender = ByteSender(FakeDevice(data), a, store())
    sender.send_physical(7, "physical", size)
    sender.close()
    thread.join(30)
    assert received == data and sender.sent == size
    assert pieces == [{"op": "vmm_bytes", "handle": 7, "offset": 0, "lz4": False, "size": CHUNK_BYTES},
                      {"op": "vmm_bytes", "handle": 7, "offset": CHUNK_BYTES, "lz4": False, "size": 7}]
    a.close()
    b.close()


def test_a_piece_without_a_payload_passes_through():
    receiver = PayloadReceiver(lambda: None, store())
    piece = {"op": "alloc", "ptr": BASE, "size": 5}
    assert receiver.attach(None, piece) is piece
