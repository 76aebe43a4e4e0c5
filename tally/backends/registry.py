"""Device backends by name (`tally-server --backend NAME`).

Each backend is imported only when it is made: the cuda backend needs
cuda-bindings, the emulator a build with the C++ interpreter.
"""
from __future__ import annotations

import ctypes
import inspect
from typing import Callable

from tally.backends.base import DeviceBackend


class BackendUnavailable(Exception):
    pass


class BackendOptionsRefused(BackendUnavailable):
    """Options the named backend does not take (e.g. the emulator's device settings
    given to another backend)."""

    def __init__(self, backend: str, options: list[str]):
        super().__init__(f"the {backend} backend takes no option(s) {', '.join(options)}")
        self.backend = backend
        self.options = options


def real_driver_present() -> bool:
    """True when a real NVIDIA driver with at least one device is loadable.

    Our own libcuda.so.1 stand-in may be first on the library path (a server
    started under tally-run); it exports tally_client_version, the real one
    does not."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    if hasattr(lib, "tally_client_version"):
        return False
    try:
        if lib.cuInit(0) != 0:
            return False
        count = ctypes.c_int(0)
        return lib.cuDeviceGetCount(ctypes.byref(count)) == 0 and count.value > 0
    except AttributeError:
        return False


def _cuda(device: int, restorable: bool = False) -> DeviceBackend:
    if not real_driver_present():
        raise BackendUnavailable(
            "no NVIDIA driver or GPU found (libcuda.so.1 with a device); "
            "use --backend emulator to run on the CPU")
    from tally.backends.cuda import CudaBackend
    return CudaBackend(device, restorable=restorable)


def _emulator(device: int, **options) -> DeviceBackend:
    try:
        from tally.backends.emulator import EmulatorBackend
    except ImportError as e:
        raise BackendUnavailable(f"the emulator backend is not available in this build: {e}") from e
    # Device printf goes to the job that printed it (at its synchronizing calls), not to
    # the server's own stdout.
    return EmulatorBackend(**{"printf_to_stdout": False, **options})


def _null(device: int) -> DeviceBackend:
    from tally.backends.null import NullBackend
    return NullBackend()


def _sim(device: int) -> DeviceBackend:
    from tally.backends.sim import SimBackend
    return SimBackend.realtime()


# name -> factory(device, **options); options are what the backend's constructor takes.
BACKENDS: dict[str, Callable[..., DeviceBackend]] = {
    "cuda": _cuda,
    "emulator": _emulator,
    "null": _null,
    "sim": _sim,
}
CHOICES = ("auto", *BACKENDS)


def resolve_backend(name: str) -> str:
    """The backend `auto` stands for here (cuda with a GPU, else the emulator)."""
    if name == "auto":
        return "cuda" if real_driver_present() else "emulator"
    return name


def make_backend(name: str, device: int = 0, **options) -> DeviceBackend:
    name = resolve_backend(name)
    factory = BACKENDS.get(name)
    if factory is None:
        raise BackendUnavailable(f"unknown backend {name!r}; choose one of {', '.join(CHOICES)}")
    try:
        inspect.signature(factory).bind(device, **options)
    except TypeError:
        raise BackendOptionsRefused(name, sorted(options)) from None
    return factory(device, **options)
