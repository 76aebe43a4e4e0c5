// cuPointerGetAttribute(s): answered from the client's address maps (device
// allocations and module globals; pinned host memory). Boolean attributes are
// written as 4-byte unsigned integers: cudart reads IS_MANAGED as 4 bytes
// (measured, cudart 13.0 and 13.2: with a 1-byte write the stack garbage above it
// made cudaPointerGetAttributes call every pointer "managed", and PyTorch's
// is_pinned() false). Readers of a 1-byte bool (cuda-python) see the right low byte.
#include <cstring>

#include "memory/address_map.h"
#include "memory/memory_pools.h"
#include "connection/connection.h"
#include "contexts/contexts.h"
#include "entry_points/entry_point.h"
#include "logging/trace.h"

namespace tally::client {
namespace {

struct PointerFacts {
  bool known = false;
  bool device = false;   // device memory (else pinned host memory)
  uint64_t start = 0, size = 0;
  bool managed = false;  // device memory that is host memory at the same address too
  bool sync_memops = true;
};

std::mutex g_settings_mutex;
std::set<uint64_t> g_sync_memops_off;   // device range starts

PointerFacts facts_of(uint64_t ptr) {
  if (auto d = device_ranges().find(ptr)) {
    std::lock_guard lock(g_settings_mutex);
    return {true, true, d->start, d->size, d->value == DeviceRangeKind::kManaged, !g_sync_memops_off.count(d->start)};
  }
  if (auto h = pinned_ranges().find(ptr)) return {true, false, h->start, h->size};
  return {};
}

template <class T>
void put(void* data, T value) {
  std::memcpy(data, &value, sizeof value);
}

// Writes one attribute of a known pointer (or the "not a CUDA pointer" defaults).
CUresult write_attribute(void* data, CUpointer_attribute attribute, uint64_t ptr, const PointerFacts& f) {
  switch (attribute) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: {
      CUcontext ctx = nullptr;
      if (f.known) ctx = resource_context(f.device ? ContextResource::kDeviceMemory : ContextResource::kHostMemory, f.start);
      put(data, ctx);
      return CUDA_SUCCESS;
    }
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      put(data, static_cast<unsigned>(!f.known ? 0 : f.device ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      put(data, static_cast<CUdeviceptr>(f.known ? ptr : 0));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      if (f.known && f.device && !f.managed) return CUDA_ERROR_INVALID_VALUE;  // device memory has no host address
      put(data, reinterpret_cast<void*>(f.known ? ptr : 0));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      put(data, static_cast<unsigned long long>(f.start));  // allocations never share a start address
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      put(data, f.managed ? 1u : 0u);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
      put(data, 0u);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
      put(data, f.known && f.sync_memops ? 1u : 0u);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      put(data, f.known ? 1u : 0u);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      put(data, f.known ? 0 : -1);
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      put(data, static_cast<CUdeviceptr>(f.start));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      put(data, static_cast<size_t>(f.size));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
      put(data, static_cast<unsigned long long>(0));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      put(data, static_cast<unsigned>(f.known ? CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE
                                              : CU_POINTER_ATTRIBUTE_ACCESS_FLAG_NONE));
      return CUDA_SUCCESS;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      // the pool it came from: device, managed or (pinned host memory) a host pool
      put(data, f.known ? pool_of(f.start) : static_cast<CUmemoryPool>(nullptr));
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;  // P2P tokens and anything newer
  }
}

}  // namespace

void forget_pointer_settings(uint64_t start) {
  std::lock_guard lock(g_settings_mutex);
  g_sync_memops_off.erase(start);
}

}  // namespace tally::client

using namespace tally::client;
namespace protocol = tally::protocol;

TALLY_ENTRY(cuPointerGetAttribute_v4000)(void* data, CUpointer_attribute attribute, CUdeviceptr_v2 ptr) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  PointerFacts f = facts_of(ptr);
  if (!f.known) return CUDA_ERROR_INVALID_VALUE;
  return write_attribute(data, attribute, ptr, f);
}

// Unlike the single form, an unknown pointer is not an error: every attribute
// gets its "not a CUDA pointer" value.
TALLY_ENTRY(cuPointerGetAttributes_v7000)(unsigned int numAttributes, CUpointer_attribute* attributes, void** data,
                                          CUdeviceptr_v2 ptr) {
  if (numAttributes == 0 || attributes == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  PointerFacts f = facts_of(ptr);
  for (unsigned i = 0; i < numAttributes; ++i) {
    trace_line("cuPointerGetAttributes %#llx attribute %d (%s)", static_cast<unsigned long long>(ptr),
               static_cast<int>(attributes[i]), !f.known ? "unknown" : f.managed ? "managed" : f.device ? "device" : "pinned host");
    if (data[i] == nullptr) continue;
    CUresult rc = write_attribute(data[i], attributes[i], ptr, f);
    if (rc != CUDA_SUCCESS && attributes[i] != CU_POINTER_ATTRIBUTE_HOST_POINTER) return rc;
    if (rc != CUDA_SUCCESS) put(data[i], static_cast<void*>(nullptr));
  }
  return CUDA_SUCCESS;
}

// Only SYNC_MEMOPS is settable, on device memory, as the driver documents. The value is
// read by its first byte: a 4-byte unsigned int (cuda.h's examples) and a 1-byte bool
// (cuda-bindings' conversion of True/False) agree there on a little-endian host.
TALLY_ENTRY(cuPointerSetAttribute_v6000)(const void* value, CUpointer_attribute attribute, CUdeviceptr_v2 ptr) {
  if (value == nullptr || attribute != CU_POINTER_ATTRIBUTE_SYNC_MEMOPS) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  auto d = device_ranges().find(ptr);
  if (!d) return CUDA_ERROR_INVALID_VALUE;
  unsigned char on = 0;
  std::memcpy(&on, value, 1);
  std::lock_guard lock(g_settings_mutex);
  if (on != 0) {
    g_sync_memops_off.erase(d->start);
  } else {
    g_sync_memops_off.insert(d->start);
  }
  return CUDA_SUCCESS;
}
