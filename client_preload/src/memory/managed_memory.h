// Managed memory (cuMemAllocManaged): see managed_memory.cpp.
#pragma once
#include <cstddef>
#include <cstdint>

#include "driver_headers.h"

namespace tally::client {

// A managed allocation of `bytes` (flags: CU_MEM_ATTACH_GLOBAL or _HOST), as
// cuMemAllocManaged makes it; also what a managed memory pool allocates (memory_pools.cpp).
CUresult allocate_managed(CUdeviceptr* dptr, size_t bytes, unsigned flags);

// Called once the server freed the managed allocation [start, start + size):
// unmaps the job's view of it and forgets its advice.
void forget_managed(uint64_t start, uint64_t size);

}  // namespace tally::client
