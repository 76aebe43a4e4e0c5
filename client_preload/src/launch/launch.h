// Kernel launches (launch.cpp): what graph nodes (graph_nodes.cpp) and cooperative
// launches (cooperative.cpp) share with them.
#pragma once
#include <cstddef>
#include <cstdint>

#include "cupti/device_work.h"
#include "driver_headers.h"

namespace tally::client {

// A launch's `extra` argument: CU_LAUNCH_PARAM_BUFFER_POINTER, ptr,
// CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END. The parameter block and
// its size, or CUDA_ERROR_INVALID_VALUE.
CUresult read_launch_extra(void** extra, const void** buffer, size_t* size);

struct FunctionObject;

// No cluster dimension asked (the kernel's compile-time one, if any, applies).
inline constexpr uint32_t kNoCluster[3] = {0, 0, 0};

// Checks a launch and sends it (or records it on a capturing stream); flags are
// protocol::LaunchFlag bits, `cluster` cuLaunchKernelEx's cluster dimension,
// `call` the entry point making the launch (for tally's CUPTI records; kNone, as
// for a graph's kernel node, makes no driver record).
CUresult launch_kernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned shared, CUstream stream, void** kernel_params, void** extra, bool per_thread,
                       uint32_t flags, const uint32_t cluster[3] = kNoCluster,
                       cupti::LaunchCall call = cupti::LaunchCall::kNone);

// cooperative.cpp: the LaunchFlag bits cuLaunchKernelEx's attributes ask for, and
// CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE (with the reason logged) for a
// cooperative grid that the occupancy calculator says cannot be co-resident.
uint32_t launch_flags(const CUlaunchConfig* config);
CUresult check_cooperative_grid(CUfunction f, const FunctionObject* fn, unsigned gx, unsigned gy, unsigned gz,
                                unsigned block_threads, unsigned shared);

}  // namespace tally::client
