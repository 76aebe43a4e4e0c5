"""cuLaunchHostFunc / cuStreamAddCallback: the job's callback runs in the job's
process, in stream order.

The server queues a GatedCallback on the stream. When the device reaches it,
the backend runs a function that posts HostFuncReady (a completion with tag 0)
to the client and returns at once; the client's callback thread runs the job's
function and answers HostFuncDone, which opens the gate: until then the stream's
later work stays in the executor, as CUDA guarantees. No backend thread waits
for the job (CUDA runs all host functions of a context on one thread, so waiting
there would stall every other job's completions).
"""
from __future__ import annotations

import threading

from tally.protocol.messages_generated import HostFuncReady
from tally.scheduler.ops import GatedCallback, HostGate
from tally.server.client.job_channel import JobChannel


class HostFunctions:
    def __init__(self, job: JobChannel):
        self._job = job
        self._executor = job.services.executor
        self._lock = threading.Lock()
        self._pending: dict[int, HostGate] = {}
        self._released = False

    def operation_for(self, callback_id: int) -> GatedCallback:
        """The operation to queue for this callback."""
        gate = HostGate()
        with self._lock:
            if callback_id in self._pending:
                raise ValueError(f"host function callback {callback_id} is already queued")
            self._pending[callback_id] = gate
            released = self._released
        if released:
            gate.opened = True
        job = self._job

        def post() -> None:
            if job.closed:
                return
            try:
                job.push_completion(HostFuncReady.KIND, 0, HostFuncReady(callback_id).encode())
            except Exception:  # noqa: BLE001
                pass   # the client is gone; release_all opens the gate

        return GatedCallback(post, gate)

    def finished(self, callback_id: int) -> bool:
        """HostFuncDone: let the stream go on. False for an unknown callback."""
        with self._lock:
            gate = self._pending.pop(callback_id, None)
        if gate is None:
            return False
        self._executor.open_gate(gate)
        return True

    def release_all(self) -> None:
        """The client is going: no callback will answer; open every gate."""
        with self._lock:
            self._released = True
            pending = list(self._pending.values())
            self._pending.clear()
        for gate in pending:
            self._executor.open_gate(gate)
