"""The one interface every device backend implements: cuda, emulator, null, sim.

The server speaks to a backend the way a CUDA program speaks to the driver, in
driver terms (device pointers, streams, events, modules, functions), so the `cuda`
backend is a thin wrapper and the others are drop-in replacements for it, never
`if TESTING:` branches in the server.

Contracts shared by all backends:
- Asynchronous operations (launch, memcpy_*_async, memset_async, event_record,
  stream_wait_event, host_callback) only enqueue; they return at once and run in
  stream order on the device.
- An operation that fails on the device (illegal address, divergent barrier,
  unknown instruction) does not raise where it was enqueued: the error is kept
  on its stream and raised, once, by the next stream_synchronize/stream_query on
  that stream (and by synchronize for any stream). Other streams are unaffected
  unless the backend says otherwise (its traits' `errors_are_context_wide`).
- A backend whose errors are context-wide (a GPU: one fault poisons the context
  every job shares) also has what the server recovers with
  (tally/server/device_faults.py): check_context() raises the context's sticky
  error if it has one; context_lost(error) makes every later call raise `error`
  and every release do nothing (what was made in the context died with it);
  reset_context() replaces the context with a fresh, checked one, or raises
  DeviceError when the device cannot be recovered in this process.
- Calls that fail immediately (bad argument, out of memory) raise DeviceError.
- Every method may be called from any server thread; backends do their own
  locking.
- What differs between backends and matters to the server and the scheduler is
  in their `traits` (BackendTraits): nobody asks a backend its name to decide.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Protocol, runtime_checkable

from tally.protocol.errors import CUDA_ERROR_NOT_SUPPORTED, DeviceError

if TYPE_CHECKING:
    from tally.backends.tensor_maps import TensorMapRequest
    from tally.backends.texture_objects import TextureRequest

@dataclass(frozen=True, kw_only=True)
class BackendTraits:
    """What a backend is and does, as far as the server and the executor care;
    each backend class sets one (`traits`), and they read it instead of asking
    the backend's name or probing for methods."""

    # Which code images it runs: False where only PTX runs (the emulator), so a
    # module needs PTX for the device.
    runs_cubins: bool
    # A device fault poisons every stream of every job (a real GPU's context),
    # not just the stream it happened on: the server then fails every job and
    # recreates the context (tally/server/device_faults.py).
    errors_are_context_wide: bool
    # How long a session thread spins on its job's request ring before sleeping,
    # unless tally-server --spin-us says otherwise: long on a GPU (a synchronous
    # call then costs ~3 us), short where kernels need the cores a spinning thread
    # would take (the CPU-bound backends).
    session_spin_us: float
    # False: launches, copies and memsets complete without doing anything (null).
    executes_work: bool
    # Time is the backend's own (the sim's virtual clock): the executor schedules
    # by the backend's `clock` instead of the wall clock.
    virtual_clock: bool
    # Kernels' printf output is kept per stream for the job that printed it
    # (`take_printf`); otherwise it goes wherever the device puts it.
    printf_per_stream: bool
    # The executor's sliced and PTB kernels come from the PTX passes run on the
    # jobs' modules (tally/backends/ptx_variants.py); False where the backend
    # models them itself (the sim).
    variants_from_ptx: bool
    # The backend confines a launch to at most `sm_cap` SMs (DeviceBackend.launch):
    # green contexts on a GPU, the emulator's worker threads, the sim's SM model.
    # False: the cap is accepted and has no effect (the executor still caps PTB
    # workers to the share, and the policy's priorities still hold).
    confines_sms: bool
    # NVML (nvidia-ml-py) reads this device's metrics (a real GPU): the server samples
    # it for SysProbe and the metrics. False: the server's samples are tally's own
    # accounting of the work it ran (the emulator, the sim, null).
    nvml_metrics: bool = False
    # The backend can give a job's device memory back and later restore it at the
    # same addresses (AddressRestore below): what `tally-server suspend` needs.
    restores_at_address: bool = False
    # ... and moves a job's modules with their globals to another server's backend
    # (module_memory lists them all, module_load_at places them): what migration needs.
    migrates_jobs: bool = False
    # Kernels' device-side malloc/free allocate from a heap per job that the server sizes
    # (cudaLimitMallocHeapSize) and charges to the job (DeviceHeaps below). False: the
    # device keeps its own heap (a GPU's driver), or kernels cannot call malloc at all.
    device_heap_per_job: bool = False


@dataclass(frozen=True)
class DeviceDescription:
    """What a client may ask about the device without a round trip (snapshot
    taken at handshake). `attributes` maps CUdevice_attribute ids to values."""

    name: str
    uuid: bytes                       # 16 bytes
    total_memory: int
    compute_capability: tuple[int, int]
    sm_count: int
    attributes: dict[int, int] = field(default_factory=dict)
    pci_domain: int = 0
    pci_bus: int = 0
    pci_device: int = 0
    driver_version: int = 13000
    # How the device's SMs may be partitioned (green contexts: sm.minSmPartitionSize and
    # sm.smCoscheduledAlignment); 0: CUDA's guideline for the compute capability
    # (tally/backends/sm_partitions.py).
    sm_partition_min: int = 0
    sm_partition_alignment: int = 0


@dataclass(frozen=True)
class KernelParam:
    offset: int
    size: int
    align: int = 1


@dataclass(frozen=True)
class ModuleSource:
    """A module as the server received it, already taken apart by ptx_passes:
    `ptx` text where the image carries PTX, `cubins` by sm arch, and the
    original image bytes for backends that load them whole (cuda)."""

    original: bytes
    ptx: str | None = None
    cubins: dict[int, bytes] = field(default_factory=dict)


class Module(Protocol):
    """Backend handle of a loaded module."""


@runtime_checkable
class Function(Protocol):
    """Backend handle of a kernel. `params` is the parameter layout the client
    uses to serialize kernelParams into one buffer."""

    name: str
    params: tuple[KernelParam, ...]


class FuncAttribute(enum.IntEnum):
    """CUDA's CU_FUNC_ATTRIBUTE_* numbering (cuda.h), the keys of a backend's
    `function_attributes` answer."""

    MAX_THREADS_PER_BLOCK = 0
    SHARED_SIZE_BYTES = 1
    CONST_SIZE_BYTES = 2
    LOCAL_SIZE_BYTES = 3
    NUM_REGS = 4
    PTX_VERSION = 5
    BINARY_VERSION = 6
    CACHE_MODE_CA = 7
    MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
    PREFERRED_SHARED_MEMORY_CARVEOUT = 9
    CLUSTER_SIZE_MUST_BE_SET = 10
    REQUIRED_CLUSTER_WIDTH = 11
    REQUIRED_CLUSTER_HEIGHT = 12
    REQUIRED_CLUSTER_DEPTH = 13
    NON_PORTABLE_CLUSTER_SIZE_ALLOWED = 14
    CLUSTER_SCHEDULING_POLICY_PREFERENCE = 15


class Stream(Protocol):
    """Backend handle of a stream."""


class Event(Protocol):
    """Backend handle of an event."""


Dim3 = tuple[int, int, int]


@dataclass(frozen=True)
class AccessPolicyWindow:
    """A stream's L2 access-policy window (CUaccessPolicyWindow): accesses to
    [base, base + num_bytes) hit the cache with `hit_prop` for `hit_ratio` of the
    window and `miss_prop` for the rest (CUaccessProperty values); num_bytes 0: none."""
    base: int
    num_bytes: int
    hit_ratio: float
    hit_prop: int
    miss_prop: int


@dataclass(frozen=True)
class DataPlaneDevice:
    """How tally's C++ data plane (docs/data-plane.md) issues work on a backend's
    device without Python: the backend's issuer (a tally._core.data_plane.Issuer),
    the native handle of one of its streams, and how to put one of its kernels in a
    job's C++ function table (False: that kernel always goes through Python)."""

    issuer: object
    stream_handle: Callable[[object], int]
    # (the plane's writer, tally/scheduler/plane_owner.py: its add_function or
    # add_emulator_function; function id, backend Function, parameter bytes) -> registered
    register_function: Callable[[object, int, object, int], bool]
    # The native handle the issuer launches a graph executable (DeviceBackend.graph_create's)
    # by, or None where graph replays always go through Python.
    graph_handle: Callable[[object], int | None] = lambda executable: None


class DeviceBackend(Protocol):
    kind: str                        # its name: "cuda" | "emulator" | "null" | "sim" (for people to read)
    traits: BackendTraits

    def describe(self) -> DeviceDescription: ...

    # Where the executor gets the sliced and PTB versions of kernels: a fresh
    # tally.scheduler.variants.VariantProvider (the PTX passes' unless the backend
    # models them). Backends with `traits.virtual_clock` also have `clock`, the
    # tally.scheduler.clock.Clock the executor then schedules by.
    def variant_provider(self) -> object: ...

    # memory
    def mem_alloc(self, nbytes: int) -> int: ...
    def mem_free(self, ptr: int) -> None: ...
    def mem_info(self) -> tuple[int, int]: ...          # (free, total) bytes

    # virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap, ...): address
    # ranges, physical memory and the mappings between them; sizes and offsets are
    # multiples of VMM_GRANULARITY. Backends without it mix in NoVirtualMemory.
    def vmm_reserve(self, nbytes: int, alignment: int, hint: int = 0) -> int:
        """At `hint` where that range is free (and aligned), else anywhere, as CUDA's hint."""
    def vmm_free(self, ptr: int, nbytes: int) -> None: ...
    def vmm_create(self, nbytes: int) -> object: ...    # a physical-memory handle
    def vmm_release(self, handle: object) -> None: ...
    def vmm_map(self, ptr: int, nbytes: int, offset: int, handle: object) -> None: ...
    def vmm_unmap(self, ptr: int, nbytes: int) -> None: ...
    def vmm_set_access(self, ptr: int, nbytes: int, accessible: bool) -> None: ...

    # pinned host memory: the server's mapping of a job's pinned buffer, registered with
    # the device so asynchronous copies to and from it are DMA that does not hold up the
    # calling thread; unregistered once no copy may still use it. Backends whose device
    # is the host mix in NoHostRegistration.
    def host_register(self, view: memoryview) -> None: ...
    def host_unregister(self, view: memoryview) -> None: ...
    # ... and the same pinned memory made reachable by kernels at the job's own address
    # (`fd` is its shared-memory object): True if done, False where the device cannot
    # (the address is taken, or the device cannot reach host memory); copies work either way.
    def host_map(self, address: int, nbytes: int, fd: int) -> bool: ...
    def host_unmap(self, address: int) -> None: ...

    # managed memory (cuMemAllocManaged): the job maps its shared-memory object `fd` at
    # host address `address`; the backend makes [address, address + nbytes) device memory
    # holding the same bytes, so one pointer serves the job's CPU code and its kernels.
    # CUDA_ERROR_ALREADY_MAPPED: those device addresses are taken (the job maps the object
    # elsewhere and asks again). mem_free frees it. Backends without it mix in NoManagedMemory.
    def managed_alloc(self, address: int, nbytes: int, fd: int) -> None: ...

    # modules
    def module_load(self, source: ModuleSource) -> Module: ...
    def module_unload(self, module: Module) -> None: ...
    def module_function(self, module: Module, name: str) -> Function: ...
    def module_global(self, module: Module, name: str) -> tuple[int, int]: ...  # (ptr, size)
    # What the device says of a kernel (cuFuncGetAttribute), by FuncAttribute; the
    # attributes it cannot say are left out (the server fills in the device's limits).
    def function_attributes(self, fn: Function) -> dict[FuncAttribute, int]: ...

    # streams and events
    def stream_create(self, priority: int = 0) -> Stream: ...
    def stream_destroy(self, stream: Stream) -> None: ...
    def event_create(self, timing: bool = True) -> Event: ...
    def event_destroy(self, event: Event) -> None: ...

    # SM confinement: `sm_grant(n)` is the number of SMs a cap of n SMs really gets
    # (on a GPU rounded to the partition size and alignment the driver reports; n
    # clamped to [1, sm_count] elsewhere). The executor asks it when a job's share is
    # set and passes the answer as `sm_cap` on every launch of that job.
    def sm_grant(self, requested_sms: int) -> int: ...

    # asynchronous operations (stream order)
    def launch(self, fn: Function, grid: Dim3, block: Dim3, shared_bytes: int,
               stream: Stream, params: bytes, sm_cap: int | None = None, cluster: Dim3 | None = None,
               cooperative: bool = False) -> None:
        """At most `sm_cap` SMs run this kernel's blocks (None: the whole device);
        backends whose traits do not say `confines_sms` accept and ignore it.
        `cluster`: the thread-block cluster shape the launch asked for (None: none;
        a kernel compiled with one runs with it anyway); tally/backends/clusters.py
        says what is refused, with CUDA_ERROR_INVALID_CLUSTER_SIZE.
        `cooperative`: every block is resident at once and the kernel's grid
        barrier (cooperative groups' grid.sync()) works, as with cuLaunchCooperativeKernel."""
    # A job's graph of kernels, launched whole (tally/backends/graph_launch.py): made
    # once from a graph_launch.KernelGraph, then each replay is one call on a stream,
    # its kernels confined to `sm_cap` SMs as their launches would be.
    def graph_create(self, graph: object) -> object: ...
    def graph_launch(self, graph: object, stream: Stream, sm_cap: int | None = None) -> None: ...
    def graph_destroy(self, graph: object) -> None: ...

    def memcpy_htod_async(self, dst: int, src: memoryview, stream: Stream) -> None:
        """`src` must stay valid until the copy ran (the caller owns it)."""
    def memcpy_dtoh_async(self, dst: memoryview, src: int, stream: Stream) -> None: ...
    def memcpy_dtod_async(self, dst: int, src: int, nbytes: int, stream: Stream) -> None: ...
    def memset_async(self, dst: int, value: int, element_size: int, count: int,
                     stream: Stream) -> None: ...
    def event_record(self, event: Event, stream: Stream) -> None: ...
    def stream_wait_event(self, stream: Stream, event: Event) -> None: ...
    def host_callback(self, stream: Stream, fn: Callable[[], None]) -> None:
        """Run `fn` on a backend thread once the stream reaches this point;
        later work on the stream waits until `fn` returns."""
    # TMA tensor maps (tally/backends/tensor_maps.py): the 128 bytes a kernel's tensor
    # copies read, for the backend's own device addresses; bad input raises
    # DeviceError(CUDA_ERROR_INVALID_VALUE).
    def tensor_map_encode(self, req: TensorMapRequest) -> bytes: ...
    def tensor_map_replace_address(self, tensor_map: bytes, address: int) -> bytes: ...
    # Texture and surface objects (tally/backends/texture_objects.py): the handle a
    # job's kernels name, for a request the server checked (validate); what the
    # backend cannot make raises DeviceError (NOT_SUPPORTED, or the driver's error).
    def texture_create(self, req: TextureRequest) -> int: ...
    def texture_destroy(self, handle: int) -> None: ...
    def stream_set_access_policy(self, stream: Stream, window: AccessPolicyWindow) -> None:
        """The stream's later kernels use this L2 access-policy window (a device
        without an L2 to steer accepts it and changes nothing)."""
    # Stream memory operations (cuStreamWaitValue32/64, cuStreamWriteValue32/64):
    # `width` is 4 or 8 bytes, `condition` one of stream_memory_ops.WAIT_CONDITIONS.
    # A wait either holds this stream only, until the value at `address` meets the
    # condition or stream_release_waits is called (its job is leaving), and returns
    # None; or, where a held stream would hold others (the cuda backend), queues
    # nothing and returns a poll, () -> bool (is the condition met now?), that the
    # executor calls once the stream reached the wait (tally/scheduler/value_polls.py).
    def stream_wait_value(self, stream: Stream, address: int, value: int, width: int,
                          condition: int) -> Callable[[], bool] | None: ...
    def stream_write_value(self, stream: Stream, address: int, value: int, width: int) -> None: ...
    def stream_release_waits(self, stream: Stream) -> None: ...

    # synchronization (raise the stream's pending DeviceError, once)
    def stream_synchronize(self, stream: Stream) -> None: ...
    def stream_query(self, stream: Stream) -> bool: ...  # True when idle
    def event_synchronize(self, event: Event) -> None: ...
    def event_query(self, event: Event) -> bool: ...
    def event_elapsed_ms(self, start: Event, end: Event) -> float: ...
    # When the event's latest record was reached, in seconds of the node's monotonic clock
    # (CLOCK_MONOTONIC, which every process of the node shares), or None where the
    # backend's events keep a clock of their own (a GPU's, the sim's virtual one). It lets
    # a migrated job time an event recorded on its old server against one recorded here.
    def event_host_time(self, event: Event) -> float | None: ...
    def synchronize(self) -> None: ...

    # Backends with `traits.printf_per_stream` also have take_printf(stream) -> str:
    # what the stream's kernels printed since the last call.

    # How the C++ data plane reaches this device, or None where it cannot (every
    # request of a job then runs its Python handler).
    def data_plane(self) -> DataPlaneDevice | None: ...

    def close(self) -> None: ...


class AddressRestore(Protocol):
    """What a backend with `traits.restores_at_address` also has, so a suspended
    job's memory can be freed and come back where the job's raw pointers point
    (tally/server/suspend.py). Contracts: the caller saved the bytes first and no
    work of the job runs meanwhile; a restore that cannot get the same addresses
    raises DeviceError and leaves nothing half made."""

    def mem_evict(self, ptr: int) -> None:
        """Give back an allocation's memory, keeping its address for mem_alloc_at."""
    def mem_alloc_at(self, ptr: int, nbytes: int) -> None:
        """An allocation at exactly ptr (an evicted one's address, or a migrated job's; mem_free
        frees it); CUDA_ERROR_ALREADY_MAPPED when the addresses are taken, CUDA_ERROR_OUT_OF_MEMORY
        when the device is full."""
    def mem_free_evicted(self, ptr: int) -> None:
        """An evicted allocation will not come back (its job left): release what keeps its address."""
    def module_memory(self, module: Module) -> dict[str, tuple[int, int]]:
        """name -> (ptr, size) of the device memory a loaded module holds (its globals)."""
    def module_load_at(self, source: ModuleSource, addresses: dict[str, int]) -> Module:
        """module_load with the named globals at these addresses (a migrated job's module)."""
    def module_unmovable(self, module: Module) -> str | None:
        """Why the module's globals cannot leave the device or be placed elsewhere (they stay
        resident while its job is suspended, and the job cannot migrate), or None: module_memory
        lists them all."""
    def module_evict(self, module: Module) -> None:
        """Free the module's device memory; the module stays loaded (unload frees nothing more)."""
    def module_restore(self, module: Module) -> None:
        """Give an evicted module its memory back at the same addresses (contents: the caller writes them)."""
    def vmm_read(self, handle: object, offset: int, dst: memoryview) -> None:
        """The bytes of physical memory (vmm_create's handle), mapped or not."""
    def vmm_write(self, handle: object, offset: int, src: memoryview) -> None: ...
    def vmm_reserve_at(self, ptr: int, nbytes: int) -> None:
        """A reservation at exactly ptr (a migrated job's: its pointers name it); vmm_free frees it.
        CUDA_ERROR_ALREADY_MAPPED when the addresses are taken."""


class DeviceHeaps(Protocol):
    """What a backend with `traits.device_heap_per_job` also has: the heap that kernels'
    malloc/free allocate from, one per job (tally/server/client/device_heap.py). The server
    creates it (charged to the job) before the first launch of a kernel that needs it and
    attaches it to each of the job's modules whose kernels call malloc or free; dropping the
    last reference to it frees its memory."""

    def heap_create(self, nbytes: int) -> object:
        """A heap of `nbytes` (0: malloc always returns NULL); CUDA_ERROR_OUT_OF_MEMORY when the
        device has no room."""
    def heap_attach(self, module: Module, heap: object) -> None:
        """The module's kernels allocate from `heap` from their next launch on."""
    def function_uses_heap(self, fn: Function) -> bool:
        """The kernel (or a function it calls) calls malloc or free."""


# The allocation granularity of virtual memory management: what CUDA reports for
# current NVIDIA GPUs (cuMemGetAllocationGranularity, minimum and recommended).
VMM_GRANULARITY = 2 << 20


def vmm_granular(nbytes: int) -> int:
    """`nbytes` rounded up to whole VMM_GRANULARITY granules."""
    return -(-nbytes // VMM_GRANULARITY) * VMM_GRANULARITY


def clamp_sm_grant(requested_sms: int, sm_count: int) -> int:
    """sm_grant of a backend without partition granularity: the request, within the device."""
    if requested_sms < 1:
        raise ValueError(f"an SM cap is at least 1 SM, got {requested_sms}")
    return min(int(requested_sms), sm_count)


class NoVirtualMemory:
    """For backends that do not model virtual memory management."""

    def _no_vmm(self, *_args):
        raise DeviceError(CUDA_ERROR_NOT_SUPPORTED,
                          f"the {getattr(self, 'kind', '?')} backend does not support virtual memory management")

    vmm_reserve = vmm_free = vmm_create = vmm_release = vmm_map = vmm_unmap = vmm_set_access = _no_vmm


class NoManagedMemory:
    """For backends that do not model managed memory."""

    def managed_alloc(self, address: int, nbytes: int, fd: int) -> None:
        raise DeviceError(CUDA_ERROR_NOT_SUPPORTED,
                          f"the {getattr(self, 'kind', '?')} backend does not support managed memory")


class NoHostRegistration:
    """For backends whose copies read and write host memory directly: nothing to
    register, and (unless the backend says otherwise) kernels cannot reach it."""

    def host_register(self, view: memoryview) -> None:
        pass

    def host_unregister(self, view: memoryview) -> None:
        pass

    def host_map(self, address: int, nbytes: int, fd: int) -> bool:
        return False

    def host_unmap(self, address: int) -> None:
        pass
