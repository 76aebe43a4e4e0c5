// Device memory: allocation and freeing (forwarded: the server owns every
// allocation and enforces the job's quota) and address ranges (answered from the
// client's own map). The stream-ordered allocator and its pools are in
// memory_pools.cpp; their allocations are made here too.
#include <cstring>

#include "memory/address_map.h"
#include "connection/connection.h"
#include "contexts/contexts.h"
#include "entry_points/entry_point.h"
#include "graphs/memory_nodes.h"
#include "memory/device_memory.h"
#include "memory/host_memory.h"
#include "memory/managed_memory.h"
#include "memory/memory_pools.h"

namespace tally::client {
namespace {

CUresult allocate(CUdeviceptr* dptr, size_t bytes) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  protocol::MemAllocReplyMsg out{};
  if (CUresult rc = request_reply(protocol::MemAllocMsg{bytes}, protocol::MessageKind::MemAllocReply, &out);
      rc != CUDA_SUCCESS)
    return rc;
  device_ranges().add(out.dptr, bytes, DeviceRangeKind::kAllocation);
  *dptr = out.dptr;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult allocate_device_memory(CUdeviceptr* dptr, size_t bytes) { return allocate(dptr, bytes); }

void forget_device_memory(CUdeviceptr dptr) {
  forget_context_resource(ContextResource::kDeviceMemory, dptr);
  pool_allocation_freed(dptr);
  auto found = device_ranges().remove(dptr);
  forget_pointer_settings(dptr);
  if (found && found->value == DeviceRangeKind::kManaged) forget_managed(found->start, found->size);
}

namespace {

CUresult free_now(CUdeviceptr dptr) {
  // cudart frees NULL as a no-op; so does the driver.
  if (dptr == 0) return Connection::instance().usable();
  if (CUresult rc; close_if_imported_pool_pointer(dptr, &rc)) return rc;
  if (CUresult rc; free_if_host_pool_pointer(dptr, false, nullptr, false, &rc)) return rc;
  if (CUresult rc; free_graph_allocation(dptr, &rc)) return rc;   // marks it freed; its graphs keep the memory
  return free_device_memory(dptr);
}

}  // namespace

CUresult free_device_memory(CUdeviceptr dptr) {
  protocol::MemFreeMsg m{dptr};
  CUresult rc = Connection::instance().request_done(m);
  if (rc == CUDA_SUCCESS) forget_device_memory(dptr);
  return rc;
}

}  // namespace tally::client

using namespace tally::client;
namespace protocol = tally::protocol;

// cuMemAlloc and cuMemAllocPitch memory belongs to the current context (stream-ordered
// allocations belong to none).
static CUresult allocate_in_context(CUdeviceptr* dptr, size_t bytes) {
  if (CUresult rc = check_current_context_for_new_resource(); rc != CUDA_SUCCESS) return rc;
  CUresult rc = allocate(dptr, bytes);
  if (rc == CUDA_SUCCESS) note_context_resource(ContextResource::kDeviceMemory, *dptr);
  return rc;
}

TALLY_ENTRY(cuMemAlloc_v3020)(CUdeviceptr_v2* dptr, size_t bytesize) { return allocate_in_context(dptr, bytesize); }

TALLY_ENTRY(cuMemAllocPitch_v3020)(CUdeviceptr_v2* dptr, size_t* pPitch, size_t WidthInBytes, size_t Height,
                                   unsigned int ElementSizeBytes) {
  if (pPitch == nullptr || WidthInBytes == 0 || Height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  // Rows start on the device's pitch alignment, as the driver lays them out.
  size_t align = static_cast<size_t>(Connection::instance().device().attributes[CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT]);
  if (align == 0 || (align & (align - 1)) != 0) align = 512;
  const size_t pitch = (WidthInBytes + align - 1) & ~(align - 1);
  CUresult rc = allocate_in_context(dptr, pitch * Height);
  if (rc == CUDA_SUCCESS) *pPitch = pitch;
  return rc;
}

TALLY_ENTRY(cuMemFree_v3020)(CUdeviceptr_v2 dptr) { return free_now(dptr); }

TALLY_ENTRY(cuMemGetInfo_v3020)(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  protocol::MemInfoReplyMsg info{};
  if (CUresult rc = request_reply(protocol::MemGetInfoMsg{}, protocol::MessageKind::MemInfoReply, &info);
      rc != CUDA_SUCCESS)
    return rc;
  *free = info.free;
  *total = info.total;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuMemGetAddressRange_v3020)(CUdeviceptr_v2* pbase, size_t* psize, CUdeviceptr_v2 dptr) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  auto found = device_ranges().find(dptr);
  if (!found) return pinned_address_range(dptr, pbase, psize);  // mapped pinned memory's device pointer
  if (pbase != nullptr) *pbase = found->start;
  if (psize != nullptr) *psize = found->size;
  return CUDA_SUCCESS;
}
