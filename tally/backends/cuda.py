"""The `cuda` device: the real driver through cuda-bindings.

One primary context per GPU, shared by every client (so tally's scheduler, not
the driver's time-slicing, decides who runs). Each server thread makes the
context current before calling the driver. Client streams map to driver
streams created with the priority the scheduler asks for.

On a real GPU a device fault (illegal address...) is sticky for the whole
context: every stream of every client sees it. The traits'
`errors_are_context_wide` tell the server so, and the backend gives the server
what it needs to recover (tally/server/device_faults.py): `check_context` (is the
context faulted?), `context_lost` (from now on no call reaches the driver; the
releases of what died with it do nothing) and `reset_context` (a fresh context,
checked: cuda_context.py).

A launch with an SM cap runs in a green context of that many SMs
(green_partitions.py). Where green contexts are unavailable (a driver before
CUDA 12.4, a MIG instance) the backend says so once in the log and its traits
say `confines_sms` False: the executor then caps PTB workers and relies on
priority, and whole kernels may use every SM.
"""
from __future__ import annotations

import ctypes
import dataclasses
import logging
import threading
from dataclasses import dataclass
from typing import Callable

from tally.backends.base import (BackendTraits, DataPlaneDevice, DeviceDescription, FuncAttribute, KernelParam,
                                 ModuleSource, clamp_sm_grant)
from tally.backends.cuda_clusters import allow_cluster, cluster_launch_config
from tally.backends.cuda_globals import ModuleStorage, relocation_of
from tally.backends.cuda_graphs import CudaGraphs
from tally.backends.cuda_launch_params import LaunchExtra
from tally.backends.cuda_restore import CudaAddressRestore
from tally.backends.cuda_context import CudaContext
from tally.backends.cuda_host_memory import CudaHostMemory, host_address
from tally.backends.cuda_value_waits import CudaValueWaits
from tally.backends.cuda_tensor_maps import CudaTensorMaps
from tally.backends.cuda_textures import CudaTextureObjects
from tally.backends.cuda_vmm import CudaVirtualMemory
from tally.backends.green_partitions import GreenPartitions
from tally.backends.ptx_variants import PtxVariants
from tally.protocol.errors import (
    CUDA_ERROR_ALREADY_MAPPED,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_NOT_READY,
    CUDA_ERROR_NOT_SUPPORTED,
    CUDA_ERROR_OUT_OF_MEMORY,
    DeviceError,
)

try:
    from cuda.bindings import driver as cu
except ImportError as e:  # pragma: no cover - depends on the installation
    raise ImportError("the cuda backend needs cuda-bindings: pip install 'tally[cuda]'") from e


def _cooperative_config(grid, block, shared_bytes: int, stream, cluster) -> "cu.CUlaunchConfig":
    """cuLaunchKernelEx's configuration of a cooperative launch (with its cluster, if any)."""
    attr = cu.CUlaunchAttribute()
    attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
    attr.value.cooperative = 1
    if cluster is not None:
        config = cluster_launch_config(grid, block, shared_bytes, stream, cluster)
        config.attrs = [*config.attrs, attr]
        config.numAttrs = len(config.attrs)
        return config
    config = cu.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = shared_bytes
    config.hStream = stream
    config.attrs = [attr]
    config.numAttrs = 1
    return config


_ATTRIBUTE_MAX = 148  # CU_DEVICE_ATTRIBUTE_MAX in CUDA 13.0

_HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)


log = logging.getLogger("tally.backends.cuda")


def _check(result):
    """cuda-bindings returns (CUresult, *values); raise on failure, return the values."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != cu.CUresult.CUDA_SUCCESS:
        _, name = cu.cuGetErrorName(err)
        _, text = cu.cuGetErrorString(err)
        raise DeviceError(int(err), f"{name.decode() if name else err}: {text.decode() if text else ''}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


@dataclass
class CudaFunction:
    name: str
    handle: object
    params: tuple[KernelParam, ...]
    # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES before the backend opened it to
    # the device's limit: what the job is told until it opts in itself.
    default_dynamic_shared: int | None = None


def _open_dynamic_shared(function, device) -> int | None:
    """Let every launch of `function` use up to the device's opt-in shared memory per
    block; answer the limit the driver had before. A job's cuFuncSetAttribute stays in
    its client, which checks each launch against the job's own opt-in, so the driver
    never hears it: without this, a launch over the default 48 KiB (cuDNN's and
    cuBLAS's kernels, found on the first GPU run) failed in the driver with
    CUDA_ERROR_INVALID_VALUE. The limit changes no launch's occupancy."""
    err, before = cu.cuFuncGetAttribute(
        cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, function)
    if err != cu.CUresult.CUDA_SUCCESS:
        return None
    err, static = cu.cuFuncGetAttribute(cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, function)
    err2, optin = cu.cuDeviceGetAttribute(
        cu.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device)
    if err == cu.CUresult.CUDA_SUCCESS and err2 == cu.CUresult.CUDA_SUCCESS and optin - static > before:
        cu.cuFuncSetAttribute(function, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                              optin - static)
    return int(before)


@dataclass
class CudaModule:
    handle: object
    image: bytes   # the driver reads the image during load only, but keep it for reloads
    # --suspendable: its variables at addresses the backend placed (cuda_globals.py), or
    # why they stay where the driver put them (then the job cannot migrate)
    storage: ModuleStorage | None = None
    pinned: str | None = None


class CudaBackend(CudaAddressRestore, CudaHostMemory, CudaVirtualMemory, CudaTensorMaps, CudaTextureObjects, CudaGraphs,
                  PtxVariants):
    kind = "cuda"
    traits = BackendTraits(runs_cubins=True, errors_are_context_wide=True, session_spin_us=1000.0,
                           executes_work=True, virtual_clock=False, printf_per_stream=False,
                           variants_from_ptx=True, confines_sms=True,    # where green contexts work: see __init__
                           nvml_metrics=True)

    _check = staticmethod(_check)

    def __init__(self, device: int = 0, restorable: bool = False):
        """restorable: back job allocations with reservations so jobs can be suspended
        (tally/backends/cuda_restore.py; tally-server --suspendable)."""
        _check(cu.cuInit(0))
        self._context = CudaContext(device, _check)
        self._issuer = None             # the C++ data plane's (data_plane()), told of a new context
        self._device = self._context.device
        # host functions by key: (ctypes thunk, callback, context generation it belongs to)
        self._callbacks: dict[int, tuple[object, Callable[[], None], int]] = {}
        self._callbacks_lock = threading.Lock()
        self._next_callback = 1
        self._value_waits = CudaValueWaits(cu, _check, self._current)   # stream writes; waits the server polls
        self._description: DeviceDescription | None = None
        self._init_host_memory()
        self._current()
        self._partitions = self._open_partitions()
        self._probe = None                     # an idle stream whose query tells a faulted context
        # host memory registered in a context that faulted, unregistered (and unmapped) once
        # a new context exists: freed at once, the same addresses could come back and be
        # refused as registered already where the driver keeps the registration
        self._after_reset: list[Callable[[], None]] = []
        self._init_restore(restorable)
        if restorable:
            self.traits = dataclasses.replace(self.traits, restores_at_address=True, migrates_jobs=True)

    def _open_partitions(self) -> GreenPartitions | None:
        name = _check(cu.cuDeviceGetName(256, self._device)).split(b"\0", 1)[0].decode()
        partitions, why_not = GreenPartitions.open(self._device, name, _check(cu.cuDriverGetVersion()), _check)
        if partitions is None:
            self.traits = dataclasses.replace(type(self).traits, confines_sms=False)
            log.warning("SM shares cannot use green contexts: %s. Falling back to PTB worker caps plus "
                        "priority: kernels that run whole may use every SM", why_not)
        else:
            log.info("SM shares use green contexts: partitions of at least %d SMs in multiples of %d, of %d",
                     partitions.rules.minimum, partitions.rules.alignment, partitions.sm_count)
        return partitions

    def _current(self) -> None:
        self._context.bind()

    @property
    def _lost(self) -> bool:
        """The context died with a fault: what was made in it is gone, and releasing
        it has nothing to do (and no call may reach the driver with its handles)."""
        return self._context.lost is not None

    # device faults (tally/server/device_faults.py)
    def check_context(self) -> None:
        """Raise the context's sticky error, if a fault left one: on a GPU every call
        returns it, a query of an idle stream included."""
        self._current()
        if self._probe is None:
            self._probe = _check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
        _check((cu.cuStreamQuery(self._probe)[0],))

    def context_lost(self, error) -> None:
        """Until reset_context: every call raises `error`, releases do nothing."""
        self._context.lose(error)

    def reset_context(self) -> None:
        """A fresh context for the faulted one (everything made before is gone),
        checked to work; raises DeviceError when the device cannot be recovered in
        this process."""
        if self._partitions is not None:
            self._partitions.close()    # their green contexts and streams; fails quietly on a faulted device
        self._probe = None
        self._value_waits.context_gone()   # its reading stream was the faulted context's
        self._backed.clear()            # reservations of the faulted context are gone with it
        self._context.recreate()
        if self._issuer is not None:    # the C++ data plane issues on the new context too
            self._issuer.set_context(int(self._context.handle))
        self._partitions = self._open_partitions()
        releases, self._after_reset = self._after_reset, []
        for release in releases:
            release()

    def describe(self) -> DeviceDescription:
        # ~150 driver calls; the answer never changes, and callers ask often.
        if self._description is None:
            self._description = self._query_description()
        return self._description

    def _query_description(self) -> DeviceDescription:
        self._current()
        name = _check(cu.cuDeviceGetName(256, self._device)).split(b"\0", 1)[0].decode()
        uuid = bytes(_check(cu.cuDeviceGetUuid(self._device)).bytes)
        attributes = {}
        for attr in range(1, _ATTRIBUTE_MAX):
            try:
                attributes[attr] = _check(cu.cuDeviceGetAttribute(cu.CUdevice_attribute(attr), self._device))
            except (DeviceError, ValueError):
                continue
        rules = self._partitions.rules if self._partitions is not None else None
        return DeviceDescription(
            name=name, uuid=uuid, total_memory=_check(cu.cuDeviceTotalMem(self._device)),
            compute_capability=(attributes.get(75, 0), attributes.get(76, 0)), sm_count=attributes.get(16, 0),
            attributes=attributes, pci_domain=attributes.get(50, 0), pci_bus=attributes.get(33, 0),
            pci_device=attributes.get(34, 0), driver_version=_check(cu.cuDriverGetVersion()),
            sm_partition_min=rules.minimum if rules else 0, sm_partition_alignment=rules.alignment if rules else 0)

    # memory
    def mem_alloc(self, nbytes: int) -> int:
        self._current()
        if self._restorable:
            return self._backed_alloc(nbytes)
        return int(_check(cu.cuMemAlloc(nbytes)))

    def mem_free(self, ptr: int) -> None:
        size = self._managed.pop(ptr, None)
        if size is not None:        # the server's own mapping of the job's object
            self._unmap_registered(ptr, size)
            return
        if self._lost:
            self._backed.pop(ptr, None)     # its reservation went with the context
            return
        self._current()
        if not self._backed_free(ptr):
            _check(cu.cuMemFree(ptr))

    def mem_info(self) -> tuple[int, int]:
        self._current()
        free, total = _check(cu.cuMemGetInfo())
        return int(free), int(total)

    # modules
    def module_load(self, source: ModuleSource) -> CudaModule:
        self._current()
        if not self._restorable:
            return self._load_as_is(source)
        relocated, pinned = relocation_of(source)
        if relocated is not None:
            try:
                handle, storage = self._load_relocated(relocated, None)
                return CudaModule(handle, relocated.ptx.encode(), storage)
            except DeviceError as e:
                if e.code in (CUDA_ERROR_OUT_OF_MEMORY, CUDA_ERROR_ALREADY_MAPPED):
                    raise
                # a bug of the pass, or PTX this driver compiles only as the job shipped it
                pinned = f"the driver did not load its relocated PTX ({e})"
                log.warning("loading a module as the job shipped it: %s", pinned)
        module = self._load_as_is(source)
        module.pinned = pinned
        if pinned is not None:
            log.info("a module's variables stay where the driver put them (resident while its job is suspended, "
                     "and the job cannot migrate): %s", pinned)
        return module

    def module_load_at(self, source: ModuleSource, addresses: dict[str, int]) -> CudaModule:
        """A migrated job's module: its variables at the addresses they had on the source."""
        self._current()
        relocated, pinned = relocation_of(source)
        if relocated is None:
            if addresses:
                raise DeviceError(CUDA_ERROR_NOT_SUPPORTED, f"this server cannot place the module's variables at "
                                                            f"their addresses: {pinned}")
            module = self._load_as_is(source)
            module.pinned = pinned
            return module
        handle, storage = self._load_relocated(relocated, addresses)
        return CudaModule(handle, relocated.ptx.encode(), storage)

    def _load_as_is(self, source: ModuleSource) -> CudaModule:
        image = source.original if source.original else (source.ptx or "").encode() + b"\0"
        return CudaModule(_check(cu.cuModuleLoadData(image)), image)

    def module_unload(self, module: CudaModule) -> None:
        if self._lost:
            for base, _size in module.storage.ranges if module.storage is not None else ():
                self._backed.pop(base, None)      # its reservation went with the context
            return
        self._current()
        _check(cu.cuModuleUnload(module.handle))
        if module.storage is not None:
            self._free_storage(module.storage)

    def module_function(self, module: CudaModule, name: str) -> CudaFunction:
        self._current()
        handle = _check(cu.cuModuleGetFunction(module.handle, name.encode()))
        params = []
        for index in range(4096):
            err, offset, size = cu.cuFuncGetParamInfo(handle, index)
            if err != cu.CUresult.CUDA_SUCCESS:
                break
            params.append(KernelParam(int(offset), int(size)))
        return CudaFunction(name, handle, tuple(params), _open_dynamic_shared(handle, self._device))

    def function_attributes(self, fn: CudaFunction) -> dict[FuncAttribute, int]:
        """Every CU_FUNC_ATTRIBUTE_* the driver answers for the kernel (its cubin, or
        the code it JIT-compiled from PTX)."""
        self._current()
        out = {}
        for attribute in FuncAttribute:
            err, value = cu.cuFuncGetAttribute(cu.CUfunction_attribute(int(attribute)), fn.handle)
            if err == cu.CUresult.CUDA_SUCCESS:
                out[attribute] = int(value)
        if fn.default_dynamic_shared is not None:
            out[FuncAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES] = fn.default_dynamic_shared
        return out

    def module_global(self, module: CudaModule, name: str) -> tuple[int, int]:
        if module.storage is not None and name in module.storage.variables:
            return module.storage.variables[name]
        self._current()
        ptr, size = _check(cu.cuModuleGetGlobal(module.handle, name.encode()))
        return int(ptr), int(size)

    # streams and events
    def stream_create(self, priority: int = 0):
        self._current()
        return _check(cu.cuStreamCreateWithPriority(cu.CUstream_flags.CU_STREAM_NON_BLOCKING, priority))

    def stream_destroy(self, stream) -> None:
        if self._lost:
            return
        self._current()
        if self._partitions is not None:
            self._partitions.forget_stream(stream)
        _check(cu.cuStreamDestroy(stream))

    def event_create(self, timing: bool = True):
        self._current()
        flags = cu.CUevent_flags.CU_EVENT_DEFAULT if timing else cu.CUevent_flags.CU_EVENT_DISABLE_TIMING
        return _check(cu.cuEventCreate(flags))

    def event_destroy(self, event) -> None:
        if self._lost:
            return
        self._current()
        _check(cu.cuEventDestroy(event))

    # asynchronous operations
    def launch(self, fn: CudaFunction, grid, block, shared_bytes, stream, params: bytes,
               sm_cap: int | None = None, cluster=None, cooperative: bool = False) -> None:
        self._current()
        extra = LaunchExtra(params)

        def launch_on(s) -> None:
            # The driver copies the parameter buffer before cuLaunchKernel returns.
            if cooperative:
                # cuLaunchCooperativeKernel takes no `extra`; cuLaunchKernelEx does.
                if cluster is not None:
                    _check(allow_cluster(fn.handle, cluster))
                _check(cu.cuLaunchKernelEx(_cooperative_config(grid, block, shared_bytes, s, cluster), fn.handle, 0,
                                           extra.address))
            elif cluster is None:
                _check(cu.cuLaunchKernel(fn.handle, *grid, *block, shared_bytes, s, 0, extra.address))
            else:   # the driver checks the shape against the kernel and the device itself
                _check(allow_cluster(fn.handle, cluster))
                _check(cu.cuLaunchKernelEx(cluster_launch_config(grid, block, shared_bytes, s, cluster),
                                           fn.handle, 0, extra.address))

        if sm_cap is None or self._partitions is None:
            launch_on(stream)
        else:
            self._partitions.launch(stream, sm_cap, launch_on)

    def sm_grant(self, requested_sms: int) -> int:
        if self._partitions is not None:
            return self._partitions.grant(requested_sms)
        return clamp_sm_grant(requested_sms, self.describe().sm_count)

    def memcpy_htod_async(self, dst: int, src: memoryview, stream) -> None:
        self._current()
        _check(cu.cuMemcpyHtoDAsync(dst, host_address(src), len(src), stream))

    def memcpy_dtoh_async(self, dst: memoryview, src: int, stream) -> None:
        self._current()
        _check(cu.cuMemcpyDtoHAsync(host_address(dst), src, len(dst), stream))

    def memcpy_dtod_async(self, dst: int, src: int, nbytes: int, stream) -> None:
        self._current()
        _check(cu.cuMemcpyDtoDAsync(dst, src, nbytes, stream))

    def memset_async(self, dst: int, value: int, element_size: int, count: int, stream) -> None:
        self._current()
        setters = {1: cu.cuMemsetD8Async, 2: cu.cuMemsetD16Async, 4: cu.cuMemsetD32Async}
        if element_size not in setters:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"memset element size {element_size} (1, 2 or 4)")
        _check(setters[element_size](dst, value, count, stream))

    def event_record(self, event, stream) -> None:
        self._current()
        _check(cu.cuEventRecord(event, stream))

    def stream_wait_event(self, stream, event) -> None:
        self._current()
        _check(cu.cuStreamWaitEvent(stream, event, 0))

    def stream_set_access_policy(self, stream, window) -> None:
        self._current()
        value = cu.CUstreamAttrValue()
        w = value.accessPolicyWindow
        w.base_ptr, w.num_bytes, w.hitRatio = window.base, window.num_bytes, window.hit_ratio
        w.hitProp, w.missProp = cu.CUaccessProperty(window.hit_prop), cu.CUaccessProperty(window.miss_prop)
        _check(cu.cuStreamSetAttribute(stream, cu.CUstreamAttrID.CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW, value))

    def stream_wait_value(self, stream, address: int, value: int, width: int, condition: int):
        return self._value_waits.poll(address, value, width, condition)   # the server polls (cuda_value_waits.py)

    def stream_write_value(self, stream, address: int, value: int, width: int) -> None:
        self._current()
        self._value_waits.write(stream, address, value, width)

    def stream_release_waits(self, stream) -> None:
        pass    # no device stream ever holds on a value here

    def host_callback(self, stream, fn: Callable[[], None]) -> None:
        self._current()
        with self._callbacks_lock:
            key = self._next_callback
            self._next_callback += 1

        def trampoline(_user_data):
            with self._callbacks_lock:
                _thunk, callback, generation = self._callbacks.pop(key)
            if generation == self._context.generation:
                callback()        # else: work of a context that died with a fault, which nobody waits for

        thunk = _HOST_FN(trampoline)
        with self._callbacks_lock:
            # the ctypes thunk stays alive until the driver called it; a GPU never calls
            # those of a faulted context, and they stay (a few, once per fault)
            self._callbacks[key] = (thunk, fn, self._context.generation)
        _check(cu.cuLaunchHostFunc(stream, cu.CUhostFn(ctypes.cast(thunk, ctypes.c_void_p).value), 0))

    # synchronization
    def stream_synchronize(self, stream) -> None:
        self._current()
        _check(cu.cuStreamSynchronize(stream))

    def stream_query(self, stream) -> bool:
        self._current()
        err = cu.cuStreamQuery(stream)[0]
        if err == cu.CUresult.CUDA_ERROR_NOT_READY:
            return False
        _check((err,))
        return True

    def event_synchronize(self, event) -> None:
        self._current()
        _check(cu.cuEventSynchronize(event))

    def event_query(self, event) -> bool:
        self._current()
        err = cu.cuEventQuery(event)[0]
        if int(err) == CUDA_ERROR_NOT_READY:
            return False
        _check((err,))
        return True

    def event_elapsed_ms(self, start, end) -> float:
        self._current()
        return float(_check(cu.cuEventElapsedTime(start, end)))

    def event_host_time(self, event) -> float | None:
        return None             # a GPU stamps events with its own clock, which no other context reads

    def synchronize(self) -> None:
        self._current()
        _check(cu.cuCtxSynchronize())

    def data_plane(self) -> DataPlaneDevice:
        # The same driver library and context as every call above (csrc/src/cuda/data_plane_issuer.cpp).
        from tally._core import data_plane

        def register(table, function_id: int, fn: CudaFunction, param_bytes: int) -> bool:
            table.add_function(function_id, param_bytes, int(fn.handle))
            return True

        self._issuer = data_plane.CudaIssuer(int(self._context.handle))
        return DataPlaneDevice(self._issuer, lambda stream: int(stream), register,
                               lambda executable: int(executable.exec))      # a CudaGraph's CUgraphExec

    def close(self) -> None:
        try:
            if not self._lost:
                self._current()
                cu.cuCtxSynchronize()
            if self._partitions is not None:
                self._partitions.close()
        finally:
            self._context.release()
