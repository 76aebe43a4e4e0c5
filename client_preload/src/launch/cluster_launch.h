// Thread-block clusters at launch (cluster_launch.cpp): cuLaunchKernelEx's cluster
// attributes, and the checks Hopper's driver makes on a cluster launch before it
// returns (so the job gets CUDA's code from the launch call, not later).
#pragma once
#include <cstdint>

#include "driver_headers.h"
#include "driver_objects.h"

namespace tally::client {

// Blocks per cluster on H100/H200: any kernel, and one that set
// CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED.
constexpr uint32_t kPortableClusterBlocks = 8;
constexpr uint32_t kNonPortableClusterBlocks = 16;

// Whether `id` is one of the cluster attributes (parsed here, not by launch.cpp).
bool is_cluster_attribute(CUlaunchAttributeID id);

// The cluster shape of cuLaunchKernelEx's attributes into `cluster` ({0, 0, 0}: none),
// or CUDA_ERROR_INVALID_VALUE for a bad value (a zero dimension, an unknown policy).
CUresult read_cluster_attributes(const CUlaunchConfig* config, uint32_t cluster[3]);

// The cluster shape a launch runs with into `cluster` ({0, 0, 0}: none): the one it
// `asked` for, else the kernel's required one (__cluster_dims__ or cuFuncSetAttribute),
// checked against the device's limits and the grid. On refusal the reason goes to
// the job's stderr and driver error log.
CUresult check_cluster(const FunctionObject* fn, const unsigned grid[3], const uint32_t asked[3],
                       uint32_t cluster[3]);

}  // namespace tally::client
