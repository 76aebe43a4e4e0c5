// Kernel launches (launch.cpp): what graph nodes (graph_nodes.cpp) share with them.
#pragma once
#include <cstddef>

#include "driver_headers.h"

namespace tally::client {

// A launch's `extra` argument: CU_LAUNCH_PARAM_BUFFER_POINTER, ptr,
// CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END. The parameter block and
// its size, or CUDA_ERROR_INVALID_VALUE.
CUresult read_launch_extra(void** extra, const void** buffer, size_t* size);

}  // namespace tally::client
