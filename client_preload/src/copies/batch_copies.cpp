// cuMemcpyBatchAsync (CUDA 12.8's form with failIdx, 13.0's without, and their _ptsz
// forms): a batch of 1-D copies that runs, as a whole, in stream order, the copies
// within it in no order the job may rely on. tally issues them one after another on the
// stream (copies.h), which is one of the orders the driver may choose. Each copy's
// attributes say when its source may be read:
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

#include "copies/copies.h"
#include "entry_points/entry_point.h"
#include "generated/entry_points.h"

namespace tally::client {
namespace {

constexpr size_t kNoFailure = ~size_t{0};

// Whether the attributes cover the batch as cuda.h requires: attrsIdxs starts at 0,
// rises, stays below count; every entry names a source access order.
bool valid_attributes(size_t count, const CUmemcpyAttributes* attrs, const size_t* indices, size_t num_attrs) {
  if (attrs == nullptr || indices == nullptr || num_attrs == 0 || num_attrs > count || indices[0] != 0) return false;
  for (size_t k = 0; k < num_attrs; ++k) {
    if (k > 0 && indices[k] <= indices[k - 1]) return false;
    if (indices[k] >= count) return false;
    const CUmemcpySrcAccessOrder order = attrs[k].srcAccessOrder;
    if (order != CU_MEMCPY_SRC_ACCESS_ORDER_STREAM && order != CU_MEMCPY_SRC_ACCESS_ORDER_DURING_API_CALL &&
        order != CU_MEMCPY_SRC_ACCESS_ORDER_ANY)
      return false;
  }
  return true;
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
  if (!wait) return CUDA_SUCCESS;
  CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult rc = per_thread ? tally_entry_cuStreamIsCapturing_v10000_ptsz(stream, &capture)
                           : tally_entry_cuStreamIsCapturing_v10000(stream, &capture);
  if (rc != CUDA_SUCCESS || capture != CU_STREAM_CAPTURE_STATUS_NONE) return rc;
  return per_thread ? tally_entry_cuStreamSynchronize_v7000_ptsz(stream) : tally_entry_cuStreamSynchronize_v2000(stream);
}

}  // namespace
}  // namespace tally::client

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
