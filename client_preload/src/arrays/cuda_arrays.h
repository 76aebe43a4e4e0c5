// CUDA arrays (cuArrayCreate, cuArray3DCreate) as opaque device memory: the job sees
// a handle and a descriptor, never an address, so tally lays each array out linearly
// (rows of Width texels, Height rows per slice, Depth slices) in an ordinary device
// allocation charged to the job's quota. Copies in and out work (cuMemcpyHtoA and the
// other array forms, CUDA_MEMCPY2D/3D with CU_MEMORYTYPE_ARRAY), and texture and
// surface objects read this layout (texture_objects.cpp).
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

// An array's descriptor and where its memory is: row_bytes between rows, row_bytes *
// rows between slices (3-D) or layers.
struct ArrayLayout {
  CUDA_ARRAY3D_DESCRIPTOR desc;
  uint64_t address;
  size_t row_bytes, rows, bytes;
};

// CUDA_ERROR_INVALID_HANDLE for an unknown handle.
CUresult array_layout(CUarray array, ArrayLayout* out);

// Bytes of one texel of `format` with `channels` channels; 0 for a format tally does
// not lay out (block-compressed and video formats, or a channel count the format
// does not allow).
size_t texel_bytes(CUarray_format format, unsigned channels);

// Where byte x of row y of slice z of `array` is; CUDA_ERROR_INVALID_VALUE for an
// unknown handle or a place outside the array.
CUresult array_place(CUarray array, size_t x, size_t y, size_t z, ArrayPlace* out);

// The device address of bytes [offset, offset + n) of `array` counted linearly (the
// 1-D copies: cuMemcpyHtoA and its kin); CUDA_ERROR_INVALID_VALUE past its end.
CUresult array_span(CUarray array, size_t offset, size_t n, uint64_t* address);

}  // namespace tally::client
