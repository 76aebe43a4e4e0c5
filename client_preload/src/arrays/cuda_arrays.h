// CUDA arrays (cuArrayCreate, cuArray3DCreate) as opaque device memory: the job sees
// a handle and a descriptor, never an address, so tally lays each array out linearly
// (rows of Width texels, Height rows per slice, Depth slices) in an ordinary device
// allocation charged to the job's quota. Copies in and out work (cuMemcpyHtoA and the
// other array forms, CUDA_MEMCPY2D/3D with CU_MEMORYTYPE_ARRAY); sampling them
// (texture and surface objects) is refused: tally's devices model no texture units.
#pragma once
#include <cstddef>
#include <cstdint>

#include "driver_headers.h"

namespace tally::client {

struct ArrayPlace {
  uint64_t address;     // the byte at (x, y, z)
  size_t row_bytes;     // Width texels
  size_t rows;          // Height (1 for a 1-D array)
  size_t bytes_left;    // from address to the array's end
};

// Where byte x of row y of slice z of `array` is; CUDA_ERROR_INVALID_VALUE for an
// unknown handle or a place outside the array.
CUresult array_place(CUarray array, size_t x, size_t y, size_t z, ArrayPlace* out);

// The device address of bytes [offset, offset + n) of `array` counted linearly (the
// 1-D copies: cuMemcpyHtoA and its kin); CUDA_ERROR_INVALID_VALUE past its end.
CUresult array_span(CUarray array, size_t offset, size_t n, uint64_t* address);

}  // namespace tally::client
