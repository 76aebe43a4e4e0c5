"""TMA tensor maps (cuTensorMapEncodeTiled, Im2col, Im2colWide, ReplaceAddress).

A tensor map is 128 opaque bytes a kernel's bulk tensor copies read. On a GPU
they are the driver's (tally/backends/cuda_tensor_maps.py asks it); the devices
that are no GPU (emulator, null, sim) encode tally's own layout, the one the
emulator's TMA copies read (csrc/src/emulator/tensor_map.h defines it; fields
are placed here by asking it, `tally._core.emulator.tensor_map_field`). Either
way the inputs are first checked as the driver documents its checks, with
CUDA_ERROR_INVALID_VALUE and the reason for bad input.

Im2col maps keep their extra inputs where a tiled map keeps its box (an im2col
map has no box): box_dim[0] channels per pixel, box_dim[1] pixels per column,
box_dim[2 + i] the i-th spatial dimension's corners as two signed 16-bit
halves (lower, upper); the form is in swizzle_atomicity's upper bits.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError

TENSOR_MAP_BYTES = 128
TILED, IM2COL, IM2COL_WIDE = 0, 1, 2
FORMS = {TILED: "cuTensorMapEncodeTiled", IM2COL: "cuTensorMapEncodeIm2col", IM2COL_WIDE: "cuTensorMapEncodeIm2colWide"}

# CUtensorMapDataType -> bytes per element (the packed 4- and 6-bit forms: 0, refused)
ELEMENT_BYTES = {0: 1, 1: 2, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 4, 11: 4, 12: 4}
FLOAT_TYPES = frozenset({6, 7, 8, 9, 10, 11, 12})
INTERLEAVE_NONE, INTERLEAVE_16B, INTERLEAVE_32B = 0, 1, 2
SWIZZLE_SPAN = {0: 0, 1: 32, 2: 64, 3: 128, 4: 128, 5: 128, 6: 128}   # CUtensorMapSwizzle -> bytes
L2_PROMOTIONS = range(0, 4)
OOB_FILL_NONE, OOB_FILL_NAN = 0, 1


@dataclass(frozen=True)
class TensorMapRequest:
    """One cuTensorMapEncode* call's inputs (lists hold `rank` entries; strides rank - 1)."""
    form: int
    data_type: int
    rank: int
    global_address: int
    global_dim: tuple[int, ...]
    global_strides: tuple[int, ...]
    box_dim: tuple[int, ...] = ()
    element_strides: tuple[int, ...] = ()
    interleave: int = INTERLEAVE_NONE
    swizzle: int = 0
    l2_promotion: int = 0
    oob_fill: int = OOB_FILL_NONE
    lower_corner: tuple[int, ...] = ()
    upper_corner: tuple[int, ...] = ()
    channels_per_pixel: int = 0
    pixels_per_column: int = 0
    wide_mode: int = 0

    @classmethod
    def from_message(cls, msg) -> "TensorMapRequest":
        rank = msg.rank
        corners = 1 if msg.form == IM2COL_WIDE else max(rank - 2, 0)
        return cls(form=msg.form, data_type=msg.data_type, rank=rank, global_address=msg.global_address,
                   global_dim=tuple(msg.global_dim[:rank]), global_strides=tuple(msg.global_strides[:max(rank - 1, 0)]),
                   box_dim=tuple(msg.box_dim[:rank]), element_strides=tuple(msg.element_strides[:rank]),
                   interleave=msg.interleave, swizzle=msg.swizzle, l2_promotion=msg.l2_promotion,
                   oob_fill=msg.oob_fill, lower_corner=tuple(msg.lower_corner[:corners]),
                   upper_corner=tuple(msg.upper_corner[:corners]), channels_per_pixel=msg.channels_per_pixel,
                   pixels_per_column=msg.pixels_per_column, wide_mode=msg.wide_mode)


def _refuse(req: TensorMapRequest, why: str) -> DeviceError:
    return DeviceError(CUDA_ERROR_INVALID_VALUE, f"{FORMS.get(req.form, 'cuTensorMapEncode')}: {why}")


def validate(req: TensorMapRequest) -> int:
    """Checks the inputs as the driver's documentation states them; returns the
    element size. Raises DeviceError(CUDA_ERROR_INVALID_VALUE) naming what is wrong."""
    if req.form not in FORMS:
        raise _refuse(req, f"unknown tensor map form {req.form}")
    size = ELEMENT_BYTES.get(req.data_type)
    if size is None:
        raise _refuse(req, f"tensorDataType {req.data_type} is not one the emulated devices copy")
    low_rank = 3 if req.form != TILED or req.interleave != INTERLEAVE_NONE else 1
    if not low_rank <= req.rank <= 5:
        raise _refuse(req, f"tensorRank {req.rank} is outside {low_rank}..5"
                      + (" (interleaved and im2col maps have rank 3 or more)" if low_rank == 3 else ""))
    if req.interleave not in (INTERLEAVE_NONE, INTERLEAVE_16B, INTERLEAVE_32B):
        raise _refuse(req, f"interleave {req.interleave} is unknown")
    alignment = 32 if req.interleave == INTERLEAVE_32B else 16
    if req.global_address % alignment:
        raise _refuse(req, f"globalAddress {req.global_address:#x} is not {alignment}-byte aligned")
    for i, d in enumerate(req.global_dim):
        if not 0 < d < 2**32:
            raise _refuse(req, f"globalDim[{i}] = {d} is outside 1..2^32-1")
    for i, s in enumerate(req.global_strides):
        if s % alignment or not 0 < s < 2**40:
            raise _refuse(req, f"globalStrides[{i}] = {s} is not a positive multiple of {alignment} below 2^40")
    for i, e in enumerate(req.element_strides):
        if not 1 <= e <= 8:
            raise _refuse(req, f"elementStrides[{i}] = {e} is outside 1..8")
    if req.swizzle not in SWIZZLE_SPAN:
        raise _refuse(req, f"swizzle {req.swizzle} is unknown")
    if req.l2_promotion not in L2_PROMOTIONS:
        raise _refuse(req, f"l2Promotion {req.l2_promotion} is unknown")
    if req.oob_fill not in (OOB_FILL_NONE, OOB_FILL_NAN):
        raise _refuse(req, f"oobFill {req.oob_fill} is unknown")
    if req.oob_fill == OOB_FILL_NAN and req.data_type not in FLOAT_TYPES:
        raise _refuse(req, "oobFill NAN_REQUEST_ZERO_FMA needs a floating-point tensorDataType")
    if req.interleave == INTERLEAVE_32B and req.swizzle != 1:
        raise _refuse(req, "interleave 32B needs swizzle 32B")
    if req.form == TILED:
        inner = _check_box(req, size)
    else:
        inner = _check_im2col(req, size)
    span = SWIZZLE_SPAN[req.swizzle]
    if req.interleave == INTERLEAVE_NONE and span and inner > span:
        raise _refuse(req, f"the inner box dimension is {inner} bytes, more than swizzle's {span}")
    return size


def _check_box(req: TensorMapRequest, size: int) -> int:
    for i, b in enumerate(req.box_dim):
        if not 1 <= b <= 256:
            raise _refuse(req, f"boxDim[{i}] = {b} is outside 1..256")
    inner = req.box_dim[0] * size
    if req.interleave == INTERLEAVE_NONE and inner % 16:
        raise _refuse(req, f"boxDim[0] * element size = {inner} bytes is not a multiple of 16")
    return inner


def _check_im2col(req: TensorMapRequest, size: int) -> int:
    if not 1 <= req.channels_per_pixel <= 256:
        raise _refuse(req, f"channelsPerPixel {req.channels_per_pixel} is outside 1..256")
    if not 1 <= req.pixels_per_column <= 1024:
        raise _refuse(req, f"pixelsPerColumn {req.pixels_per_column} is outside 1..1024")
    bound = {3: 2**15, 4: 2**7, 5: 2**4}[req.rank] if req.form == IM2COL else 2**15
    for name, corner in (("lower", req.lower_corner), ("upper", req.upper_corner)):
        for i, c in enumerate(corner):
            if not -bound <= c < bound:
                raise _refuse(req, f"pixelBox{name.title()}Corner[{i}] = {c} is outside {-bound}..{bound - 1}")
    return req.channels_per_pixel * size


def _field(name: str, ordinal: int = 0) -> tuple[int, int]:
    from tally._core import emulator as core   # the layout's one definition
    placed = core.tensor_map_field(name, ordinal)
    assert placed is not None, (name, ordinal)
    return placed


def _put(buf: bytearray, name: str, value: int, ordinal: int = 0) -> None:
    offset, size = _field(name, ordinal)
    buf[offset:offset + size] = (value & ((1 << (8 * size)) - 1)).to_bytes(size, "little")


def encode(req: TensorMapRequest) -> bytes:
    """tally's own encoding of a validated request."""
    buf = bytearray(TENSOR_MAP_BYTES)
    _put(buf, "rank", req.rank)
    _put(buf, "elemtype", req.data_type)
    _put(buf, "global_address", req.global_address)
    for i, d in enumerate(req.global_dim):
        _put(buf, "global_dim", d, i)
    for i, s in enumerate(req.global_strides):
        _put(buf, "global_stride", s, i)
    for i, e in enumerate(req.element_strides):
        _put(buf, "element_stride", e, i)
    if req.form == TILED:
        for i, b in enumerate(req.box_dim):
            _put(buf, "box_dim", b, i)
    else:
        _put(buf, "box_dim", req.channels_per_pixel, 0)
        _put(buf, "box_dim", req.pixels_per_column, 1)
        for i, (lo, hi) in enumerate(zip(req.lower_corner, req.upper_corner)):
            _put(buf, "box_dim", struct.unpack("<I", struct.pack("<hh", lo, hi))[0], 2 + i)
    _put(buf, "interleave_layout", req.interleave)
    _put(buf, "swizzle_mode", req.swizzle)
    _put(buf, "swizzle_atomicity", req.form << 4 | req.wide_mode)
    _put(buf, "fill_mode", req.oob_fill)
    return bytes(buf)


class TallyTensorMaps:
    """Tensor maps of a device that is no GPU: tally's layout (emulator, null, sim)."""

    def tensor_map_encode(self, req: TensorMapRequest) -> bytes:
        validate(req)
        return encode(req)

    def tensor_map_replace_address(self, tensor_map: bytes, address: int) -> bytes:
        offset, _ = _field("interleave_layout")
        interleave = int.from_bytes(tensor_map[offset:offset + 4], "little")
        alignment = 32 if interleave == INTERLEAVE_32B else 16
        if address % alignment:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"cuTensorMapReplaceAddress: globalAddress {address:#x} "
                                                        f"is not {alignment}-byte aligned")
        buf = bytearray(tensor_map)
        _put(buf, "global_address", address)
        return bytes(buf)
