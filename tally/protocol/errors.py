"""CUDA error codes (CUresult, as cuda.h numbers them) and the exception that carries
one: what every layer, from a backend to a handler, raises when a call fails the way
a driver call would. The job sees exactly this code. And ProtocolError: a record
that breaks the protocol itself.
"""
from __future__ import annotations

# CUresult values the server and backends use by name (cuda.h).
CUDA_SUCCESS = 0
CUDA_ERROR_INVALID_VALUE = 1
CUDA_ERROR_OUT_OF_MEMORY = 2
CUDA_ERROR_NOT_INITIALIZED = 3
CUDA_ERROR_DEVICE_UNAVAILABLE = 46
CUDA_ERROR_INVALID_IMAGE = 200
CUDA_ERROR_ALREADY_MAPPED = 208
CUDA_ERROR_INVALID_CONTEXT = 201
CUDA_ERROR_NO_BINARY_FOR_GPU = 209
CUDA_ERROR_UNSUPPORTED_LIMIT = 215
CUDA_ERROR_INVALID_PTX = 218
CUDA_ERROR_UNSUPPORTED_PTX_VERSION = 222
CUDA_ERROR_CONTAINED = 226
CUDA_ERROR_INVALID_SOURCE = 300
CUDA_ERROR_INVALID_HANDLE = 400
CUDA_ERROR_NOT_FOUND = 500
CUDA_ERROR_NOT_READY = 600
CUDA_ERROR_ILLEGAL_ADDRESS = 700
CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES = 701
CUDA_ERROR_LAUNCH_TIMEOUT = 702
CUDA_ERROR_ASSERT = 710
CUDA_ERROR_HARDWARE_STACK_ERROR = 714
CUDA_ERROR_ILLEGAL_INSTRUCTION = 715
CUDA_ERROR_MISALIGNED_ADDRESS = 716
CUDA_ERROR_INVALID_ADDRESS_SPACE = 717
CUDA_ERROR_INVALID_PC = 718
CUDA_ERROR_LAUNCH_FAILED = 719
CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE = 720
CUDA_ERROR_TENSOR_MEMORY_LEAK = 721
CUDA_ERROR_NOT_SUPPORTED = 801
CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION = 915
CUDA_ERROR_EXTERNAL_DEVICE = 911
CUDA_ERROR_INVALID_CLUSTER_SIZE = 912
CUDA_ERROR_UNKNOWN = 999

# The errors after which a context is unusable: every later call in it returns the
# same error until it is destroyed (CUDA's "sticky" errors). cuda.h says so of each:
# "This leaves the process in an inconsistent state and any further CUDA work will
# return the same error" (700, 702, 714-719, 721, 226, 911), and for 710 "The
# context cannot be used anymore, and must be destroyed". The client library keeps
# the same list (client_preload/src/connection/context_faults.h).
CONTEXT_FAULT_CODES = frozenset({
    CUDA_ERROR_CONTAINED, CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_ERROR_LAUNCH_TIMEOUT, CUDA_ERROR_ASSERT,
    CUDA_ERROR_HARDWARE_STACK_ERROR, CUDA_ERROR_ILLEGAL_INSTRUCTION, CUDA_ERROR_MISALIGNED_ADDRESS,
    CUDA_ERROR_INVALID_ADDRESS_SPACE, CUDA_ERROR_INVALID_PC, CUDA_ERROR_LAUNCH_FAILED,
    CUDA_ERROR_TENSOR_MEMORY_LEAK, CUDA_ERROR_EXTERNAL_DEVICE,
})


class DeviceError(Exception):
    """A CUDA-style failure: `code` is the CUresult the job will see. `stderr` is
    text the device wrote for the job's stderr with it (what failed device asserts
    print), delivered once, ahead of the error."""

    def __init__(self, code: int, message: str, stderr: str = ""):
        super().__init__(f"{message} (CUresult {code})")
        self.code = code
        self.message = message
        self.stderr = stderr


class ProtocolError(Exception):
    """A record that does not follow the protocol (bad kind, bad size, bad field)."""
