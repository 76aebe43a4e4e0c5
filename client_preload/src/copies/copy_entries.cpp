// cuMemcpy* entry points: each form becomes a rectangle copy (copies.h) on the
// stream it names. The synchronous forms run on the legacy default stream, or on
// the thread's per-thread default stream through their _ptds forms.
#include "arrays/cuda_arrays.h"
#include "connection/connection.h"
#include "copies/copies.h"
#include "entry_points/entry_point.h"
#include "streams/stream_ids.h"

namespace tally::client {
namespace {

CUresult on_stream(CUstream stream, bool per_thread, uint64_t* id) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  return stream_id(stream, per_thread, id);
}

CUresult htod(CUdeviceptr dst, const void* src, size_t n, CUstream stream, bool per_thread, bool async) {
  uint64_t id = 0;
  if (CUresult rc = on_stream(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  return copy_host_to_device({dst, n}, {src, n}, n, 1, id, async);
}

CUresult dtoh(void* dst, CUdeviceptr src, size_t n, CUstream stream, bool per_thread, bool async) {
  uint64_t id = 0;
  if (CUresult rc = on_stream(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  return copy_device_to_host({dst, n}, {src, n}, n, 1, id, async);
}

CUresult dtod(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream, bool per_thread, bool async) {
  uint64_t id = 0;
  if (CUresult rc = on_stream(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  return copy_device_to_device({dst, n}, {src, n}, n, 1, id, async);
}

// Unified addressing: the client's map of device ranges says which side each
// pointer is on.
CUresult unified(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream, bool per_thread, bool async) {
  uint64_t id = 0;
  if (CUresult rc = on_stream(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  const bool dst_device = is_device_address(dst), src_device = is_device_address(src);
  auto* dst_host = reinterpret_cast<void*>(dst);
  auto* src_host = reinterpret_cast<const void*>(src);
  if (dst_device && src_device) return copy_device_to_device({dst, n}, {src, n}, n, 1, id, async);
  if (dst_device) return copy_host_to_device({dst, n}, {src_host, n}, n, 1, id, async);
  if (src_device) return copy_device_to_host({dst_host, n}, {src, n}, n, 1, id, async);
  return copy_host_to_host({dst_host, n}, {src_host, n}, n, 1, id);
}

// One side of a CUDA_MEMCPY2D/3D: where it starts and whether it is on the device.
struct Side {
  bool device;
  uint64_t address;  // the first byte of the copy
  size_t pitch;
};

CUresult resolve_side(CUmemorytype type, const void* host, CUdeviceptr device, CUarray array, size_t x, size_t y,
                      size_t z, size_t pitch, size_t height, Side* out) {
  const size_t offset = z * height * pitch + y * pitch + x;
  switch (type) {
    case CU_MEMORYTYPE_HOST:
      *out = {false, reinterpret_cast<uint64_t>(host) + offset, pitch};
      return host != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_MEMORYTYPE_DEVICE:
      *out = {true, device + offset, pitch};
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_UNIFIED:
      *out = {is_device_address(device), device + offset, pitch};
      return CUDA_SUCCESS;
    case CU_MEMORYTYPE_ARRAY: {      // laid out linearly (arrays/cuda_arrays.h); its own pitch and rows
      ArrayPlace place{};
      if (CUresult rc = array_place(array, x, y, z, &place); rc != CUDA_SUCCESS) return rc;
      *out = {true, place.address, place.row_bytes};
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult copy_rect(const Side& dst, const Side& src, size_t width, size_t height, uint64_t stream, bool async) {
  if (height > 1 && (dst.pitch < width || src.pitch < width)) return CUDA_ERROR_INVALID_VALUE;
  if (dst.device && src.device) return copy_device_to_device({dst.address, dst.pitch}, {src.address, src.pitch},
                                                             width, height, stream, async);
  auto* dst_host = reinterpret_cast<void*>(dst.address);
  auto* src_host = reinterpret_cast<const void*>(src.address);
  if (dst.device)
    return copy_host_to_device({dst.address, dst.pitch}, {src_host, src.pitch}, width, height, stream, async);
  if (src.device)
    return copy_device_to_host({dst_host, dst.pitch}, {src.address, src.pitch}, width, height, stream, async);
  return copy_host_to_host({dst_host, dst.pitch}, {src_host, src.pitch}, width, height, stream);
}

CUresult copy_2d(const CUDA_MEMCPY2D* p, CUstream stream, bool per_thread, bool async) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t id = 0;
  if (CUresult rc = on_stream(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  Side src{}, dst{};
  if (CUresult rc = resolve_side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes, p->srcY,
                                 0, p->srcPitch, 0, &src);
      rc != CUDA_SUCCESS)
    return rc;
  if (CUresult rc = resolve_side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes, p->dstY,
                                 0, p->dstPitch, 0, &dst);
      rc != CUDA_SUCCESS)
    return rc;
  return copy_rect(dst, src, p->WidthInBytes, p->Height, id, async);
}

// A 3-D copy is Depth 2-D copies, one per slice.
CUresult copy_3d(const CUDA_MEMCPY3D* p, CUstream stream, bool per_thread, bool async) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t id = 0;
  if (CUresult rc = on_stream(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  if (p->srcLOD != 0 || p->dstLOD != 0) return CUDA_ERROR_INVALID_VALUE;
  for (size_t z = 0; z < p->Depth; ++z) {
    Side src{}, dst{};
    if (CUresult rc = resolve_side(p->srcMemoryType, p->srcHost, p->srcDevice, p->srcArray, p->srcXInBytes, p->srcY,
                                   p->srcZ + z, p->srcPitch, p->srcHeight, &src);
        rc != CUDA_SUCCESS)
      return rc;
    if (CUresult rc = resolve_side(p->dstMemoryType, p->dstHost, p->dstDevice, p->dstArray, p->dstXInBytes, p->dstY,
                                   p->dstZ + z, p->dstPitch, p->dstHeight, &dst);
        rc != CUDA_SUCCESS)
      return rc;
    if (CUresult rc = copy_rect(dst, src, p->WidthInBytes, p->Height, id, async); rc != CUDA_SUCCESS) return rc;
  }
  return CUDA_SUCCESS;
}

// The 1-D array forms: a linear span of the array (cuda_arrays.h) on the device side.
CUresult to_array(CUarray dst, size_t offset, const void* src, size_t n, CUstream stream, bool per_thread,
                  bool async) {
  uint64_t address = 0;
  if (CUresult rc = array_span(dst, offset, n, &address); rc != CUDA_SUCCESS) return rc;
  return htod(address, src, n, stream, per_thread, async);
}

CUresult from_array(void* dst, CUarray src, size_t offset, size_t n, CUstream stream, bool per_thread, bool async) {
  uint64_t address = 0;
  if (CUresult rc = array_span(src, offset, n, &address); rc != CUDA_SUCCESS) return rc;
  return dtoh(dst, address, n, stream, per_thread, async);
}

CUresult array_device(CUarray array, size_t array_offset, CUdeviceptr device, size_t n, bool into_array,
                      bool per_thread) {
  uint64_t address = 0;
  if (CUresult rc = array_span(array, array_offset, n, &address); rc != CUDA_SUCCESS) return rc;
  return into_array ? dtod(address, device, n, nullptr, per_thread, false)
                    : dtod(device, address, n, nullptr, per_thread, false);
}

CUresult array_array(CUarray dst, size_t dst_offset, CUarray src, size_t src_offset, size_t n, bool per_thread) {
  uint64_t to = 0, from = 0;
  if (CUresult rc = array_span(dst, dst_offset, n, &to); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = array_span(src, src_offset, n, &from); rc != CUDA_SUCCESS) return rc;
  return dtod(to, from, n, nullptr, per_thread, false);
}

// One device serves the job: a peer copy is a device-to-device copy.
CUresult peer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n, CUstream stream,
              bool per_thread, bool async) {
  if (dst_ctx == nullptr || src_ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  return dtod(dst, src, n, stream, per_thread, async);
}

}  // namespace
}  // namespace tally::client

using namespace tally::client;

TALLY_ENTRY(cuMemcpyHtoD_v3020)(CUdeviceptr_v2 dstDevice, const void* srcHost, size_t ByteCount) {
  return htod(dstDevice, srcHost, ByteCount, nullptr, false, false);
}
TALLY_ENTRY(cuMemcpyHtoD_v7000_ptds)(CUdeviceptr_v2 dstDevice, const void* srcHost, size_t ByteCount) {
  return htod(dstDevice, srcHost, ByteCount, nullptr, true, false);
}
TALLY_ENTRY(cuMemcpyDtoH_v3020)(void* dstHost, CUdeviceptr_v2 srcDevice, size_t ByteCount) {
  return dtoh(dstHost, srcDevice, ByteCount, nullptr, false, false);
}
TALLY_ENTRY(cuMemcpyDtoH_v7000_ptds)(void* dstHost, CUdeviceptr_v2 srcDevice, size_t ByteCount) {
  return dtoh(dstHost, srcDevice, ByteCount, nullptr, true, false);
}
TALLY_ENTRY(cuMemcpyDtoD_v3020)(CUdeviceptr_v2 dstDevice, CUdeviceptr_v2 srcDevice, size_t ByteCount) {
  return dtod(dstDevice, srcDevice, ByteCount, nullptr, false, false);
}
TALLY_ENTRY(cuMemcpyDtoD_v7000_ptds)(CUdeviceptr_v2 dstDevice, CUdeviceptr_v2 srcDevice, size_t ByteCount) {
  return dtod(dstDevice, srcDevice, ByteCount, nullptr, true, false);
}
TALLY_ENTRY(cuMemcpyHtoDAsync_v3020)(CUdeviceptr_v2 dstDevice, const void* srcHost, size_t ByteCount,
                                     CUstream hStream) {
  return htod(dstDevice, srcHost, ByteCount, hStream, false, true);
}
TALLY_ENTRY(cuMemcpyHtoDAsync_v7000_ptsz)(CUdeviceptr_v2 dstDevice, const void* srcHost, size_t ByteCount,
                                          CUstream hStream) {
  return htod(dstDevice, srcHost, ByteCount, hStream, true, true);
}
TALLY_ENTRY(cuMemcpyDtoHAsync_v3020)(void* dstHost, CUdeviceptr_v2 srcDevice, size_t ByteCount, CUstream hStream) {
  return dtoh(dstHost, srcDevice, ByteCount, hStream, false, true);
}
TALLY_ENTRY(cuMemcpyDtoHAsync_v7000_ptsz)(void* dstHost, CUdeviceptr_v2 srcDevice, size_t ByteCount,
                                          CUstream hStream) {
  return dtoh(dstHost, srcDevice, ByteCount, hStream, true, true);
}
TALLY_ENTRY(cuMemcpyDtoDAsync_v3020)(CUdeviceptr_v2 dstDevice, CUdeviceptr_v2 srcDevice, size_t ByteCount,
                                     CUstream hStream) {
  return dtod(dstDevice, srcDevice, ByteCount, hStream, false, true);
}
TALLY_ENTRY(cuMemcpyDtoDAsync_v7000_ptsz)(CUdeviceptr_v2 dstDevice, CUdeviceptr_v2 srcDevice, size_t ByteCount,
                                          CUstream hStream) {
  return dtod(dstDevice, srcDevice, ByteCount, hStream, true, true);
}
TALLY_ENTRY(cuMemcpy_v4000)(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t ByteCount) {
  return unified(dst, src, ByteCount, nullptr, false, false);
}
TALLY_ENTRY(cuMemcpy_v7000_ptds)(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t ByteCount) {
  return unified(dst, src, ByteCount, nullptr, true, false);
}
TALLY_ENTRY(cuMemcpyAsync_v4000)(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t ByteCount, CUstream hStream) {
  return unified(dst, src, ByteCount, hStream, false, true);
}
TALLY_ENTRY(cuMemcpyAsync_v7000_ptsz)(CUdeviceptr_v2 dst, CUdeviceptr_v2 src, size_t ByteCount, CUstream hStream) {
  return unified(dst, src, ByteCount, hStream, true, true);
}
TALLY_ENTRY(cuMemcpy2D_v3020)(const CUDA_MEMCPY2D_v2* pCopy) { return copy_2d(pCopy, nullptr, false, false); }
TALLY_ENTRY(cuMemcpy2D_v7000_ptds)(const CUDA_MEMCPY2D_v2* pCopy) { return copy_2d(pCopy, nullptr, true, false); }
TALLY_ENTRY(cuMemcpy2DUnaligned_v3020)(const CUDA_MEMCPY2D_v2* pCopy) {
  return copy_2d(pCopy, nullptr, false, false);
}
TALLY_ENTRY(cuMemcpy2DUnaligned_v7000_ptds)(const CUDA_MEMCPY2D_v2* pCopy) {
  return copy_2d(pCopy, nullptr, true, false);
}
TALLY_ENTRY(cuMemcpy2DAsync_v3020)(const CUDA_MEMCPY2D_v2* pCopy, CUstream hStream) {
  return copy_2d(pCopy, hStream, false, true);
}
TALLY_ENTRY(cuMemcpy2DAsync_v7000_ptsz)(const CUDA_MEMCPY2D_v2* pCopy, CUstream hStream) {
  return copy_2d(pCopy, hStream, true, true);
}
TALLY_ENTRY(cuMemcpy3D_v3020)(const CUDA_MEMCPY3D_v2* pCopy) { return copy_3d(pCopy, nullptr, false, false); }
TALLY_ENTRY(cuMemcpy3D_v7000_ptds)(const CUDA_MEMCPY3D_v2* pCopy) { return copy_3d(pCopy, nullptr, true, false); }
TALLY_ENTRY(cuMemcpy3DAsync_v3020)(const CUDA_MEMCPY3D_v2* pCopy, CUstream hStream) {
  return copy_3d(pCopy, hStream, false, true);
}
TALLY_ENTRY(cuMemcpy3DAsync_v7000_ptsz)(const CUDA_MEMCPY3D_v2* pCopy, CUstream hStream) {
  return copy_3d(pCopy, hStream, true, true);
}
TALLY_ENTRY(cuMemcpyPeer_v4000)(CUdeviceptr_v2 dstDevice, CUcontext dstContext, CUdeviceptr_v2 srcDevice,
                                CUcontext srcContext, size_t ByteCount) {
  return peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, nullptr, false, false);
}
TALLY_ENTRY(cuMemcpyPeer_v7000_ptds)(CUdeviceptr_v2 dstDevice, CUcontext dstContext, CUdeviceptr_v2 srcDevice,
                                     CUcontext srcContext, size_t ByteCount) {
  return peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, nullptr, true, false);
}
TALLY_ENTRY(cuMemcpyPeerAsync_v4000)(CUdeviceptr_v2 dstDevice, CUcontext dstContext, CUdeviceptr_v2 srcDevice,
                                     CUcontext srcContext, size_t ByteCount, CUstream hStream) {
  return peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream, false, true);
}
TALLY_ENTRY(cuMemcpyPeerAsync_v7000_ptsz)(CUdeviceptr_v2 dstDevice, CUcontext dstContext, CUdeviceptr_v2 srcDevice,
                                          CUcontext srcContext, size_t ByteCount, CUstream hStream) {
  return peer(dstDevice, dstContext, srcDevice, srcContext, ByteCount, hStream, true, true);
}

TALLY_ENTRY(cuMemcpyHtoA_v3020)(CUarray dstArray, size_t dstOffset, const void* srcHost, size_t ByteCount) {
  return to_array(dstArray, dstOffset, srcHost, ByteCount, nullptr, false, false);
}
TALLY_ENTRY(cuMemcpyHtoA_v7000_ptds)(CUarray dstArray, size_t dstOffset, const void* srcHost, size_t ByteCount) {
  return to_array(dstArray, dstOffset, srcHost, ByteCount, nullptr, true, false);
}
TALLY_ENTRY(cuMemcpyHtoAAsync_v3020)(CUarray dstArray, size_t dstOffset, const void* srcHost, size_t ByteCount,
                                     CUstream hStream) {
  return to_array(dstArray, dstOffset, srcHost, ByteCount, hStream, false, true);
}
TALLY_ENTRY(cuMemcpyHtoAAsync_v7000_ptsz)(CUarray dstArray, size_t dstOffset, const void* srcHost, size_t ByteCount,
                                          CUstream hStream) {
  return to_array(dstArray, dstOffset, srcHost, ByteCount, hStream, true, true);
}
TALLY_ENTRY(cuMemcpyAtoH_v3020)(void* dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount) {
  return from_array(dstHost, srcArray, srcOffset, ByteCount, nullptr, false, false);
}
TALLY_ENTRY(cuMemcpyAtoH_v7000_ptds)(void* dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount) {
  return from_array(dstHost, srcArray, srcOffset, ByteCount, nullptr, true, false);
}
TALLY_ENTRY(cuMemcpyAtoHAsync_v3020)(void* dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount,
                                     CUstream hStream) {
  return from_array(dstHost, srcArray, srcOffset, ByteCount, hStream, false, true);
}
TALLY_ENTRY(cuMemcpyAtoHAsync_v7000_ptsz)(void* dstHost, CUarray srcArray, size_t srcOffset, size_t ByteCount,
                                          CUstream hStream) {
  return from_array(dstHost, srcArray, srcOffset, ByteCount, hStream, true, true);
}
TALLY_ENTRY(cuMemcpyDtoA_v3020)(CUarray dstArray, size_t dstOffset, CUdeviceptr_v2 srcDevice, size_t ByteCount) {
  return array_device(dstArray, dstOffset, srcDevice, ByteCount, true, false);
}
TALLY_ENTRY(cuMemcpyDtoA_v7000_ptds)(CUarray dstArray, size_t dstOffset, CUdeviceptr_v2 srcDevice, size_t ByteCount) {
  return array_device(dstArray, dstOffset, srcDevice, ByteCount, true, true);
}
TALLY_ENTRY(cuMemcpyAtoD_v3020)(CUdeviceptr_v2 dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount) {
  return array_device(srcArray, srcOffset, dstDevice, ByteCount, false, false);
}
TALLY_ENTRY(cuMemcpyAtoD_v7000_ptds)(CUdeviceptr_v2 dstDevice, CUarray srcArray, size_t srcOffset, size_t ByteCount) {
  return array_device(srcArray, srcOffset, dstDevice, ByteCount, false, true);
}
TALLY_ENTRY(cuMemcpyAtoA_v3020)(CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset,
                                size_t ByteCount) {
  return array_array(dstArray, dstOffset, srcArray, srcOffset, ByteCount, false);
}
TALLY_ENTRY(cuMemcpyAtoA_v7000_ptds)(CUarray dstArray, size_t dstOffset, CUarray srcArray, size_t srcOffset,
                                     size_t ByteCount) {
  return array_array(dstArray, dstOffset, srcArray, srcOffset, ByteCount, true);
}
