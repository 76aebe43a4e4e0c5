"""Texture and surface objects (cuTexObjectCreate, cuSurfObjectCreate).

The client resolves a job's resource to device memory (a CUDA array is linear
memory it placed: client_preload/src/arrays/) and sends what the sampling
instructions need (TextureCreate). The server checks it here, with
CUDA_ERROR_INVALID_VALUE and the reason for bad input and CUDA_ERROR_NOT_SUPPORTED
for what tally does not model, then asks its backend for the object (backends get
checked requests, and destroy only handles they made: tally/server/client/textures.py
keeps each job's):

- devices that are no GPU (emulator, null, sim): the object is the device address of
  a 128-byte descriptor in tally's layout (csrc/src/emulator/texture.h defines it;
  fields are placed by asking `tally._core.emulator.texture_field`), which the
  emulator's tex/tld4/suld/sust read (`TallyTextureObjects`);
- a GPU: the driver's own object over the same memory (tally/backends/cuda_textures.py).
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED, DeviceError

TEXTURE, SURFACE = 1, 2
KIND_NAMES = {TEXTURE: "cuTexObjectCreate", SURFACE: "cuSurfObjectCreate"}
RESOURCE_ARRAY, RESOURCE_LINEAR, RESOURCE_PITCH2D = 0, 2, 3      # CUresourcetype
# texture.h's TextureShape
LINEAR, SHAPE_1D, SHAPE_2D, SHAPE_3D, LAYERED_1D, LAYERED_2D, CUBE, LAYERED_CUBE = range(8)
SHAPE_NAMES = ("linear", "1-D", "2-D", "3-D", "layered 1-D", "layered 2-D", "cubemap", "layered cubemap")

READ_AS_INTEGER, NORMALIZED_COORDINATES, SRGB = 0x01, 0x02, 0x10
KNOWN_FLAGS = READ_AS_INTEGER | NORMALIZED_COORDINATES | SRGB | 0x20 | 0x40   # + no trilinear, seamless cube
FILTER_POINT, FILTER_LINEAR = 0, 1
ADDRESS_MODES = range(4)                    # wrap, clamp, mirror, border

# CUarray_format -> (bytes per channel, channels the format fixes or 0, reads as float without READ_AS_INTEGER)
FORMATS = {
    0x01: (1, 0, True), 0x02: (2, 0, True), 0x03: (4, 0, False),
    0x08: (1, 0, True), 0x09: (2, 0, True), 0x0a: (4, 0, False),
    0x10: (2, 0, True), 0x20: (4, 0, True),
    0xc0: (1, 1, True), 0xc1: (1, 2, True), 0xc2: (1, 4, True),
    0xc3: (2, 1, True), 0xc4: (2, 2, True), 0xc5: (2, 4, True),
    0xc6: (1, 1, True), 0xc7: (1, 2, True), 0xc8: (1, 4, True),
    0xc9: (2, 1, True), 0xca: (2, 2, True), 0xcb: (2, 4, True),
}
INTEGER_FORMATS = frozenset({0x01, 0x02, 0x03, 0x08, 0x09, 0x0a})


@dataclass(frozen=True)
class TextureRequest:
    """One TextureCreate: the resource (as memory) and, for a texture, how it is sampled."""
    kind: int
    resource: int
    shape: int
    address: int
    format: int
    channels: int
    width: int
    height: int = 1
    depth: int = 1
    layers: int = 1
    pitch: int = 0
    slice_pitch: int = 0
    flags: int = 0
    filter_mode: int = FILTER_POINT
    address_mode: tuple[int, int, int] = (0, 0, 0)
    border: tuple[float, float, float, float] = (0.0, 0.0, 0.0, 0.0)

    @classmethod
    def from_message(cls, msg) -> "TextureRequest":
        return cls(kind=msg.kind, resource=msg.resource, shape=msg.shape, address=msg.address, format=msg.format,
                   channels=msg.channels, width=msg.width, height=msg.height, depth=msg.depth, layers=msg.layers,
                   pitch=msg.pitch, slice_pitch=msg.slice_pitch, flags=msg.flags, filter_mode=msg.filter_mode,
                   address_mode=tuple(msg.address_mode), border=tuple(msg.border))

    @property
    def what(self) -> str:
        return KIND_NAMES.get(self.kind, "TextureCreate")

    @property
    def texel_bytes(self) -> int:
        channel, _fixed, _float = FORMATS[self.format]
        return channel * self.channels

    @property
    def integer_reads(self) -> bool:
        """Whether fetches give integers (not floats)."""
        return self.format in INTEGER_FORMATS and (self.flags & READ_AS_INTEGER or not FORMATS[self.format][2])

    def extent(self) -> int:
        """Bytes from `address` to the end of the last texel the object can read."""
        if self.shape == LINEAR:
            return self.width * self.texel_bytes
        slices = max(self.depth, 1) * max(self.layers, 1)
        return (slices - 1) * self.slice_pitch + (self.height - 1) * self.pitch + self.width * self.texel_bytes


def _refuse(req: TextureRequest, why: str, code: int = CUDA_ERROR_INVALID_VALUE) -> DeviceError:
    return DeviceError(code, f"{req.what}: {why}")


def validate(req: TextureRequest) -> None:
    """The driver's documented checks, and tally's limits, for a request."""
    if req.kind not in KIND_NAMES:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"TextureCreate: kind {req.kind} is neither a texture nor a surface")
    if req.shape not in range(len(SHAPE_NAMES)):
        raise _refuse(req, f"unknown resource shape {req.shape}")
    if req.format not in FORMATS:
        raise _refuse(req, f"format {req.format:#x} is not one tally lays out (block-compressed, video and packed "
                           f"formats are not modeled)")
    fixed = FORMATS[req.format][1]
    if req.channels not in (1, 2, 4) or (fixed and req.channels != fixed):
        raise _refuse(req, f"{req.channels} channels of format {req.format:#x}")
    if min(req.width, req.height, req.depth, req.layers) < 1:
        raise _refuse(req, f"an empty resource ({req.width} x {req.height} x {req.depth}, {req.layers} layers)")
    texel = req.texel_bytes
    if req.address % texel or (req.shape != LINEAR and (req.pitch % texel or req.pitch < req.width * texel)):
        raise _refuse(req, f"address {req.address:#x} and row pitch {req.pitch} must be multiples of the "
                           f"{texel}-byte texel, the pitch at least a row")
    if req.shape != LINEAR and req.slice_pitch < req.pitch * req.height:
        raise _refuse(req, f"slice pitch {req.slice_pitch} is less than a slice ({req.pitch} x {req.height})")
    if req.kind == SURFACE:
        if req.resource != RESOURCE_ARRAY:
            raise _refuse(req, "a surface object's resource must be a CUDA array")
        if req.shape in (CUBE, LAYERED_CUBE):
            raise _refuse(req, "cubemap surfaces are not supported by tally", CUDA_ERROR_NOT_SUPPORTED)
        return
    if req.flags & ~KNOWN_FLAGS:
        raise _refuse(req, f"unknown texture flags {req.flags & ~KNOWN_FLAGS:#x}")
    if req.flags & SRGB:
        raise _refuse(req, "sRGB textures (CU_TRSF_SRGB) are not supported by tally", CUDA_ERROR_NOT_SUPPORTED)
    if req.filter_mode not in (FILTER_POINT, FILTER_LINEAR):
        raise _refuse(req, f"filter mode {req.filter_mode}")
    if any(m not in ADDRESS_MODES for m in req.address_mode):
        raise _refuse(req, f"address modes {req.address_mode}")
    if req.filter_mode == FILTER_LINEAR and req.integer_reads:
        raise _refuse(req, "linear filtering needs a texture that reads as floats (a float or half format, or an "
                           "8/16-bit integer format without CU_TRSF_READ_AS_INTEGER)")


def _field(name: str, ordinal: int = 0) -> tuple[int, int]:
    from tally._core import emulator as core   # the layout's one definition (texture.h)
    found = core.texture_field(name, ordinal)
    if found is None:
        raise KeyError(name)
    return found


def _put(buf: bytearray, name: str, value, ordinal: int = 0, fmt: str | None = None) -> None:
    offset, size = _field(name, ordinal)
    struct.pack_into(fmt or {4: "<I", 8: "<Q"}[size], buf, offset, value)


def descriptor(req: TextureRequest) -> bytes:
    """The 128 bytes of tally's descriptor for a checked request."""
    from tally._core import emulator as core
    buf = bytearray(core.TEXTURE_BYTES)
    _put(buf, "magic", core.TEXTURE_MAGIC)
    for name in ("kind", "shape", "format", "channels", "width", "height", "depth", "layers", "flags",
                 "filter_mode", "address", "pitch", "slice_pitch"):
        _put(buf, "base" if name == "address" else name, getattr(req, name))
    _put(buf, "texel_bytes", req.texel_bytes)
    for i, mode in enumerate(req.address_mode):
        _put(buf, "address_mode", mode, i)
    for i, value in enumerate(req.border):
        _put(buf, "border", value, i, "<f")
    return bytes(buf)


class TallyTextureObjects:
    """Texture and surface objects of a device that is no GPU: each a descriptor in
    device memory, its address the handle. The host backend gives `mem_alloc`,
    `mem_free` and `write_now` (device bytes written at once: no kernel knows the
    new descriptor's address yet)."""

    def texture_create(self, req: TextureRequest) -> int:
        data = descriptor(req)
        address = self.mem_alloc(len(data))
        try:
            self.write_now(address, data)
        except BaseException:
            self.mem_free(address)
            raise
        return address

    def texture_destroy(self, handle: int) -> None:
        self.mem_free(handle)
