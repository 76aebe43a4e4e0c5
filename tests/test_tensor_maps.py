"""tally's tensor-map checks and encoding (tally/backends/tensor_maps.py), rule by rule
as cuda.h documents cuTensorMapEncodeTiled/Im2col: each bad input is refused with
CUDA_ERROR_INVALID_VALUE naming it; a good one lands in the layout the emulator's
TMA copies read (csrc/src/emulator/tensor_map.h)."""
from __future__ import annotations

import dataclasses
import struct

import pytest

from tally.backends.tensor_maps import IM2COL, TILED, TallyTensorMaps, TensorMapRequest, encode, validate
from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError

GOOD = TensorMapRequest(form=TILED, data_type=7, rank=2, global_address=0x7F00_0000_1000, global_dim=(48, 40),
                        global_strides=(192,), box_dim=(16, 8), element_strides=(1, 1), swizzle=2)


@pytest.mark.parametrize("change,reason", [
    ({"global_address": 0x7F00_0000_1004}, "is not 16-byte aligned"),
    ({"rank": 6, "global_dim": (1,) * 6}, "tensorRank 6 is outside 1..5"),
    ({"interleave": 1}, "tensorRank 2 is outside 3..5"),
    ({"global_dim": (0, 40)}, "globalDim[0] = 0"),
    ({"global_strides": (200,)}, "globalStrides[0] = 200"),
    ({"global_strides": (1 << 40,)}, "below 2^40"),
    ({"box_dim": (16, 257)}, "boxDim[1] = 257"),
    ({"box_dim": (3, 8), "swizzle": 0}, "12 bytes is not a multiple of 16"),
    ({"element_strides": (1, 9)}, "elementStrides[1] = 9"),
    ({"box_dim": (32, 8)}, "128 bytes, more than swizzle's 64"),
    ({"swizzle": 9}, "swizzle 9 is unknown"),
    ({"oob_fill": 1, "data_type": 3}, "needs a floating-point tensorDataType"),
    ({"data_type": 13}, "tensorDataType 13"),
    ({"l2_promotion": 4}, "l2Promotion 4"),
])
def test_each_bad_input_is_refused_with_its_reason(change, reason):
    with pytest.raises(DeviceError) as e:
        validate(dataclasses.replace(GOOD, **change))
    assert e.value.code == CUDA_ERROR_INVALID_VALUE
    assert reason in e.value.message


def test_im2col_limits():
    req = TensorMapRequest(form=IM2COL, data_type=6, rank=4, global_address=0x7F00_0000_0000,
                           global_dim=(64, 9, 9, 2), global_strides=(128, 1152, 10368), element_strides=(1,) * 4,
                           lower_corner=(-1, -1), upper_corner=(1, 1), channels_per_pixel=64, pixels_per_column=32)
    validate(req)
    with pytest.raises(DeviceError, match=r"pixelBoxLowerCorner\[0\] = -200 is outside -128..127"):
        validate(dataclasses.replace(req, lower_corner=(-200, -1)))
    with pytest.raises(DeviceError, match="pixelsPerColumn 2000"):
        validate(dataclasses.replace(req, pixels_per_column=2000))


def test_a_good_map_in_the_emulators_layout():
    raw = encode(GOOD)
    assert len(raw) == 128
    rank, elemtype, address = struct.unpack_from("<IIQ", raw, 0)
    assert (rank, elemtype, address) == (2, 7, 0x7F00_0000_1000)
    assert struct.unpack_from("<Q", raw, 0x10)[0] == 192                      # global_stride[0]
    assert struct.unpack_from("<II", raw, 0x38) == (48, 40)                    # global_dim
    assert struct.unpack_from("<II", raw, 0x4C) == (16, 8)                     # box_dim
    assert struct.unpack_from("<I", raw, 0x78)[0] == 2                         # swizzle_mode
    moved = TallyTensorMaps().tensor_map_replace_address(raw, 0x7F00_0000_2000)
    assert struct.unpack_from("<Q", moved, 8)[0] == 0x7F00_0000_2000 and moved[16:] == raw[16:]
    with pytest.raises(DeviceError, match="cuTensorMapReplaceAddress: globalAddress 0x7f0000002008"):
        TallyTensorMaps().tensor_map_replace_address(raw, 0x7F00_0000_2008)
