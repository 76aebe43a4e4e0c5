"""What one client has created through the driver API, and the checks every
handler needs (pointer ownership, ids that name the client's own objects).

One DriverState per session, made on the session's first driver request and
released by the session's cleanup (before the executor drops the client's
streams, so nothing it holds waits on a client that is gone).
"""
from __future__ import annotations

import threading

from tally.protocol import Priority
from tally.protocol.errors import CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.server.client.blocking import BlockingCalls
from tally.server.client.host_functions import HostFunctions
from tally.server.client.host_memory import PinnedRegions
from tally.server.client.modules import ModuleRegistry
from tally.server.client.streams import StreamTable
from tally.server.client.virtual_memory import VirtualMemory

_create_lock = threading.Lock()


class DriverState:
    def __init__(self, session):
        self.session = session
        self.executor = session.server.executor
        self.backend = session.backend
        self.client_id = session.client_id
        self.blocking = BlockingCalls(session)
        self.streams = StreamTable(self.executor, session.client_id)
        # Only best-effort jobs' kernels are transformed: high-priority ones always run whole.
        transform = session.priority == Priority.BEST_EFFORT
        self.modules = ModuleRegistry(session.backend, session.server.variants if transform else None)
        self.regions = PinnedRegions(session.pid, session.backend)
        self.host_functions = HostFunctions(session)
        self.events: dict[int, object] = {}        # client event id -> ExecutorEvent
        self.staging = bytearray()                  # StageBytes accumulates module images here
        self.links: dict[int, object] = {}          # client link-state id -> linker.LinkState (cuLink*)
        self.download_lock = threading.Lock()       # download-arena reservation + reply, in one order
        self.output_lock = threading.Lock()
        self.kept_output: list[str] = []            # printf output of destroyed streams, for the next sync
        self.vmm = VirtualMemory(session)           # reservations, physical handles, mappings
        self.imports: dict[int, int] = {}           # other jobs' allocations opened here: base -> bytes
        self.imported_events: set[int] = set()      # client event ids naming another job's event

    def close(self) -> None:
        # First free everything that may wait on the gone client (held host functions,
        # pending blocking calls), then let the executor finish or stop the client's
        # work on the device, and only then free what that work may still touch:
        # pinned regions, events, modules (their globals).
        self.host_functions.release_all()
        self.blocking.close()
        self.session.server.retire_client(self.client_id)
        self.regions.clear()
        self.vmm.clear()
        self._close_imports()
        for event_id, event in self.events.items():
            if event_id not in self.imported_events:    # another job's: theirs to destroy
                self.executor.event_destroy(event)
        self.events.clear()
        self.session.server.ipc.forget_events_of(self.client_id)
        self.modules.clear()

    def _close_imports(self) -> None:
        ipc = self.session.server.ipc
        for base, times in ipc.opened_by(self.client_id):
            for _ in range(times):
                if ipc.close_memory(self.client_id, base):
                    self.backend.mem_free(base)
        self.imports.clear()

    # ---- checks ------------------------------------------------------------------------

    def check_device_range(self, ptr: int, nbytes: int, what: str) -> None:
        """INVALID_VALUE unless [ptr, ptr+nbytes) is this client's memory: one of
        its allocations, a global variable of one of its modules, accessible
        mapped virtual memory, or another job's allocation it opened (IPC)."""
        if self.session.allocations.find(ptr) is not None:
            self.session.allocations.check_range(ptr, nbytes, what)
            return
        if not self.modules.global_contains(ptr, nbytes) and not self.vmm.contains(ptr, nbytes) \
                and not self._imported(ptr, nbytes):
            raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                              f"{what} 0x{ptr:x}+{nbytes} is not memory this client owns")

    def _imported(self, ptr: int, nbytes: int) -> bool:
        return any(base <= ptr and ptr + nbytes <= base + size for base, size in self.imports.items())

    def check_new_event_id(self, event_id: int) -> None:
        if event_id in self.events:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"event id {event_id} already exists")

    def event(self, event_id: int):
        try:
            return self.events[event_id]
        except KeyError:
            raise DeviceError(CUDA_ERROR_INVALID_HANDLE,
                              f"event {event_id} was never created or is destroyed") from None


def driver_state(session) -> DriverState:
    state = session.__dict__.get("driver_state")
    if state is None:
        with _create_lock:
            state = session.__dict__.get("driver_state")
            if state is None:
                state = DriverState(session)
                session.driver_state = state
                session.add_cleanup(state.close)
    return state
