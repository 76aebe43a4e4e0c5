// CUDA arrays: creation, descriptors, destruction (cuda_arrays.h says what tally models).
#include "arrays/cuda_arrays.h"

#include <memory>
#include <mutex>
#include <unordered_map>

#include "connection/connection.h"
#include "entry_points/entry_point.h"
#include "logging/log.h"
#include "memory/device_memory.h"

namespace tally::client {
namespace {

struct CudaArray {
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  CUdeviceptr dptr = 0;
  size_t row_bytes = 0, rows = 0, bytes = 0;
};

std::mutex g_mutex;
std::unordered_map<CUarray, std::unique_ptr<CudaArray>> g_arrays;

}  // namespace

size_t texel_bytes(CUarray_format format, unsigned channels) {
  size_t channel = 0;
  switch (format) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: channel = 1; break;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16: case CU_AD_FORMAT_HALF: channel = 2; break;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32: case CU_AD_FORMAT_FLOAT: channel = 4; break;
    // The normalized formats name their channel count: NumChannels must agree.
    case CU_AD_FORMAT_UNORM_INT8X1: case CU_AD_FORMAT_SNORM_INT8X1: return channels == 1 ? 1 : 0;
    case CU_AD_FORMAT_UNORM_INT8X2: case CU_AD_FORMAT_SNORM_INT8X2: return channels == 2 ? 2 : 0;
    case CU_AD_FORMAT_UNORM_INT8X4: case CU_AD_FORMAT_SNORM_INT8X4: return channels == 4 ? 4 : 0;
    case CU_AD_FORMAT_UNORM_INT16X1: case CU_AD_FORMAT_SNORM_INT16X1: return channels == 1 ? 2 : 0;
    case CU_AD_FORMAT_UNORM_INT16X2: case CU_AD_FORMAT_SNORM_INT16X2: return channels == 2 ? 4 : 0;
    case CU_AD_FORMAT_UNORM_INT16X4: case CU_AD_FORMAT_SNORM_INT16X4: return channels == 4 ? 8 : 0;
    case CU_AD_FORMAT_UNORM_INT_101010_2: return channels == 4 ? 4 : 0;
    default: return 0;
  }
  return channels == 1 || channels == 2 || channels == 4 ? channel * channels : 0;
}

namespace {

// The flags whose arrays are plain memory here (they only change how textures and
// surfaces may use the array); sparse and deferred-mapping arrays are not modeled.
constexpr unsigned kLayoutFreeFlags = CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_SURFACE_LDST | CUDA_ARRAY3D_CUBEMAP |
                                      CUDA_ARRAY3D_TEXTURE_GATHER | CUDA_ARRAY3D_DEPTH_TEXTURE |
                                      CUDA_ARRAY3D_COLOR_ATTACHMENT;

CUresult create(CUarray* out, const CUDA_ARRAY3D_DESCRIPTOR& d) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (d.Flags & (CUDA_ARRAY3D_SPARSE | CUDA_ARRAY3D_DEFERRED_MAPPING)) {
    log_error("cuArray3DCreate: sparse and deferred-mapping CUDA arrays are not supported by tally "
              "(CUDA_ERROR_NOT_SUPPORTED)");
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (d.Flags & ~kLayoutFreeFlags) return CUDA_ERROR_INVALID_VALUE;
  const size_t texel = texel_bytes(d.Format, d.NumChannels);
  if (texel == 0 || d.Width == 0 || (d.Height == 0 && d.Depth != 0)) return CUDA_ERROR_INVALID_VALUE;
  // A cubemap is 6 square faces (times the layers of a layered one).
  if ((d.Flags & CUDA_ARRAY3D_CUBEMAP) &&
      (d.Width != d.Height || d.Depth == 0 || ((d.Flags & CUDA_ARRAY3D_LAYERED) ? d.Depth % 6 : d.Depth != 6)))
    return CUDA_ERROR_INVALID_VALUE;
  auto array = std::make_unique<CudaArray>();
  array->desc = d;
  array->row_bytes = d.Width * texel;
  array->rows = d.Height == 0 ? 1 : d.Height;
  const size_t slices = d.Depth == 0 ? 1 : d.Depth;
  if (array->row_bytes / texel != d.Width || array->rows * slices > SIZE_MAX / array->row_bytes)
    return CUDA_ERROR_INVALID_VALUE;
  array->bytes = array->row_bytes * array->rows * slices;
  if (CUresult rc = allocate_device_memory(&array->dptr, array->bytes); rc != CUDA_SUCCESS) return rc;
  auto handle = reinterpret_cast<CUarray>(array.get());
  std::lock_guard lock(g_mutex);
  g_arrays[handle] = std::move(array);
  *out = handle;
  return CUDA_SUCCESS;
}

CudaArray* find(CUarray handle) {
  auto it = g_arrays.find(handle);
  return it == g_arrays.end() ? nullptr : it->second.get();
}

}  // namespace

CUresult array_place(CUarray handle, size_t x, size_t y, size_t z, ArrayPlace* out) {
  std::lock_guard lock(g_mutex);
  CudaArray* a = find(handle);
  if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const size_t slices = a->desc.Depth == 0 ? 1 : a->desc.Depth;
  if (x >= a->row_bytes || y >= a->rows || z >= slices) return CUDA_ERROR_INVALID_VALUE;
  const size_t offset = (z * a->rows + y) * a->row_bytes + x;
  *out = {a->dptr + offset, a->row_bytes, a->rows, a->bytes - offset};
  return CUDA_SUCCESS;
}

CUresult array_layout(CUarray handle, ArrayLayout* out) {
  std::lock_guard lock(g_mutex);
  CudaArray* a = find(handle);
  if (a == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *out = {a->desc, a->dptr, a->row_bytes, a->rows, a->bytes};
  return CUDA_SUCCESS;
}

CUresult array_span(CUarray handle, size_t offset, size_t n, uint64_t* address) {
  std::lock_guard lock(g_mutex);
  CudaArray* a = find(handle);
  if (a == nullptr || offset > a->bytes || n > a->bytes - offset) return CUDA_ERROR_INVALID_VALUE;
  *address = a->dptr + offset;
  return CUDA_SUCCESS;
}

}  // namespace tally::client

using namespace tally::client;

TALLY_ENTRY(cuArrayCreate_v3020)(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* pAllocateArray) {
  if (pAllocateArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = pAllocateArray->Width;
  d.Height = pAllocateArray->Height;
  d.Format = pAllocateArray->Format;
  d.NumChannels = pAllocateArray->NumChannels;
  return create(pHandle, d);
}

TALLY_ENTRY(cuArray3DCreate_v3020)(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* pAllocateArray) {
  if (pAllocateArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return create(pHandle, *pAllocateArray);
}

TALLY_ENTRY(cuArrayGetDescriptor_v3020)(CUDA_ARRAY_DESCRIPTOR* pArrayDescriptor, CUarray hArray) {
  if (pArrayDescriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_mutex);
  CudaArray* a = find(hArray);
  if (a == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (a->desc.Depth != 0) return CUDA_ERROR_INVALID_VALUE;   // a 3-D array has no 2-D descriptor
  pArrayDescriptor->Width = a->desc.Width;
  pArrayDescriptor->Height = a->desc.Height;
  pArrayDescriptor->Format = a->desc.Format;
  pArrayDescriptor->NumChannels = a->desc.NumChannels;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuArray3DGetDescriptor_v3020)(CUDA_ARRAY3D_DESCRIPTOR* pArrayDescriptor, CUarray hArray) {
  if (pArrayDescriptor == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard lock(g_mutex);
  CudaArray* a = find(hArray);
  if (a == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *pArrayDescriptor = a->desc;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuArrayDestroy_v2000)(CUarray hArray) {
  std::unique_ptr<CudaArray> gone;
  {
    std::lock_guard lock(g_mutex);
    auto it = g_arrays.find(hArray);
    if (it == g_arrays.end()) return CUDA_ERROR_INVALID_HANDLE;
    gone = std::move(it->second);
    g_arrays.erase(it);
  }
  return free_device_memory(gone->dptr);   // synchronous, as cuArrayDestroy is
}
