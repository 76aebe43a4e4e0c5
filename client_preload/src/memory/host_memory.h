// Pinned host memory (host_memory.cpp), as other parts of the client see it.
#pragma once
#include <cstddef>
#include <cstdint>

#include "driver_headers.h"

namespace tally::client {

// cuMemGetAddressRange of a pointer into pinned host memory the device reaches
// (its device pointer is its host address, as under unified addressing): the
// range the job allocated or registered. CUDA_ERROR_NOT_FOUND for any other pointer.
CUresult pinned_address_range(uint64_t ptr, CUdeviceptr_v2* base, size_t* size);

}  // namespace tally::client
