"""Everything one job has created through the driver API, and the checks every
handler needs (pointer ownership, ids that name the job's own objects).

Its Session makes one ClientState when the job attaches and closes it when the
job goes, before the session's other cleanups: first what may wait on the gone
job, then its work on the device, and only then what that work may still touch.
"""
from __future__ import annotations

import logging
import threading

from tally.cluster.memory_limits import JobMemory
from tally.protocol import Priority
from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.server.client.blocking import BlockingCalls
from tally.server.client.device_heap import JobDeviceHeap
from tally.server.client.events import EventTable
from tally.server.client.graphs import JobGraphs
from tally.server.client.host_functions import HostFunctions
from tally.server.client.host_memory import PinnedRegions
from tally.server.client.job_channel import JobChannel
from tally.server.client.ipc import OpenedAllocations
from tally.server.client.linker import LinkState
from tally.server.client.managed_objects import ManagedObjects
from tally.server.client.memory import Allocations
from tally.server.client.modules import ModuleRegistry
from tally.server.client.streams import StreamTable
from tally.server.client.textures import TextureObjects
from tally.server.client.virtual_memory import VirtualMemory

log = logging.getLogger("tally.server")


class ClientState:
    def __init__(self, job: JobChannel, memory: JobMemory):
        services = job.services
        self.job = job
        self.executor = services.executor
        self.backend = services.backend
        self.client_id = job.client_id
        # What the job's C++ data plane must know of this state (None: the Python plane).
        self.fast = fast = job.fast
        self.allocations = Allocations(memory, fast)
        self.managed = ManagedObjects()             # its managed allocations (cuMemAllocManaged) and their objects
        # what its kernels' malloc/free allocate from
        self.device_heap = JobDeviceHeap(services.backend, self.allocations,
                                         services.backend.traits.device_heap_per_job)
        self.blocking = BlockingCalls(job)
        self.streams = StreamTable(self.executor, job.client_id, fast)
        # Only best-effort jobs' kernels are transformed: high-priority ones always run whole.
        transform = job.priority == Priority.BEST_EFFORT
        self.modules = ModuleRegistry(services.backend, services.variants if transform else None,
                                      on_forget=fast.forget_functions if fast is not None else None)
        self.regions = PinnedRegions(job.pid, services.backend)
        self.host_functions = HostFunctions(job)
        self.events = EventTable(self.executor, job.client_id)
        self.textures = TextureObjects(services.backend)   # its texture and surface objects
        self.staging = bytearray()                  # StageBytes accumulates module images here
        self.links: dict[int, LinkState] = {}       # client link-state id -> its inputs (cuLink*)
        self.graphs = JobGraphs()                   # its instantiated CUDA graphs (GraphDefine)
        self.download_lock = threading.Lock()       # download-arena reservation + reply, in one order
        self.output_lock = threading.Lock()
        self.kept_output: list[str] = []            # printf output of destroyed streams, for the next sync
        self.vmm = VirtualMemory(services.backend, self.allocations, services.description.total_memory,
                                 services.ipc.physical, job.client_id)
        self.opened = OpenedAllocations(services.ipc, job.client_id, services.backend)
        self._ipc = services.ipc
        self._retire = services.retire_client

    def close(self) -> None:
        # First free everything that may wait on the gone client (held host functions,
        # pending blocking calls), then let the executor finish or stop the client's
        # work on the device, and only then free what that work may still touch:
        # pinned regions, events, modules (their globals), memory.
        self.host_functions.release_all()
        self.blocking.close()
        self._retire(self.client_id)
        self.blocking.run_owed()       # frees, unmaps and unloads asked for but not done yet
        self.regions.clear()
        self.vmm.clear()
        self.opened.clear()
        self.events.clear()
        self.graphs.clear()
        self.textures.clear()
        self._ipc.forget_events_of(self.client_id)
        self.modules.clear()
        self.device_heap.close()
        for ptr, _size in self.allocations.clear():
            try:
                self.free_allocation(ptr)
            except DeviceError as e:
                log.warning("client %d: freeing 0x%x failed: %s", self.client_id, ptr, e)
        self.managed.clear()

    def free_allocation(self, ptr: int) -> None:
        """Free device memory this client no longer owns, unless another job opened
        it (IPC): then the last of them to close it frees it."""
        if self._ipc.owner_frees(self.client_id, ptr):
            self.backend.mem_free(ptr)

    def take_allocation(self, ptr: int) -> int:
        """Forget the allocation at ptr (so no later request may name it); its size."""
        found = self.allocations.find(ptr)
        if found is None or found[0] != ptr:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                              f"0x{ptr:x} is not the start of an allocation of this client")
        self.managed.discard(ptr)
        return self.allocations.remove(ptr)

    # ---- checks ------------------------------------------------------------------------

    def check_device_range(self, ptr: int, nbytes: int, what: str) -> bool:
        """INVALID_VALUE unless [ptr, ptr+nbytes) is this client's memory: one of
        its allocations, a global variable of one of its modules, accessible
        mapped virtual memory, another job's allocation it opened (IPC), or its
        pinned host memory where the device reaches it (the device pointer of mapped
        pinned memory: memsets and copies on it, as on a GPU). True for the latter:
        host memory, which a synchronous memset or copy into must finish before it
        is answered."""
        if self.allocations.find(ptr) is not None:
            self.allocations.check_range(ptr, nbytes, what)
            return False
        if self.modules.global_contains(ptr, nbytes) or self.vmm.contains(ptr, nbytes) \
                or self.opened.contains(ptr, nbytes):
            return False
        region = self.regions.holding(ptr, nbytes)
        if region is not None and region.device_address is not None:
            return True
        if region is not None:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                              f"{what} 0x{ptr:x}+{nbytes} is pinned host memory the device cannot reach on this "
                              f"backend (its address is taken on the device, or the device has no access to host "
                              f"memory): copy to and from it as host memory instead")
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{what} 0x{ptr:x}+{nbytes} is not memory this client owns")
