// cuMemcpyBatchAsync and cuMemcpy3DBatchAsync (CUDA 12.8's forms with failIdx, 13.0's
// without, and their _ptsz forms): a batch of copies (1-D; or 3-D between pointers and
// CUDA arrays) that runs, as a whole, in stream order, the copies within it in no order
// the job may rely on. tally issues them one after another on the stream (copies.h), as
// cuMemcpyAsync and cuMemcpy3DAsync, which is one of the orders the driver may choose.
// Each copy's source access order says when its source may be read:
//   STREAM           in stream order, as any async copy;
//   ANY              out of stream order, even after the call returns: stream order is
//                    one such time;
//   DURING_API_CALL  before the call returns: a host source is read during the call
//                    anyway (copies.h), a device source is read by its copy on the
//                    stream, so the call waits for the stream (unless it is capturing:
//                    a captured copy reads nothing until its graph runs).
// Location hints and CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE are hints the driver may
// ignore; tally's device has one location.
#include <cstdint>
#include <initializer_list>

#include "arrays/cuda_arrays.h"
#include "copies/copies.h"
#include "entry_points/entry_point.h"
#include "generated/entry_points.h"

namespace tally::client {
namespace {

constexpr size_t kNoFailure = ~size_t{0};

bool valid_order(CUmemcpySrcAccessOrder order) {
  return order == CU_MEMCPY_SRC_ACCESS_ORDER_STREAM || order == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL ||
         order == CU_MEMCPY_SRC_ACCESS_ORDER_ANY;
}

// Whether the attributes cover the batch as cuda.h requires: attrsIdxs starts at 0,
// rises, stays below count; every entry names a source access order.
bool valid_attributes(size_t count, const CUmemcpyAttributes* attrs, const size_t* indices, size_t num_attrs) {
  if (attrs == nullptr || indices == nullptr || num_attrs == 0 || num_attrs > count || indices[0] != 0) return false;
  for (size_t k = 0; k < num_attrs; ++k) {
    if (k > 0 && indices[k] <= indices[k - 1]) return false;
    if (indices[k] >= count) return false;
    if (!valid_order(attrs[k].srcAccessOrder)) return false;
  }
  return true;
}

// A device source read "during the API call": its copy on the stream has read it once the
// stream has run (a capturing stream reads nothing until its graph runs).
CUresult wait_for_sources(CUstream stream, bool per_thread) {
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult rc = per_thread ? tally_entry_cuStreamIsCapturing_v10000_ptsz(stream, &capture)
                           : tally_entry_cuStreamIsCapturing_v10000(stream, &capture);
  if (rc != CUDA_SUCCESS || capture != CU_STREAM_CAPTURE_STATUS_NONE) return rc;
  return per_thread ? tally_entry_cuStreamSynchronize_v7000_ptsz(stream) : tally_entry_cuStreamSynchronize_v2000(stream);
}

CUresult copy_batch(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count, CUmemcpyAttributes* attrs,
                    size_t* indices, size_t num_attrs, size_t* fail_index, CUstream stream, bool per_thread) {
  if (fail_index != nullptr) *fail_index = kNoFailure;
  // the legacy NULL stream is refused (cuda.h); 0 in a _ptsz form is the thread's own stream
  if ((stream == nullptr && !per_thread) || stream == CU_STREAM_LEGACY) return CUDA_ERROR_INVALID_VALUE;
  if (count == 0 || dsts == nullptr || srcs == nullptr || sizes == nullptr ||
      !valid_attributes(count, attrs, indices, num_attrs))
    return CUDA_ERROR_INVALID_VALUE;
  bool wait = false;  // a device source read "during the API call"
  size_t k = 0;
  for (size_t i = 0; i < count; ++i) {
    while (k + 1 < num_attrs && indices[k + 1] <= i) ++k;
    const CUresult rc = per_thread ? tally_entry_cuMemcpyAsync_v7000_ptsz(dsts[i], srcs[i], sizes[i], stream)
                                   : tally_entry_cuMemcpyAsync_v4000(dsts[i], srcs[i], sizes[i], stream);
    if (rc != CUDA_SUCCESS) {
      if (fail_index != nullptr) *fail_index = i;
      return rc;
    }
    wait = wait || (attrs[k].srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL &&
                    is_device_address(srcs[i]));
  }
  return wait ? wait_for_sources(stream, per_thread) : CUDA_SUCCESS;
}

// Bytes per element of a 3-D batch copy (cuda.h: 1 between pointers, else the CUDA
// array's texel, the same for both arrays), or 0 when it has none.
size_t element_bytes(const CUmemcpy3DOperand& src, const CUmemcpy3DOperand& dst) {
  size_t bytes = 0;
  for (const CUmemcpy3DOperand* op : {&src, &dst}) {
    if (op->type != CU_MEMCPY_OPERAND_TYPE_ARRAY) continue;
    ArrayLayout layout{};
    if (array_layout(op->op.array.array, &layout) != CUDA_SUCCESS) return 0;
    const size_t texel = texel_bytes(layout.desc.Format, layout.desc.NumChannels);
    if (texel == 0 || (bytes != 0 && bytes != texel)) return 0;
    bytes = texel;
  }
  return bytes == 0 ? 1 : bytes;
}

// One operand of a 3-D batch copy as the source or destination fields of CUDA_MEMCPY3D.
bool describe(const CUmemcpy3DOperand& op, size_t element, const CUextent3D& extent, CUmemorytype* type,
              CUdeviceptr* device, CUarray* array, size_t* x_bytes, size_t* y, size_t* z, size_t* pitch,
              size_t* height) {
  if (op.type == CU_MEMCPY_OPERAND_TYPE_POINTER) {
    const size_t row = op.op.ptr.rowLength, layer = op.op.ptr.layerHeight;
    if ((row != 0 && row < extent.width) || (layer != 0 && layer < extent.height)) return false;
    *type = CU_MEMORYTYPE_UNIFIED;   // device or host memory, as the pointer says
    *device = op.op.ptr.ptr;
    *pitch = (row != 0 ? row : extent.width) * element;
    *height = layer != 0 ? layer : extent.height;
    return op.op.ptr.ptr != 0;
  }
  if (op.type != CU_MEMCPY_OPERAND_TYPE_ARRAY) return false;
  *type = CU_MEMORYTYPE_ARRAY;
  *array = op.op.array.array;
  *x_bytes = op.op.array.offset.x * element;
  *y = op.op.array.offset.y;
  *z = op.op.array.offset.z;
  return true;
}

CUresult copy_3d_batch(size_t count, CUDA_MEMCPY3D_BATCH_OP* ops, size_t* fail_index, unsigned long long flags,
                       CUstream stream, bool per_thread) {
  if (fail_index != nullptr) *fail_index = kNoFailure;
  if ((stream == nullptr && !per_thread) || stream == CU_STREAM_LEGACY) return CUDA_ERROR_INVALID_VALUE;
  if (count == 0 || ops == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  bool wait = false;
  for (size_t i = 0; i < count; ++i) {
    const CUDA_MEMCPY3D_BATCH_OP& op = ops[i];
    const CUextent3D& e = op.extent;
    const size_t element = element_bytes(op.src, op.dst);
    CUDA_MEMCPY3D c{};
    CUresult rc = CUDA_ERROR_INVALID_VALUE;
    if (valid_order(op.srcAccessOrder) && e.width != 0 && e.height != 0 && e.depth != 0 && element != 0 &&
        describe(op.src, element, e, &c.srcMemoryType, &c.srcDevice, &c.srcArray, &c.srcXInBytes, &c.srcY, &c.srcZ,
                 &c.srcPitch, &c.srcHeight) &&
        describe(op.dst, element, e, &c.dstMemoryType, &c.dstDevice, &c.dstArray, &c.dstXInBytes, &c.dstY, &c.dstZ,
                 &c.dstPitch, &c.dstHeight)) {
      c.srcHost = reinterpret_cast<const void*>(c.srcDevice);
      c.dstHost = reinterpret_cast<void*>(c.dstDevice);
      c.WidthInBytes = e.width * element;
      c.Height = e.height;
      c.Depth = e.depth;
      rc = per_thread ? tally_entry_cuMemcpy3DAsync_v7000_ptsz(&c, stream) : tally_entry_cuMemcpy3DAsync_v3020(&c, stream);
    }
    if (rc != CUDA_SUCCESS) {
      if (fail_index != nullptr) *fail_index = i;
      return rc;
    }
    // a CUDA array is device memory, read by the copy on the stream
    wait = wait || (op.srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL &&
                    (op.src.type == CU_MEMCPY_OPERAND_TYPE_ARRAY || is_device_address(op.src.op.ptr.ptr)));
  }
  return wait ? wait_for_sources(stream, per_thread) : CUDA_SUCCESS;
}

}  // namespace
}  // namespace tally::client

using tally::client::copy_3d_batch;
using tally::client::copy_batch;

TALLY_ENTRY(cuMemcpyBatchAsync_v12080)(CUdeviceptr_v2* dsts, CUdeviceptr_v2* srcs, size_t* sizes, size_t count,
                                       CUmemcpyAttributes_v1* attrs, size_t* attrIdxs, size_t numAttrs,
                                       size_t* failIdx, CUstream hStream) {
  return copy_batch(dsts, srcs, sizes, count, attrs, attrIdxs, numAttrs, failIdx, hStream, false);
}
TALLY_ENTRY(cuMemcpyBatchAsync_v12080_ptsz)(CUdeviceptr_v2* dsts, CUdeviceptr_v2* srcs, size_t* sizes, size_t count,
                                            CUmemcpyAttributes_v1* attrs, size_t* attrIdxs, size_t numAttrs,
                                            size_t* failIdx, CUstream hStream) {
  return copy_batch(dsts, srcs, sizes, count, attrs, attrIdxs, numAttrs, failIdx, hStream, true);
}
TALLY_ENTRY(cuMemcpyBatchAsync_v13000)(CUdeviceptr_v2* dsts, CUdeviceptr_v2* srcs, size_t* sizes, size_t count,
                                       CUmemcpyAttributes_v1* attrs, size_t* attrIdxs, size_t numAttrs,
                                       CUstream hStream) {
  return copy_batch(dsts, srcs, sizes, count, attrs, attrIdxs, numAttrs, nullptr, hStream, false);
}
TALLY_ENTRY(cuMemcpyBatchAsync_v13000_ptsz)(CUdeviceptr_v2* dsts, CUdeviceptr_v2* srcs, size_t* sizes, size_t count,
                                            CUmemcpyAttributes_v1* attrs, size_t* attrIdxs, size_t numAttrs,
                                            CUstream hStream) {
  return copy_batch(dsts, srcs, sizes, count, attrs, attrIdxs, numAttrs, nullptr, hStream, true);
}

TALLY_ENTRY(cuMemcpy3DBatchAsync_v12080)(size_t numParams, CUDA_MEMCPY3D_BATCH_OP_v1* opList, size_t* failIdx,
                                         unsigned long long flags, CUstream hStream) {
  return copy_3d_batch(numParams, opList, failIdx, flags, hStream, false);
}
TALLY_ENTRY(cuMemcpy3DBatchAsync_v12080_ptsz)(size_t numParams, CUDA_MEMCPY3D_BATCH_OP_v1* opList, size_t* failIdx,
                                              unsigned long long flags, CUstream hStream) {
  return copy_3d_batch(numParams, opList, failIdx, flags, hStream, true);
}
TALLY_ENTRY(cuMemcpy3DBatchAsync_v13000)(size_t numParams, CUDA_MEMCPY3D_BATCH_OP_v1* opList,
                                         unsigned long long flags, CUstream hStream) {
  return copy_3d_batch(numParams, opList, nullptr, flags, hStream, false);
}
TALLY_ENTRY(cuMemcpy3DBatchAsync_v13000_ptsz)(size_t numParams, CUDA_MEMCPY3D_BATCH_OP_v1* opList,
                                              unsigned long long flags, CUstream hStream) {
  return copy_3d_batch(numParams, opList, nullptr, flags, hStream, true);
}
