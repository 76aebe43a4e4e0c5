"""The server's checks of a texture or surface object (tally/backends/texture_objects.py)
and the descriptor it writes for the emulator, field by field where texture.h says."""
from __future__ import annotations

import struct

import pytest

from tally._core import emulator as core
from tally.backends.texture_objects import (CUBE, FILTER_LINEAR, LINEAR, RESOURCE_ARRAY, RESOURCE_LINEAR,
                                            RESOURCE_PITCH2D, SHAPE_2D, SHAPE_3D, SRGB, SURFACE, TEXTURE,
                                            TextureRequest, descriptor, validate)
from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED, DeviceError

FLOAT, U8, S32, VIDEO = 0x20, 0x01, 0x0a, 0x50


def pitched(**changes) -> TextureRequest:
    fields = dict(kind=TEXTURE, resource=RESOURCE_PITCH2D, shape=SHAPE_2D, address=0x7000_0000, format=FLOAT,
                  channels=1, width=10, height=4, pitch=64, slice_pitch=256)
    return TextureRequest(**{**fields, **changes})


def refused(req: TextureRequest) -> DeviceError:
    with pytest.raises(DeviceError) as e:
        validate(req)
    return e.value


def test_a_good_request_passes_and_reaches_its_last_texel():
    validate(pitched())
    assert pitched().extent() == 3 * 64 + 10 * 4
    assert pitched(shape=LINEAR, resource=RESOURCE_LINEAR, width=16).extent() == 64
    assert pitched(shape=SHAPE_3D, resource=RESOURCE_ARRAY, depth=3, pitch=40, slice_pitch=160).extent() == \
        2 * 160 + 3 * 40 + 40


@pytest.mark.parametrize("change, code, words", [
    (dict(format=VIDEO), CUDA_ERROR_INVALID_VALUE, "not one tally lays out"),
    (dict(channels=3), CUDA_ERROR_INVALID_VALUE, "3 channels"),
    (dict(format=0xc2, channels=1), CUDA_ERROR_INVALID_VALUE, "1 channels"),   # UNORM_INT8X4 fixes 4
    (dict(height=0), CUDA_ERROR_INVALID_VALUE, "an empty resource"),
    (dict(address=0x7000_0002), CUDA_ERROR_INVALID_VALUE, "multiples of the 4-byte texel"),
    (dict(pitch=36), CUDA_ERROR_INVALID_VALUE, "the pitch at least a row"),
    (dict(slice_pitch=64), CUDA_ERROR_INVALID_VALUE, "slice pitch 64"),
    (dict(flags=0x100), CUDA_ERROR_INVALID_VALUE, "unknown texture flags 0x100"),
    (dict(flags=SRGB), CUDA_ERROR_NOT_SUPPORTED, "sRGB"),
    (dict(filter_mode=2), CUDA_ERROR_INVALID_VALUE, "filter mode 2"),
    (dict(address_mode=(0, 4, 0)), CUDA_ERROR_INVALID_VALUE, "address modes"),
    (dict(format=S32, filter_mode=FILTER_LINEAR), CUDA_ERROR_INVALID_VALUE, "linear filtering needs"),
    (dict(format=U8, flags=1, filter_mode=FILTER_LINEAR), CUDA_ERROR_INVALID_VALUE, "linear filtering needs"),
    (dict(kind=SURFACE), CUDA_ERROR_INVALID_VALUE, "must be a CUDA array"),
    (dict(kind=SURFACE, resource=RESOURCE_ARRAY, shape=CUBE, layers=6), CUDA_ERROR_NOT_SUPPORTED, "cubemap"),
    (dict(kind=7), CUDA_ERROR_INVALID_VALUE, "neither a texture nor a surface"),
])
def test_refusals_name_their_reason(change, code, words):
    e = refused(pitched(**change))
    assert e.code == code and words in str(e), str(e)


def test_unsigned_bytes_read_as_floats_may_be_filtered():
    validate(pitched(format=U8, filter_mode=FILTER_LINEAR, pitch=16))


def test_the_descriptor_holds_each_field_where_texture_h_puts_it():
    req = pitched(flags=2, filter_mode=FILTER_LINEAR, address_mode=(0, 2, 3), border=(0.5, 0, 0, 1))
    raw = descriptor(req)
    assert len(raw) == core.TEXTURE_BYTES

    def read(name, fmt, ordinal=0):
        offset, size = core.texture_field(name, ordinal)
        assert struct.calcsize(fmt) == size
        return struct.unpack_from(fmt, raw, offset)[0]

    assert read("magic", "<I") == core.TEXTURE_MAGIC and read("kind", "<I") == TEXTURE
    assert (read("base", "<Q"), read("pitch", "<Q"), read("slice_pitch", "<Q")) == (0x7000_0000, 64, 256)
    assert (read("width", "<I"), read("height", "<I"), read("depth", "<I"), read("layers", "<I")) == (10, 4, 1, 1)
    assert (read("format", "<I"), read("channels", "<I"), read("texel_bytes", "<I")) == (FLOAT, 1, 4)
    assert (read("shape", "<I"), read("flags", "<I"), read("filter_mode", "<I")) == (SHAPE_2D, 2, FILTER_LINEAR)
    assert [read("address_mode", "<I", i) for i in range(3)] == [0, 2, 3]
    assert [read("border", "<f", i) for i in range(4)] == [0.5, 0.0, 0.0, 1.0]
    assert core.texture_field("address_mode", 3) is None and core.texture_field("nothing") is None
