"""Suspending a running job (`tally-server suspend`) and bringing it back
(`tally-server resume`): its device memory goes to host memory and the device
memory is freed, so other jobs can use it; on resume it comes back at the same
device addresses (the job holds raw pointers), and the job's work goes on.

Suspend, in order: the job's session thread stops between two requests (its
synchronous calls wait, its asynchronous ones wait in its request ring), the
executor holds its work (pause_client: running PTB kernels are preempted at a
block boundary, other running work finishes), the server waits until none of
its work is on the device, copies every byte it owns there (allocations, its
modules' globals, its virtual memory's physical memory) to host memory, and
only then frees it. The bytes go into the server's chunk buffers, compressed
where that pays, within the host-memory limit, beyond it to disk
(tally/server/saved_log.py, saved_memory.py). A failure before the frees (the
job's session stays busy, a host function of the job holds its stream, a copy
fails, host memory has no room) leaves the job running as it was, with the
reason. Resume gets the same addresses back first
(all or none: when another job holds them, or the memory, the job stays
suspended and the operator learns why), writes the bytes, and lets the work go.

What stays on the device: managed memory (its bytes are the job's own shared
memory), memory another job opened through IPC (a job exporting memory that is
open elsewhere is not suspended), memory a free of the job is still waiting to
release, and the executor's own state for the job's PTB kernels. Only backends
whose traits say `restores_at_address` can do it (tally/backends/base.py,
AddressRestore).
"""
from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from tally import protocol
from tally.protocol.errors import DeviceError
from tally.scheduler.executor import ClientGone
from tally.server.job import ServedJob
from tally.server.lifecycle import JobState, Refused, Request
from tally.server.ports import ExecutorPort
from tally.server.saved_log import SavedLog
from tally.server.saved_memory import HostMemoryFull, SavedMemoryStore
from tally.units import format_bytes

log = logging.getLogger("tally.server")

# How long the job's session may take to finish the request it is handling.
HOLD_TIMEOUT_S = 10.0
# How long the job's work on the device may take to finish (or be preempted).
IDLE_TIMEOUT_S = 30.0


class SuspendRefused(Exception):
    """Nothing changed; the message says why and what to do."""


@dataclass
class SavedPhysical:
    handle: int              # the client's handle (VirtualMemory)
    released: bool           # the client released it; its mappings keep it
    size: int


@dataclass
class Suspension:
    """A suspended job's device state: where its bytes went (`saved`, host memory
    or disk: tally/server/saved_log.py) and what they were, in the log's order."""

    saved: SavedLog
    allocations: list[tuple[int, int]] = field(default_factory=list)      # (device address, bytes)
    modules: list[tuple[object, list[tuple[int, int]]]] = field(default_factory=list)   # (LoadedModule, its globals)
    physical: list[SavedPhysical] = field(default_factory=list)
    mappings: list[tuple[int, object]] = field(default_factory=list)   # (address, VirtualMemory Mapping)
    suspended_at: float = 0.0
    # What of it counted against its quota and the best-effort pool (allocations, physical
    # memory): given back while it is suspended, so other jobs may use the memory.
    charged: int = 0

    @property
    def nbytes(self) -> int:
        return self.saved.nbytes

    def discard(self, session: ServedJob) -> None:
        """The job went while suspended: forget what is not on the device any more,
        so its release frees only what is (its modules free nothing: evicted), and
        give its saved bytes' host memory back."""
        client = session.client
        client.allocations.memory.take_back(self.charged)     # the forgetting below gives it back
        for ptr, _size in self.allocations:
            client.allocations.remove(ptr)
            session.backend.mem_free_evicted(ptr)
        client.vmm.forget_physical()
        self.saved.release()


@dataclass
class MobilityRecord:
    """What status shows about suspensions on this server."""

    suspensions: int = 0
    resumes: int = 0
    last_suspend_ms: float = 0.0
    last_resume_ms: float = 0.0

    def to_json(self) -> dict:
        return {"suspensions": self.suspensions, "resumes": self.resumes,
                "last_suspend_ms": round(self.last_suspend_ms, 3), "last_resume_ms": round(self.last_resume_ms, 3)}


def name(session: ServedJob) -> str:
    return f"client {session.client_id} ({session.program}, {protocol.priority_name(session.priority)})"


class SuspendHost(Protocol):
    backend: Any
    executor: ExecutorPort
    ipc: Any                           # IpcRegistry: memory another job has open stays
    saved_memory: SavedMemoryStore
    mobility: MobilityRecord


def suspend(server: SuspendHost, session: ServedJob, force: bool = False) -> str:
    """Suspend the job; a sentence saying what was done. SuspendRefused: nothing changed."""
    backend = server.backend
    if not backend.traits.restores_at_address:
        raise SuspendRefused(f"the {backend.kind} backend cannot give a job's memory back at the same device "
                             f"addresses, so its jobs cannot be suspended; `tally-server pause` holds their work "
                             f"instead")
    if session.priority == protocol.Priority.HIGH and not force:
        raise SuspendRefused(f"{name(session)} is a high-priority job, the one tally protects; suspend it only on "
                             f"purpose, with --force")
    started = time.monotonic()
    life = session.life
    try:
        change = life.begin(Request.SUSPEND)
    except Refused as e:
        raise SuspendRefused(f"{name(session)}: {e}") from None
    if not change.changed:
        return f"{name(session)} is suspended already; nothing changed"
    state = None
    try:
        opened = server.ipc.opened_exports_of(session.client_id)
        if opened:
            raise SuspendRefused(f"{name(session)} exported memory that another job has open (IPC: "
                                 f"{', '.join(hex(p) for p in opened)}); it cannot leave the device while used")
        if server.ipc.physical.involves(session.client_id):
            raise SuspendRefused(f"{name(session)} shares virtual-memory physical memory with other jobs "
                                 f"(a shareable handle it exported or imported); it cannot leave the device "
                                 f"while that memory lives")
        if not session.hold.hold(HOLD_TIMEOUT_S):
            raise SuspendRefused(f"{name(session)} is still handling a request after {HOLD_TIMEOUT_S:g} s; "
                                 f"nothing changed, try again")
        executor = server.executor
        operator_paused = change.before is JobState.PAUSED
        try:
            executor.pause_client(session.client_id)
            if not executor.wait_client_idle(session.client_id, IDLE_TIMEOUT_S):
                raise SuspendRefused(f"{name(session)}'s work did not leave the device within {IDLE_TIMEOUT_S:g} s "
                                     f"(a host function of the job may hold its stream); nothing changed")
            state = _save(backend, session.client, server.saved_memory)
            _free(backend, session.client, state)
            state.charged = sum(size for _p, size in state.allocations) + sum(p.size for p in state.physical)
            session.client.allocations.memory.give(state.charged)
        except BaseException as e:
            if not operator_paused:
                _release_work(executor, session)
            session.hold.release()
            if isinstance(e, ClientGone):
                raise SuspendRefused(f"{name(session)} left while it was being suspended") from None
            if isinstance(e, DeviceError):
                raise SuspendRefused(f"{name(session)} could not be saved ({e}); it runs on as before") from None
            if isinstance(e, HostMemoryFull):
                raise SuspendRefused(f"{name(session)} was not suspended: no room in host memory for its "
                                     f"device memory ({e}); it runs on as before") from None
            raise
        state.suspended_at = time.monotonic()
    finally:
        if life.finish(state is not None, suspension=state) is JobState.FAULTED:
            session.hold.release()      # a device fault came meanwhile: its requests fail, none waits
    elapsed_ms = (time.monotonic() - started) * 1000
    record = server.mobility
    record.suspensions += 1
    record.last_suspend_ms = elapsed_ms
    where = _where(state.saved)
    log.info("%s suspended: %s of device memory saved (%s) and freed in %.1f ms", name(session),
             format_bytes(state.nbytes), where, elapsed_ms)
    return (f"{name(session)} suspended: {format_bytes(state.nbytes)} of device memory saved ({where}) and "
            f"freed in {elapsed_ms:.0f} ms; `tally-server resume --client {session.client_id}` brings it back")


def resume(server: SuspendHost, session: ServedJob) -> str:
    """Bring a suspended job back; SuspendRefused (it stays suspended) when its
    addresses or the memory are not free."""
    backend = server.backend
    started = time.monotonic()
    life = session.life
    try:
        life.begin(Request.RESUME)
    except Refused as e:
        if e.state in (JobState.RUNNING, JobState.PAUSED):
            return f"{name(session)} is not suspended; nothing changed"
        raise SuspendRefused(f"{name(session)}: {e}") from None
    state, resumed, paused = life.suspension, False, life.resumes_paused
    try:
        memory = session.client.allocations.memory
        try:
            memory.take(state.charged)        # its quota and the best-effort pool, as for an allocation
            try:
                _restore(backend, session.client, state)
            except (DeviceError, OSError):
                memory.give(state.charged)
                raise
        except DeviceError as e:
            raise SuspendRefused(f"{name(session)} stays suspended: its memory cannot come back at its addresses "
                                 f"now ({e}); free device memory (or wait for jobs to end) and try again") from None
        except OSError as e:       # a spilled chunk could not be read back
            raise SuspendRefused(f"{name(session)} stays suspended: its saved bytes could not be read back from "
                                 f"--suspend-spill-dir ({e}); check that disk and try again") from None
        nbytes = state.nbytes
        state.saved.release()
        if not paused:
            _release_work(server.executor, session)
        resumed = True
    finally:
        after = life.finish(resumed)
    if after is not JobState.SUSPENDED:
        session.hold.release()
    elapsed_ms = (time.monotonic() - started) * 1000
    record = server.mobility
    record.resumes += 1
    record.last_resume_ms = elapsed_ms
    log.info("%s resumed: %s restored in %.1f ms", name(session), format_bytes(nbytes), elapsed_ms)
    still = "; it stays paused (`tally-server resume` again releases its work)" if paused else ""
    return f"{name(session)} resumed: {format_bytes(nbytes)} restored at the same addresses in {elapsed_ms:.0f} ms" \
           + still


def _where(saved: SavedLog) -> str:
    """Where a suspended job's bytes went, for the operator."""
    parts = [f"{format_bytes(saved.host_bytes)} of host memory"]
    if saved.spilled_bytes:
        parts.append(f"{format_bytes(saved.spilled_bytes)} on disk")
    return " and ".join(parts)


def _release_work(executor: ExecutorPort, session: ServedJob) -> None:
    try:
        executor.resume_client(session.client_id)
    except (ClientGone, ValueError):
        pass                      # it left meanwhile


# ---- device state ---------------------------------------------------------------------

def _save(backend, client, store: SavedMemoryStore) -> Suspension:
    """Copy everything the job owns on the device to host memory (nothing is freed).
    HostMemoryFull or DeviceError: nothing is kept."""
    state = Suspension(SavedLog(store))
    state.allocations = [(ptr, size) for ptr, size in client.allocations.all() if ptr not in client.managed]
    state.modules = [(module, list(backend.module_memory(module.backend_module).values()))
                     for module in client.modules.loaded()]
    _reservations, physical, state.mappings = client.vmm.describe()
    state.physical = [SavedPhysical(h, released, size) for h, _bh, size, released in physical]
    total = (sum(size for _p, size in state.allocations) + sum(p.size for p in state.physical)
             + sum(size for _m, globals_ in state.modules for _p, size in globals_))
    stream = backend.stream_create()
    try:
        writer = state.saved.writer(lambda: backend.stream_synchronize(stream), total)
        try:
            for ptr, size in state.allocations:
                writer.append(size, lambda view, at, ptr=ptr: backend.memcpy_dtoh_async(view, ptr + at, stream))
            for _module, globals_ in state.modules:
                for ptr, size in globals_:
                    writer.append(size, lambda view, at, ptr=ptr: backend.memcpy_dtoh_async(view, ptr + at, stream))
            for _h, backend_handle, size, _released in physical:
                writer.append(size, lambda view, at, h=backend_handle: backend.vmm_read(h, at, view))
            writer.finish()
        except BaseException:
            writer.abort()
            raise
    finally:
        backend.stream_destroy(stream)
    return state


def _free(backend, client, state: Suspension) -> None:
    for ptr, _size in state.allocations:
        backend.mem_evict(ptr)
    for module, _globals in state.modules:
        backend.module_evict(module.backend_module)
    vmm = client.vmm
    for ptr, mapping in state.mappings:
        backend.vmm_unmap(ptr, mapping.size)
    with vmm.lock:
        found = [(vmm.released_mapped if p.released else vmm.handles)[p.handle][0] for p in state.physical]
    for backend_handle in found:
        backend.vmm_release(backend_handle)


def _restore(backend, client, state: Suspension) -> None:
    """All of the job's memory back at its addresses, then its bytes; on failure
    (DeviceError) nothing of it is on the device again, and its bytes stay saved."""
    live = set(map(id, client.modules.loaded()))     # the others were unloaded meanwhile
    new_handles: dict[int, object] = {}
    with contextlib.ExitStack() as undo:
        for ptr, size in state.allocations:
            backend.mem_alloc_at(ptr, size)
            undo.callback(backend.mem_evict, ptr)
        for module, _globals in state.modules:
            if id(module) in live:
                backend.module_restore(module.backend_module)
                undo.callback(backend.module_evict, module.backend_module)
        for physical in state.physical:
            new_handles[physical.handle] = handle = backend.vmm_create(physical.size)
            undo.callback(backend.vmm_release, handle)
        for ptr, mapping in state.mappings:
            backend.vmm_map(ptr, mapping.size, mapping.offset, new_handles[mapping.handle])
            undo.callback(backend.vmm_unmap, ptr, mapping.size)
            if mapping.accessible:
                backend.vmm_set_access(ptr, mapping.size, True)
        stream = backend.stream_create()
        try:
            reader = state.saved.reader(lambda: backend.stream_synchronize(stream))
            try:
                for ptr, size in state.allocations:
                    reader.read(size, lambda at, view, ptr=ptr: backend.memcpy_htod_async(ptr + at, view, stream))
                for module, globals_ in state.modules:
                    for ptr, size in globals_:
                        if id(module) in live:
                            reader.read(size, lambda at, view, ptr=ptr: backend.memcpy_htod_async(ptr + at, view,
                                                                                                   stream))
                        else:
                            reader.skip(size)
                for physical in state.physical:
                    reader.read(physical.size, lambda at, view, h=new_handles[physical.handle]:
                                backend.vmm_write(h, at, view))
            finally:
                reader.finish()
        finally:
            backend.stream_destroy(stream)
        undo.pop_all()
    vmm = client.vmm
    with vmm.lock:
        for physical in state.physical:
            table = vmm.released_mapped if physical.released else vmm.handles
            table[physical.handle] = (new_handles[physical.handle], physical.size)
