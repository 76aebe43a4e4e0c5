// The occupancy calculator's cluster questions: cuOccupancyMaxActiveClusters and
// cuOccupancyMaxPotentialClusterSize, answered locally as the other occupancy
// questions are (occupancy.cpp), for the device the handshake described.
//
// The model is Hopper's: the blocks of a cluster run on the SMs of one GPC, so a
// cluster fits where one GPC has room for all its blocks. H100 and H200 GPCs hold
// 16-18 SMs (some disabled per chip); tally counts 16 per GPC, which every GPC of
// those parts has, and a smaller device (the emulator's 8 SMs) as one GPC. Clusters
// run only where the device says CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH. The most blocks
// per cluster: 8, or 16 for a kernel that set NON_PORTABLE_CLUSTER_SIZE_ALLOWED.
#include <algorithm>

#include "connection/connection.h"
#include "driver_objects.h"
#include "entry_points/entry_point.h"
#include "launch/cluster_launch.h"
#include "launch/occupancy.h"

namespace tally::client {
namespace {

constexpr int kSmsPerGpc = 16;

struct ClusterQuestion {
  const FunctionObject* fn;
  int blocks_per_sm;
  int cluster_blocks;  // what the configuration (or the kernel's __cluster_dims__) asks; 1: none
};

CUresult read_question(const CUlaunchConfig* config, CUfunction func, ClusterQuestion* q) {
  if (config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  q->fn = as_function(func);
  if (q->fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  uint32_t cluster[3];
  if (CUresult rc = read_cluster_attributes(config, cluster); rc != CUDA_SUCCESS) return rc;
  if (cluster[0] == 0) {   // none asked: the kernel's compile-time shape, if any
    cluster[0] = static_cast<uint32_t>(std::max(q->fn->attributes[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH].load(), 1));
    cluster[1] = static_cast<uint32_t>(std::max(q->fn->attributes[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT].load(), 1));
    cluster[2] = static_cast<uint32_t>(std::max(q->fn->attributes[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH].load(), 1));
  }
  q->cluster_blocks = static_cast<int>(cluster[0] * cluster[1] * cluster[2]);
  const int block = static_cast<int>(config->blockDimX * config->blockDimY * config->blockDimZ);
  q->blocks_per_sm = blocks_per_sm(q->fn, block, config->sharedMemBytes);
  return CUDA_SUCCESS;
}

int sms() { return device_attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 1); }
int sms_per_gpc() { return std::min(sms(), kSmsPerGpc); }

// Clusters of `size` blocks that one GPC holds at once.
int clusters_per_gpc(int blocks_per_sm, int size) { return blocks_per_sm * sms_per_gpc() / size; }

int most_cluster_blocks(const FunctionObject* fn) {
  if (device_attribute(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, 0) == 0) return 1;
  return fn->attributes[CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED].load() != 0
             ? static_cast<int>(kNonPortableClusterBlocks)
             : static_cast<int>(kPortableClusterBlocks);
}

}  // namespace
}  // namespace tally::client

using namespace tally::client;

TALLY_ENTRY(cuOccupancyMaxActiveClusters_v11070)(int* numClusters, CUfunction func, const CUlaunchConfig* config) {
  if (numClusters == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ClusterQuestion q;
  if (CUresult rc = read_question(config, func, &q); rc != CUDA_SUCCESS) return rc;
  if (q.cluster_blocks > most_cluster_blocks(q.fn)) {
    // A device without clusters answers "none fit" for larger ones (libraries such as
    // cuBLAS then pick kernels without clusters); one with clusters refuses the size.
    if (device_attribute(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, 0) == 0) {
      *numClusters = 0;
      return CUDA_SUCCESS;
    }
    return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  }
  const int gpcs = std::max(sms() / sms_per_gpc(), 1);
  *numClusters = clusters_per_gpc(q.blocks_per_sm, q.cluster_blocks) * gpcs;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuOccupancyMaxPotentialClusterSize_v11070)(int* clusterSize, CUfunction func,
                                                       const CUlaunchConfig* config) {
  if (clusterSize == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ClusterQuestion q;
  if (CUresult rc = read_question(config, func, &q); rc != CUDA_SUCCESS) return rc;
  int size = most_cluster_blocks(q.fn);
  while (size > 0 && clusters_per_gpc(q.blocks_per_sm, size) == 0) --size;
  *clusterSize = size;
  return CUDA_SUCCESS;
}
