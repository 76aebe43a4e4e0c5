// What a memory pool handle points at, for the files that implement the pool
// calls: memory_pools.cpp (pools and allocation), memory_pool_attributes.cpp
// (attributes, access), memory_pool_sharing.cpp (export and import between jobs).
#pragma once
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "driver_headers.h"

namespace tally::client {

struct MemoryPool {
  CUmemPoolProps props{CU_MEM_ALLOCATION_TYPE_PINNED, CU_MEM_HANDLE_TYPE_NONE, {CU_MEM_LOCATION_TYPE_DEVICE, 0},
                       nullptr, 0, 0, {}};
  bool destroyed = false;              // its handle is gone; it lives until its last allocation is freed
  bool imported = false;               // made by cuMemPoolImportFromShareableHandle: pointers only, no allocation
  uint64_t export_id = 0;              // an imported pool: which exported pool it stands for
  // Attributes, kept and read back (a pool holds no freed memory, so they change nothing).
  uint64_t release_threshold = 0;
  int reuse_follow_event = 1, reuse_opportunistic = 1, reuse_internal = 1;
  // Bytes allocated from the pool and not freed, and the most there ever were since
  // the last reset. Reserved memory is the same: nothing is held back.
  uint64_t used = 0, used_high = 0;
  std::unordered_map<CUdeviceptr, uint64_t> sizes;   // its allocations
  // Devices' access as cuMemPoolSetAccess set it, for pools not on a device (managed and
  // host pools), which it may change; a device pool's own device keeps read-write access.
  CUmemAccess_flags device_access = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;

  bool managed() const { return props.allocType == CU_MEM_ALLOCATION_TYPE_MANAGED; }
  // A pinned host memory pool (location HOST, HOST_NUMA or HOST_NUMA_CURRENT).
  bool host() const { return !managed() && props.location.type != CU_MEM_LOCATION_TYPE_DEVICE; }
};

// The live pool behind `pool` with the pools' mutex held in *lock, or nullptr (the
// reason logged, naming `call`).
MemoryPool* lock_pool(CUmemoryPool pool, const char* call, std::unique_lock<std::mutex>* lock);

// Makes `pool` a live pool; its handle.
CUmemoryPool add_pool(MemoryPool* pool);

// Whether a pool may be created with these handle types (memory_pool_sharing.cpp).
bool pool_handle_types_supported(CUmemAllocationHandleType types);

}  // namespace tally::client
