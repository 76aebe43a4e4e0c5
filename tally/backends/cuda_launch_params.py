"""A kernel's serialized parameter block as the driver's `extra` launch argument
(CU_LAUNCH_PARAM_BUFFER_POINTER / _SIZE / _END, cuda.h), for cuLaunchKernel,
cuLaunchKernelEx and a graph's kernel nodes alike."""
from __future__ import annotations

import ctypes

# CU_LAUNCH_PARAM_* markers of the `extra` argument (cuda.h)
_PARAM_END, _PARAM_BUFFER_POINTER, _PARAM_BUFFER_SIZE = 0, 1, 2


class LaunchExtra:
    """`address` is the `extra` array to pass; the object keeps the buffer, its size
    and the array alive (the driver copies them during the call that takes them)."""

    def __init__(self, params: bytes):
        self._buffer = ctypes.create_string_buffer(bytes(params), max(len(params), 1))
        self._size = ctypes.c_size_t(len(params))
        self._extra = (ctypes.c_void_p * 5)(_PARAM_BUFFER_POINTER, ctypes.addressof(self._buffer),
                                            _PARAM_BUFFER_SIZE, ctypes.addressof(self._size), _PARAM_END)
        self.address = ctypes.addressof(self._extra)
