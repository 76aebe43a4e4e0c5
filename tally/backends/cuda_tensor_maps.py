"""TMA tensor maps on a GPU: the driver encodes them in the server, where the job's
device addresses are the server's, so the 128 bytes a job's kernels read are the
driver's own. The driver checks the inputs (CUDA_ERROR_INVALID_VALUE for bad ones).

The entry points are called through the pointers cuGetProcAddress gives, with
ctypes, into a buffer aligned to 64 bytes as cuda.h requires of a CUtensorMap:
cuda-bindings' own CUtensorMap objects live in Python's allocator, which aligns
them to 16 or 32 bytes only (cuda-python pull request 1692), and a driver that
checks the alignment refuses them.
"""
from __future__ import annotations

import ctypes

from cuda.bindings import driver as cu

from tally.backends.tensor_maps import IM2COL, IM2COL_WIDE, TENSOR_MAP_BYTES, TensorMapRequest

_U32, _U64, _INT, _PTR = ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int, ctypes.c_void_p
# name -> (cuGetProcAddress version, argument types after the CUtensorMap*)
_SIGNATURES = {
    "cuTensorMapEncodeTiled": (12000, [_INT, _U32, _PTR, _PTR, _PTR, _PTR, _PTR, _INT, _INT, _INT, _INT]),
    "cuTensorMapEncodeIm2col": (12000, [_INT, _U32, _PTR, _PTR, _PTR, _PTR, _PTR, _U32, _U32, _PTR, _INT, _INT,
                                        _INT, _INT]),
    "cuTensorMapEncodeIm2colWide": (12080, [_INT, _U32, _PTR, _PTR, _PTR, _INT, _INT, _U32, _U32, _PTR, _INT,
                                            _INT, _INT, _INT, _INT]),
    "cuTensorMapReplaceAddress": (12000, [_PTR]),
}


class _AlignedMap:
    """128 bytes at a 64-byte-aligned address."""

    def __init__(self, contents: bytes = b""):
        self._storage = ctypes.create_string_buffer(TENSOR_MAP_BYTES + 64)
        base = ctypes.addressof(self._storage)
        self.address = base + (-base % 64)
        ctypes.memmove(self.address, contents, len(contents))

    def read(self) -> bytes:
        return ctypes.string_at(self.address, TENSOR_MAP_BYTES)


def _array(kind, values):
    return (kind * max(len(values), 1))(*values)


class CudaTensorMaps:
    """Uses CudaBackend's `_current` and `_check`."""

    _tensor_map_entries: dict | None = None

    def _tensor_map_entry(self, name: str):
        if self._tensor_map_entries is None:
            self._tensor_map_entries = {}
        if name not in self._tensor_map_entries:
            version, argtypes = _SIGNATURES[name]
            pfn, _found = self._check(cu.cuGetProcAddress(name.encode(), version,
                                                          cu.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_DEFAULT))
            fn = ctypes.CFUNCTYPE(_INT, _PTR, *argtypes)(int(pfn))
            self._tensor_map_entries[name] = fn
        return self._tensor_map_entries[name]

    def _call(self, name: str, *args) -> None:
        rc = self._tensor_map_entry(name)(*args)
        self._check((cu.CUresult(rc),))

    def tensor_map_encode(self, req: TensorMapRequest) -> bytes:
        self._current()
        out = _AlignedMap()
        dims, strides = _array(_U64, req.global_dim), _array(_U64, req.global_strides)
        steps = _array(_U32, req.element_strides)
        head = (out.address, req.data_type, req.rank, req.global_address, dims, strides)
        tail = (req.swizzle, req.l2_promotion, req.oob_fill)
        if req.form == IM2COL:
            self._call("cuTensorMapEncodeIm2col", *head, _array(_INT, req.lower_corner),
                       _array(_INT, req.upper_corner), req.channels_per_pixel, req.pixels_per_column, steps,
                       req.interleave, *tail)
        elif req.form == IM2COL_WIDE:
            self._call("cuTensorMapEncodeIm2colWide", *head, req.lower_corner[0], req.upper_corner[0],
                       req.channels_per_pixel, req.pixels_per_column, steps, req.interleave, req.wide_mode, *tail)
        else:
            self._call("cuTensorMapEncodeTiled", *head, _array(_U32, req.box_dim), steps, req.interleave, *tail)
        return out.read()

    def tensor_map_replace_address(self, tensor_map: bytes, address: int) -> bytes:
        self._current()
        made = _AlignedMap(tensor_map)
        self._call("cuTensorMapReplaceAddress", made.address, address)
        return made.read()
