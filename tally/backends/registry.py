"""Pick and construct a device backend by name (`tally-server --backend`)."""
from __future__ import annotations

import ctypes
import ctypes.util

BACKENDS = ("auto", "cuda", "emulator", "null", "sim")


class BackendUnavailable(Exception):
    pass


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


def resolve_backend(name: str) -> str:
    """The backend `auto` stands for here (cuda with a GPU, else the emulator)."""
    if name == "auto":
        return "cuda" if real_driver_present() else "emulator"
    return name


def make_backend(name: str, device: int = 0, **options):
    name = resolve_backend(name)
    if name == "null":
        from tally.backends.null import NullBackend
        return NullBackend()
    if name == "emulator":
        try:
            from tally.backends.emulator import EmulatorBackend
        except ImportError as e:
            raise BackendUnavailable(f"the emulator backend is not available in this build: {e}") from e
        # Device printf goes to the job that printed it (at its synchronizing calls), not to
        # the server's own stdout.
        return EmulatorBackend(**{"printf_to_stdout": False, **options})
    if name == "sim":
        from tally.backends.sim import SimBackend
        return SimBackend.realtime(**options)
    if name == "cuda":
        if not real_driver_present():
            raise BackendUnavailable(
                "no NVIDIA driver or GPU found (libcuda.so.1 with a device); "
                "use --backend emulator to run on the CPU")
        from tally.backends.cuda import CudaBackend
        return CudaBackend(device, **options)
    raise BackendUnavailable(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
