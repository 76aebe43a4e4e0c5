// Thread-block clusters at launch: cuLaunchKernelEx's CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
// and CLUSTER_SCHEDULING_POLICY_PREFERENCE, and the driver's checks of a cluster
// launch. The shape travels in LaunchKernelMsg::cluster; the server's backend runs
// the blocks of each cluster together (tally/backends/clusters.py checks it again).
#include "launch/cluster_launch.h"

#include "connection/connection.h"
#include "logging/log.h"

namespace tally::client {

bool is_cluster_attribute(CUlaunchAttributeID id) {
  return id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION || id == CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
}

CUresult read_cluster_attributes(const CUlaunchConfig* config, uint32_t cluster[3]) {
  cluster[0] = cluster[1] = cluster[2] = 0;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& a = config->attrs[i];
    if (a.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      const auto& d = a.value.clusterDim;
      if (d.x == 0 || d.y == 0 || d.z == 0) return CUDA_ERROR_INVALID_VALUE;
      cluster[0] = d.x, cluster[1] = d.y, cluster[2] = d.z;
    } else if (a.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE) {
      // Where the device places a cluster's blocks: a hint, as scheduling is the server's.
      if (a.value.clusterSchedulingPolicyPreference > CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING)
        return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

namespace {

int attribute(const FunctionObject* fn, CUfunction_attribute a) {
  return fn->attributes[a].load(std::memory_order_relaxed);
}

CUresult refuse(const FunctionObject* fn, const uint32_t c[3], const char* reason) {
  log_error("launch of %s with cluster %ux%ux%u refused (CUDA_ERROR_INVALID_CLUSTER_SIZE): %s", fn->name.c_str(),
            c[0], c[1], c[2], reason);
  return CUDA_ERROR_INVALID_CLUSTER_SIZE;
}

}  // namespace

CUresult check_cluster(const FunctionObject* fn, const unsigned grid[3], const uint32_t asked[3],
                       uint32_t cluster[3]) {
  // The kernel's own shape: __cluster_dims__, or cuFuncSetAttribute's REQUIRED_CLUSTER_*.
  const uint32_t required[3] = {static_cast<uint32_t>(attribute(fn, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH)),
                                static_cast<uint32_t>(attribute(fn, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT)),
                                static_cast<uint32_t>(attribute(fn, CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH))};
  const bool has_required = required[0] != 0 || required[1] != 0 || required[2] != 0;
  if (has_required && (required[0] == 0 || required[1] == 0 || required[2] == 0)) {
    log_error("launch of %s refused (CUDA_ERROR_INVALID_VALUE): its required cluster dimensions %ux%ux%u must be "
              "all 0 or all positive", fn->name.c_str(), required[0], required[1], required[2]);
    return CUDA_ERROR_INVALID_VALUE;
  }
  const bool has_asked = asked[0] != 0;
  for (int i = 0; i < 3; ++i) cluster[i] = has_asked ? asked[i] : required[i];
  if (!has_asked && !has_required) {
    if (attribute(fn, CU_FUNC_ATTRIBUTE_CLUSTER_SIZE_MUST_BE_SET) != 0)
      return refuse(fn, cluster, "the kernel must be launched with a cluster dimension (.explicitcluster)");
    return CUDA_SUCCESS;
  }
  if (has_asked && has_required && (asked[0] != required[0] || asked[1] != required[1] || asked[2] != required[2]))
    return refuse(fn, cluster, "the kernel requires another cluster shape (__cluster_dims__ or REQUIRED_CLUSTER_*)");
  const uint64_t blocks = uint64_t{cluster[0]} * cluster[1] * cluster[2];
  if (blocks > 1 && Connection::instance().device().attributes[CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH] == 0)
    return refuse(fn, cluster, "the device has no thread-block clusters (compute capability below 9.0)");
  const bool non_portable = attribute(fn, CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED) != 0;
  if (blocks > (non_portable ? kNonPortableClusterBlocks : kPortableClusterBlocks)) {
    return refuse(fn, cluster,
                  non_portable ? "more than 16 blocks, the device's most"
                               : "more than 8 blocks, the portable most (16 after cuFuncSetAttribute "
                                 "CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED)");
  }
  if (grid[0] % cluster[0] != 0 || grid[1] % cluster[1] != 0 || grid[2] % cluster[2] != 0)
    return refuse(fn, cluster, "the grid is not a multiple of the cluster");
  return CUDA_SUCCESS;
}

}  // namespace tally::client
