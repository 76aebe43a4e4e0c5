"""TMA copies in im2col mode and from interleaved maps, end to end: the kernels of
tests/cuda/programs/tma_im2col.cu (cuTensorMapEncodeIm2col and cp.async.bulk.tensor
...im2col / .im2col_no_offs, as implicit-GEMM convolutions use them) under tally-run
on the emulator, against a reference that lists every pixel position of the bounding
box image by image and cuts the column out of that list (the emulator walks it
instead), plus a case worked by hand from the PTX ISA's rules."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from e2e_helpers import build_cuda, emulator_server, run_job  # noqa: F401

DIMS = (16, 6, 5, 3)          # C, W, H, D; every view ends with 2 images
IMAGES = 2
FLOATS = 16 * 6 * 5 * 3 * IMAGES
CUDA_ERROR_INVALID_VALUE = 1
SWIZZLE_BITS = {0: 0, 1: 1, 2: 2, 3: 3}


@pytest.fixture(scope="module")
def program(nvcc):
    return build_cuda(nvcc, "tma_im2col.cu", flags=("-gencode", "arch=compute_90a,code=compute_90a"))


def view(rank: int) -> list[int]:
    return list(DIMS[:rank - 1]) + [IMAGES]


def element(dims: list[int], coords: tuple[int, ...]) -> int | None:
    """The flat index (= the value) of an element, None outside the tensor."""
    if any(not 0 <= c < d for c, d in zip(coords, dims)):
        return None
    index, pitch = 0, 1
    for c, d in zip(coords, dims):
        index += c * pitch
        pitch *= d
    return index


def positions(rank, lower, upper, strides, first_image, images=4):
    """Every pixel position (image, ..., H, W) of the bounding box, W fastest, from
    `first_image` on for `images` images (past the tensor's last image too)."""
    dims = view(rank)
    axes = [range(lower[s], dims[1 + s] + upper[s], strides[s]) for s in range(rank - 2)]
    return [p for p in itertools.product(range(first_image, first_image + images), *reversed(axes))]


def column_cells(rank, pixels, coords, lower, upper, strides):
    """The spatial positions (W first) and image of each pixel of the column."""
    walk = positions(rank, lower, upper, strides, coords[-1])
    start = (coords[-1],) + tuple(reversed(coords[1:-1]))
    first = walk.index(start)
    return [(tuple(reversed(p[1:])), p[0]) for p in walk[first:first + pixels]]


def expected_column(rank, swizzle, channels, pixels, coords, offsets, lower, upper, strides) -> list[float]:
    dims = view(rank)
    dense = []
    for spatial, image in column_cells(rank, pixels, coords, lower, upper, strides):
        at = tuple(p + o for p, o in zip(spatial, offsets))
        for c in range(coords[0], coords[0] + channels):
            v = element(dims, (c,) + at + (image,))
            dense.append(0.0 if v is None else float(v))
    return swizzled(dense, swizzle)


def swizzled(dense: list[float], swizzle: int) -> list[float]:
    """Floats laid out densely, as shared memory holds them: each 16-byte chunk moved to
    chunk ^ (its 128-byte row & the swizzle's mask)."""
    placed = [0.0] * len(dense)
    mask = (1 << SWIZZLE_BITS[swizzle]) - 1
    for k, v in enumerate(dense):
        byte = 4 * k
        placed[(byte ^ (((byte >> 7) & mask) << 4)) // 4] = v
    return placed


def values(job) -> list[float]:
    assert job.returncode == 0, job.stdout + job.stderr
    return [float(v) for v in job.value("values").split(",")]


def load(server, program, rank, swizzle, channels, pixels, coords, offsets, lower, upper, strides, priority="high",
         timeout=120):
    args = [rank, swizzle, channels, pixels, *coords, *offsets, *lower, *upper, *strides]
    return values(run_job(server.socket, program, "load", *args, priority=priority, timeout=timeout))


COLUMNS = {
    # rank, swizzle, channels, pixels, coords (c0, W[, H[, D]], n), offsets, lower, upper, strides
    "a whole image": (4, 0, 16, 30, (0, 0, 0, 0), (0, 0), (0, 0), (0, 0), (1, 1)),
    "padded corners, channels past C, 128B swizzle":
        (4, 3, 32, 16, (0, -1, -1, 0), (1, 2), (-1, -1), (-1, -1), (1, 1)),
    "into the next image and past the last one, 32B swizzle":
        (4, 1, 8, 40, (8, 3, 4, 0), (0, 0), (0, 0), (0, 0), (1, 1)),
    "a strided 3x3 filter tap, 64B swizzle": (4, 2, 16, 9, (0, -1, -1, 1), (2, 1), (-1, -1), (-1, -1), (2, 2)),
    "NWC": (3, 0, 16, 12, (0, -2, 0), (2,), (-2,), (1,), (1,)),
    "NDHWC": (5, 0, 8, 20, (4, -1, 0, 0, 0), (1, 0, 1), (-1, 0, 0), (0, 0, -1), (1, 2, 1)),
}


@pytest.mark.parametrize("name", list(COLUMNS))
def test_an_im2col_column_lands_in_shared_memory(program, emulator_server, name):
    case = COLUMNS[name]
    assert load(emulator_server, program, *case) == expected_column(*case)


def test_a_padded_row_worked_by_hand(program, emulator_server):
    """The bounding box W in [-1, 5), H in [-1, 4) of one image, from (W, H) = (-1, -1):
    a row of six padding pixels, then W = -1 (padding) and W = 0 of row 0; channel 1."""
    got = load(emulator_server, program, 4, 0, 1, 8, (1, -1, -1, 0), (0, 0), (-1, -1), (-1, -1), (1, 1))
    assert got == [0, 0, 0, 0, 0, 0, 0, 1]


@pytest.mark.parametrize("priority", ["high", "best-effort"])
def test_both_priorities_copy_the_same_column(program, emulator_server, priority):
    case = COLUMNS["a strided 3x3 filter tap, 64B swizzle"]
    assert load(emulator_server, program, *case, priority=priority) == expected_column(*case)


@pytest.mark.parametrize("add", [0, 1])
def test_an_im2col_no_offs_store_and_reduction(program, emulator_server, add):
    coords, lower, upper = (2, -1, 3, 0), (-1, 0), (0, 0)
    got = values(run_job(emulator_server.socket, program, "store", 4, add, 8, 12, *coords, *lower, *upper))
    want = np.arange(FLOATS, dtype=np.float64) if add else np.full(FLOATS, -1.0)
    k = 0
    for spatial, image in column_cells(4, 12, coords, lower, upper, (1, 1)):
        for c in range(coords[0], coords[0] + 8):
            at = element(view(4), (c,) + spatial + (image,))
            if at is not None:
                want[at] = (want[at] if add else 0) + 100000 + k
            k += 1
    assert got == want.tolist()


def interleaved_box(chunk, swizzle, box, at) -> list[float]:
    dims = (chunk, 6, 480 // (chunk * 6))
    dense = []
    for z in range(at[2], at[2] + box[2]):
        for y in range(at[1], at[1] + box[1]):
            for x in range(at[0], at[0] + box[0]):
                v = element(list(dims), (x, y, z))
                dense.append(0.0 if v is None else float(v))
    return swizzled(dense, swizzle)


@pytest.mark.parametrize("interleave,swizzle,box,at", [
    (1, 0, (4, 3, 2), (0, 2, 5)),       # NC/4HWC4 floats: 16-byte chunks
    (2, 1, (8, 4, 4), (0, 3, 8)),       # 32-byte chunks (swizzle 32B, as the driver requires), hanging over
])
def test_an_interleaved_map_copies_whole_channel_chunks(program, emulator_server, interleave, swizzle, box, at):
    got = values(run_job(emulator_server.socket, program, "interleaved", interleave, swizzle, *box, *at))
    assert got == interleaved_box(4 if interleave == 1 else 8, swizzle, box, at)


def test_part_of_an_interleaved_chunk_is_refused_with_the_reason(program, emulator_server):
    job = run_job(emulator_server.socket, program, "interleaved", 1, 0, 2, 3, 2, 0, 0, 0)
    assert job.returncode != 0
    assert "the emulator copies whole chunks" in job.stdout + job.stderr


def test_a_tile_copy_with_an_im2col_map_faults_and_says_why(program, emulator_server):
    job = run_job(emulator_server.socket, program, "mismatch")
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("launch") == [0] and job.ints("sync") != [0]
    assert "a tile-mode cp.async.bulk.tensor with an im2col tensor map" in job.stderr


def test_im2col_encodings_the_driver_refuses(program, emulator_server):
    job = run_job(emulator_server.socket, program, "bad")
    assert job.returncode == 0, job.stdout + job.stderr
    assert job.ints("rank", "channels", "pixels", "corner") == [CUDA_ERROR_INVALID_VALUE] * 4
    assert job.ints("good") == [0]
