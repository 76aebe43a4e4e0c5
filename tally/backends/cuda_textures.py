"""Texture and surface objects on a GPU: the driver's own, made in the server over
the job's memory (its device addresses are the server's), so a job's kernels sample
through the texture units as they would without tally.

tally keeps a job's CUDA arrays in linear memory (client_preload/src/arrays/), and
the driver samples linear memory only as a linear (1-D, fetched by index) or
pitch-2D resource: those, and 2-D arrays as pitch-2D (whose rows, packed, must then
be a multiple of the GPU's texture pitch alignment, 32 bytes), are made here; 1-D, 3-D,
layered and cubemap arrays and surface objects, which need the driver's own arrays,
are refused with CUDA_ERROR_NOT_SUPPORTED and the reason. The driver checks the rest
(texture alignment, pitch alignment, sizes).
"""
from __future__ import annotations

from cuda.bindings import driver as cu

from tally.backends.texture_objects import LINEAR, RESOURCE_ARRAY, SHAPE_2D, SHAPE_NAMES, SURFACE, TextureRequest
from tally.protocol.errors import CUDA_ERROR_NOT_SUPPORTED, DeviceError


_TEXTURE_PITCH_ALIGNMENT = 51      # CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT


class CudaTextureObjects:
    """Uses CudaBackend's `_current`, `_check`, `_lost` and `describe`."""

    def texture_create(self, req: TextureRequest) -> int:
        if req.kind == SURFACE or req.shape not in (LINEAR, SHAPE_2D):
            what = "surface objects" if req.kind == SURFACE else f"textures over {SHAPE_NAMES[req.shape]} CUDA arrays"
            raise DeviceError(CUDA_ERROR_NOT_SUPPORTED,
                              f"{req.what}: {what} need the driver's CUDA arrays, and on a GPU tally keeps a job's "
                              f"arrays in linear memory (linear and pitch-2D textures, and 2-D arrays, work)")
        alignment = self.describe().attributes.get(_TEXTURE_PITCH_ALIGNMENT) or 32
        if req.resource == RESOURCE_ARRAY and req.pitch % alignment:
            raise DeviceError(CUDA_ERROR_NOT_SUPPORTED,
                              f"{req.what}: on a GPU tally samples a 2-D CUDA array as pitch-2D memory, and this "
                              f"array's rows ({req.pitch} bytes) are not a multiple of the texture pitch alignment "
                              f"({alignment} bytes)")
        self._current()
        res = cu.CUDA_RESOURCE_DESC()
        if req.shape == LINEAR:
            res.resType = cu.CUresourcetype.CU_RESOURCE_TYPE_LINEAR
            res.res.linear.devPtr = req.address
            res.res.linear.format = cu.CUarray_format(req.format)
            res.res.linear.numChannels = req.channels
            res.res.linear.sizeInBytes = req.width * req.texel_bytes
        else:
            res.resType = cu.CUresourcetype.CU_RESOURCE_TYPE_PITCH2D
            res.res.pitch2D.devPtr = req.address
            res.res.pitch2D.format = cu.CUarray_format(req.format)
            res.res.pitch2D.numChannels = req.channels
            res.res.pitch2D.width = req.width
            res.res.pitch2D.height = req.height
            res.res.pitch2D.pitchInBytes = req.pitch
        tex = cu.CUDA_TEXTURE_DESC()
        tex.addressMode = [cu.CUaddress_mode(m) for m in req.address_mode]
        tex.filterMode = cu.CUfilter_mode(req.filter_mode)
        tex.flags = req.flags
        tex.borderColor = list(req.border)
        return int(self._check(cu.cuTexObjectCreate(res, tex, None)))

    def texture_destroy(self, handle: int) -> None:
        if self._lost:     # the context died with a fault: its objects are gone with it
            return
        self._current()
        self._check(cu.cuTexObjectDestroy(handle))
