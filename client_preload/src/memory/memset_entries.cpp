// cuMemsetD8/D16/D32, their 2-D forms, and the Async and per-thread forms of each:
// one Memset request each (copies.h). The synchronous forms return once the
// server has checked the destination and queued the fill (CUDA: asynchronous
// with respect to the host for device memory).
#include "connection/connection.h"
#include "copies/copies.h"
#include "entry_points/entry_point.h"
#include "streams/stream_ids.h"

namespace tally::client {
namespace {

CUresult fill(CUdeviceptr dst, size_t pitch, uint32_t value, unsigned element_size, size_t width, size_t height,
              CUstream stream, bool per_thread, bool async) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  uint64_t id = 0;
  if (CUresult rc = stream_id(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  // The driver requires element alignment of the destination (and pitch).
  if (dst % element_size != 0 || (height > 1 && pitch % element_size != 0)) return CUDA_ERROR_INVALID_VALUE;
  return memset_device({dst, pitch}, value, element_size, width, height, id, async);
}

}  // namespace
}  // namespace tally::client

using tally::client::fill;

TALLY_ENTRY(cuMemsetD8_v3020)(CUdeviceptr_v2 dstDevice, unsigned char uc, size_t N) {
  return fill(dstDevice, 0, uc, 1, N, 1, nullptr, false, false);
}
TALLY_ENTRY(cuMemsetD8_v7000_ptds)(CUdeviceptr_v2 dstDevice, unsigned char uc, size_t N) {
  return fill(dstDevice, 0, uc, 1, N, 1, nullptr, true, false);
}
TALLY_ENTRY(cuMemsetD2D8_v3020)(CUdeviceptr_v2 dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
    size_t Height) {
  return fill(dstDevice, dstPitch, uc, 1, Width, Height, nullptr, false, false);
}
TALLY_ENTRY(cuMemsetD2D8_v7000_ptds)(CUdeviceptr_v2 dstDevice, size_t dstPitch, unsigned char uc, size_t Width,
    size_t Height) {
  return fill(dstDevice, dstPitch, uc, 1, Width, Height, nullptr, true, false);
}
TALLY_ENTRY(cuMemsetD8Async_v3020)(CUdeviceptr_v2 dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  return fill(dstDevice, 0, uc, 1, N, 1, hStream, false, true);
}
TALLY_ENTRY(cuMemsetD8Async_v7000_ptsz)(CUdeviceptr_v2 dstDevice, unsigned char uc, size_t N, CUstream hStream) {
  return fill(dstDevice, 0, uc, 1, N, 1, hStream, true, true);
}
TALLY_ENTRY(cuMemsetD2D8Async_v3020)(CUdeviceptr_v2 dstDevice, size_t dstPitch, unsigned char uc,
    size_t Width, size_t Height, CUstream hStream) {
  return fill(dstDevice, dstPitch, uc, 1, Width, Height, hStream, false, true);
}
TALLY_ENTRY(cuMemsetD2D8Async_v7000_ptsz)(CUdeviceptr_v2 dstDevice, size_t dstPitch, unsigned char uc,
    size_t Width, size_t Height, CUstream hStream) {
  return fill(dstDevice, dstPitch, uc, 1, Width, Height, hStream, true, true);
}
TALLY_ENTRY(cuMemsetD16_v3020)(CUdeviceptr_v2 dstDevice, unsigned short us, size_t N) {
  return fill(dstDevice, 0, us, 2, N, 1, nullptr, false, false);
}
TALLY_ENTRY(cuMemsetD16_v7000_ptds)(CUdeviceptr_v2 dstDevice, unsigned short us, size_t N) {
  return fill(dstDevice, 0, us, 2, N, 1, nullptr, true, false);
}
TALLY_ENTRY(cuMemsetD2D16_v3020)(CUdeviceptr_v2 dstDevice, size_t dstPitch, unsigned short us, size_t Width,
    size_t Height) {
  return fill(dstDevice, dstPitch, us, 2, Width, Height, nullptr, false, false);
}
TALLY_ENTRY(cuMemsetD2D16_v7000_ptds)(CUdeviceptr_v2 dstDevice, size_t dstPitch, unsigned short us, size_t Width,
    size_t Height) {
  return fill(dstDevice, dstPitch, us, 2, Width, Height, nullptr, true, false);
}
TALLY_ENTRY(cuMemsetD16Async_v3020)(CUdeviceptr_v2 dstDevice, unsigned short us, size_t N, CUstream hStream) {
  return fill(dstDevice, 0, us, 2, N, 1, hStream, false, true);
}
TALLY_ENTRY(cuMemsetD16Async_v7000_ptsz)(CUdeviceptr_v2 dstDevice, unsigned short us, size_t N, CUstream hStream) {
  return fill(dstDevice, 0, us, 2, N, 1, hStream, true, true);
}
TALLY_ENTRY(cuMemsetD2D16Async_v3020)(CUdeviceptr_v2 dstDevice, size_t dstPitch, unsigned short us,
    size_t Width, size_t Height, CUstream hStream) {
  return fill(dstDevice, dstPitch, us, 2, Width, Height, hStream, false, true);
}
TALLY_ENTRY(cuMemsetD2D16Async_v7000_ptsz)(CUdeviceptr_v2 dstDevice, size_t dstPitch, unsigned short us,
    size_t Width, size_t Height, CUstream hStream) {
  return fill(dstDevice, dstPitch, us, 2, Width, Height, hStream, true, true);
}
TALLY_ENTRY(cuMemsetD32_v3020)(CUdeviceptr_v2 dstDevice, unsigned int ui, size_t N) {
  return fill(dstDevice, 0, ui, 4, N, 1, nullptr, false, false);
}
TALLY_ENTRY(cuMemsetD32_v7000_ptds)(CUdeviceptr_v2 dstDevice, unsigned int ui, size_t N) {
  return fill(dstDevice, 0, ui, 4, N, 1, nullptr, true, false);
}
TALLY_ENTRY(cuMemsetD2D32_v3020)(CUdeviceptr_v2 dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
    size_t Height) {
  return fill(dstDevice, dstPitch, ui, 4, Width, Height, nullptr, false, false);
}
TALLY_ENTRY(cuMemsetD2D32_v7000_ptds)(CUdeviceptr_v2 dstDevice, size_t dstPitch, unsigned int ui, size_t Width,
    size_t Height) {
  return fill(dstDevice, dstPitch, ui, 4, Width, Height, nullptr, true, false);
}
TALLY_ENTRY(cuMemsetD32Async_v3020)(CUdeviceptr_v2 dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  return fill(dstDevice, 0, ui, 4, N, 1, hStream, false, true);
}
TALLY_ENTRY(cuMemsetD32Async_v7000_ptsz)(CUdeviceptr_v2 dstDevice, unsigned int ui, size_t N, CUstream hStream) {
  return fill(dstDevice, 0, ui, 4, N, 1, hStream, true, true);
}
TALLY_ENTRY(cuMemsetD2D32Async_v3020)(CUdeviceptr_v2 dstDevice, size_t dstPitch, unsigned int ui,
    size_t Width, size_t Height, CUstream hStream) {
  return fill(dstDevice, dstPitch, ui, 4, Width, Height, hStream, false, true);
}
TALLY_ENTRY(cuMemsetD2D32Async_v7000_ptsz)(CUdeviceptr_v2 dstDevice, size_t dstPitch, unsigned int ui,
    size_t Width, size_t Height, CUstream hStream) {
  return fill(dstDevice, dstPitch, ui, 4, Width, Height, hStream, true, true);
}
