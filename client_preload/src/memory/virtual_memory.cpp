// Virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap,
// cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree), forwarded: the
// server owns address ranges and physical memory (counted against the job's
// quota) and checks every mapping. Reserved ranges join the client's device
// ranges, so unified-addressing copies and pointer attributes see device memory.
// Physical memory is device memory on device 0 only; sharing it with other jobs
// (POSIX file descriptors) is shareable_handles.cpp.
#include <cstring>

#include "memory/address_map.h"
#include "connection/connection.h"
#include "entry_points/entry_point.h"
#include "logging/log.h"
#include "memory/vmm_handles.h"

namespace tally::client {
namespace {

constexpr size_t kGranularity = 2 << 20;  // tally.backends.base.VMM_GRANULARITY; CUDA's on current GPUs

bool on_device_0(const CUmemLocation& location) {
  return location.type == CU_MEM_LOCATION_TYPE_DEVICE && location.id == 0;
}

CUresult check_prop(const CUmemAllocationProp* prop) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || !on_device_0(prop->location)) return CUDA_ERROR_INVALID_DEVICE;
  return CUDA_SUCCESS;
}

}  // namespace
}  // namespace tally::client

using namespace tally::client;
namespace protocol = tally::protocol;

TALLY_ENTRY(cuMemGetAllocationGranularity_v10020)(size_t* granularity, const CUmemAllocationProp* prop,
                                                  CUmemAllocationGranularity_flags option) {
  if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_prop(prop); rc != CUDA_SUCCESS) return rc;
  *granularity = kGranularity;
  return CUDA_SUCCESS;
}

// The address hint is honoured where that range is free (a hint, as CUDA's: the caller
// checks what it got; a cuda-backend tally-server places a migrated job's memory so).
// Flags must be 0.
TALLY_ENTRY(cuMemAddressReserve_v10020)(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                        unsigned long long flags) {
  if (ptr == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  protocol::MemAddressReplyMsg out{};
  if (CUresult rc = request_reply(protocol::MemAddressReserveMsg{size, alignment, addr}, protocol::MessageKind::MemAddressReply, &out);
      rc != CUDA_SUCCESS)
    return rc;
  device_ranges().add(out.dptr, size, DeviceRangeKind::kReservation);
  *ptr = out.dptr;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuMemAddressFree_v10020)(CUdeviceptr ptr, size_t size) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  CUresult rc = Connection::instance().request_done(protocol::MemAddressFreeMsg{ptr, size});
  if (rc == CUDA_SUCCESS) {
    device_ranges().remove(ptr);
    forget_pointer_settings(ptr);
  }
  return rc;
}

TALLY_ENTRY(cuMemCreate_v10020)(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                                unsigned long long flags) {
  if (handle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_prop(prop); rc != CUDA_SUCCESS) return rc;
  if ((prop->requestedHandleTypes & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0) {
    log_error("cuMemCreate: requested handle types 0x%x: tally shares physical memory by POSIX file descriptor "
              "only (CUDA_ERROR_NOT_SUPPORTED)", static_cast<unsigned>(prop->requestedHandleTypes));
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  protocol::MemCreateReplyMsg out{};
  if (CUresult rc = request_reply(protocol::MemCreateMsg{size}, protocol::MessageKind::MemCreateReply, &out); rc != CUDA_SUCCESS)
    return rc;
  remember_handle(out.handle, *prop);
  *handle = out.handle;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuMemRelease_v10020)(CUmemGenericAllocationHandle handle) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  CUresult rc = Connection::instance().request_done(protocol::MemReleaseMsg{handle});
  if (rc == CUDA_SUCCESS) forget_handle(handle);
  return rc;
}

TALLY_ENTRY(cuMemMap_v10020)(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                             unsigned long long flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  return Connection::instance().request_done(protocol::MemMapMsg{ptr, size, offset, handle});
}

TALLY_ENTRY(cuMemUnmap_v10020)(CUdeviceptr ptr, size_t size) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  return Connection::instance().request_done(protocol::MemUnmapMsg{ptr, size});
}

// Device 0 is the only location; read-only access is granted as read-write.
TALLY_ENTRY(cuMemSetAccess_v10020)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  for (size_t i = 0; i < count; ++i) {
    if (!on_device_0(desc[i].location)) return CUDA_ERROR_INVALID_DEVICE;
    const uint32_t access = desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_NONE ? 0 : 1;
    if (CUresult rc = Connection::instance().request_done(protocol::MemSetAccessMsg{ptr, size, access, 0});
        rc != CUDA_SUCCESS)
      return rc;
  }
  return CUDA_SUCCESS;
}
