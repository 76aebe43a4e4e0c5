// Device memory as the server hands it out (memory.cpp), for the other ways a job
// gets it: the stream-ordered allocator's pools (memory_pools.cpp).
#pragma once
#include <cstddef>

#include "driver_headers.h"

namespace tally::client {

// One MemAlloc request: the server charges the job's quota and the high-priority
// reserve; the range joins the client's address map.
CUresult allocate_device_memory(CUdeviceptr* dptr, size_t bytes);

// A synchronous free of device memory the job allocated (cuMemFree's).
CUresult free_device_memory(CUdeviceptr dptr);

// After the server took a free of `dptr`: the client's own records of it go.
void forget_device_memory(CUdeviceptr dptr);

}  // namespace tally::client
