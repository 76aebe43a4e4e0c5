"""How a migrating job's device bytes travel (tally/server/migration.py sends,
migration_import.py receives): each chunk of CHUNK_BYTES is a small `bytes`
piece naming its address (`vmm_bytes`: the job's handle of a piece of physical
memory and the offset in it), whether it is LZ4-compressed and its length, and
then its payload, raw on the socket right after that record.

Why raw rather than inside the msgpack piece (measured on the 2-core VM,
2026-11-28: 16 MiB took 85-230 ms to send): a payload packed into the record
was copied six times in user space (msgpack, the record's encoding, the
framing, the receiver's recv pieces, their join, msgpack again), most of them
into memory new to the process. Now the source sends straight from the buffer
the device copied into, and the target receives straight into one of two
buffers, while the device copies the other one's bytes. The buffers on both
sides come from the server's SavedMemoryStore (tally/server/saved_memory.py),
warm when a migration or suspension kept them: 32 MiB of new, zeroed buffers
per migration cost 50-100 ms of page faults on the VM.
"""
from __future__ import annotations

import socket

import msgpack

from tally.protocol import ProtocolError
from tally.protocol.framing import send_record
from tally.protocol.messages_generated import MigrateState
from tally.server import lz4_chunks
from tally.server.saved_memory import CHUNK_BYTES, SavedMemoryStore


# The pieces a raw payload follows: device memory at an address, a job's physical memory.
PAYLOAD_OPS = frozenset({"bytes", "vmm_bytes"})


def send_piece(sock, piece: dict) -> None:
    send_record(sock, MigrateState.KIND, MigrateState(tail=msgpack.packb(piece)).encode())


class TransferBuffers:
    """Two CHUNK_BYTES buffers from the store, taken when first needed."""

    def __init__(self, store: SavedMemoryStore):
        self._store = store
        self._taken: list = []

    def __getitem__(self, i: int):
        while len(self._taken) <= i:
            # Where the store has no room, a transfer still needs its two chunks.
            self._taken.append(self._store.take_buffer() or bytearray(CHUNK_BYTES))
        return self._taken[i]

    def give_back(self) -> None:
        for buffer in self._taken:
            if not isinstance(buffer, bytearray):
                self._store.give_buffer(buffer)
        self._taken = []


class ByteSender:
    """The source's side: reads device memory chunk by chunk, the next chunk's copy
    running while the previous one goes out on the socket."""

    def __init__(self, backend, sock: socket.socket, store: SavedMemoryStore):
        self._backend = backend
        self._sock = sock
        self._stream = backend.stream_create()
        self._buffers = TransferBuffers(store)
        self.sent = 0               # device bytes sent

    def send(self, ptr: int, size: int) -> None:
        """The bytes of device memory [ptr, ptr + size) as `bytes` pieces."""
        backend, stream = self._backend, self._stream
        self._send(size, lambda view, at: backend.memcpy_dtoh_async(view, ptr + at, stream),
                   lambda at: {"op": "bytes", "ptr": ptr + at})

    def send_physical(self, handle: int, backend_handle, size: int) -> None:
        """The bytes of a job's physical memory (cuMemCreate; `handle` is the job's name
        for it) as `vmm_bytes` pieces (tally/server/migration_memory.py)."""
        self._send(size, lambda view, at: self._backend.vmm_read(backend_handle, at, view),
                   lambda at: {"op": "vmm_bytes", "handle": handle, "offset": at})

    def _send(self, size: int, copy_out, header) -> None:
        """`copy_out(view, at)` starts a copy of the region's bytes [at, at + len(view))
        into view on the stream (or makes it); `header(at)` names the chunk at `at`."""
        backend, stream = self._backend, self._stream
        chunks = [(at, min(CHUNK_BYTES, size - at)) for at in range(0, size, CHUNK_BYTES)]
        if not chunks:
            return
        copy_out(memoryview(self._buffers[0])[:chunks[0][1]], 0)
        for i, (at, n) in enumerate(chunks):
            backend.stream_synchronize(stream)            # chunk i is in its buffer
            view = memoryview(self._buffers[i % 2])[:n]
            if i + 1 < len(chunks):
                following, m = chunks[i + 1]
                copy_out(memoryview(self._buffers[(i + 1) % 2])[:m], following)
            packed = lz4_chunks.compress_if_it_pays(view)
            payload = view if packed is None else packed
            send_piece(self._sock, {**header(at), "lz4": packed is not None, "size": len(payload)})
            self._sock.sendall(payload)
            self.sent += n

    def close(self) -> None:
        try:
            self._backend.stream_synchronize(self._stream)    # no copy into a buffer outlives it
        finally:
            self._backend.stream_destroy(self._stream)
            self._buffers.give_back()


class PayloadReceiver:
    """The target's side: reads each `bytes` piece's payload into one of two
    buffers. `sync` waits for the device copies issued so far: a buffer is read
    into again only once the copy out of it is done."""

    def __init__(self, sync, store: SavedMemoryStore):
        self._sync = sync
        self._buffers = TransferBuffers(store)
        self._next = 0
        self._in_use = [False, False]

    def attach(self, conn: socket.socket, piece: dict) -> dict:
        """The piece, its payload read from the socket into piece["data"] (a view
        valid until the next call but one) when it is a `bytes` or `vmm_bytes` piece."""
        if piece.get("op") not in PAYLOAD_OPS or "data" in piece:
            return piece
        size = piece.get("size")
        if type(size) is not int or not 0 <= size <= CHUNK_BYTES:
            raise ProtocolError(f"a migration's chunk of {size} bytes (at most {CHUNK_BYTES})")
        i = self._next
        self._next ^= 1
        if self._in_use[i]:
            self._sync()
            self._in_use = [False, False]
        view = memoryview(self._buffers[i])[:size]
        got = 0
        while got < size:
            n = conn.recv_into(view[got:])
            if n == 0:
                raise ConnectionError(f"the source closed the connection after {got} of {size} bytes of a chunk")
            got += n
        self._in_use[i] = True
        piece["data"] = view
        return piece

    def close(self) -> None:
        """Once no copy out of the buffers runs any more."""
        self._buffers.give_back()
