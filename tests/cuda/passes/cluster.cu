// Refused by every pass (sm_90): thread-block clusters. Cluster membership follows the
// hardware block index, which slicing and PTB renumber.

#include <cooperative_groups.h>
namespace cg = cooperative_groups;

// Each block of a 2-block cluster writes its partner's block index: out[b] = b ^ 1.
// Launch: 1-D, even grid, cluster dims (2, 1, 1) (compiled in).
extern "C" __global__ void __cluster_dims__(2, 1, 1) cluster_exchange(int* out)
{
    __shared__ int v;
    cg::cluster_group cluster = cg::this_cluster();
    if (threadIdx.x == 0) v = blockIdx.x;
    cluster.sync();
    int* other = cluster.map_shared_rank(&v, cluster.block_rank() ^ 1);
    if (threadIdx.x == 0) out[blockIdx.x] = *other;
    cluster.sync();
}

// Reads the cluster index only (no cluster barrier): out[blockIdx.x] = %clusterid.x.
// Launch: 1-D, any grid, launched with or without clusters.
extern "C" __global__ void cluster_id(unsigned* out)
{
    unsigned id;
    asm("mov.u32 %0, %%clusterid.x;" : "=r"(id));
    if (threadIdx.x == 0) out[blockIdx.x] = id;
}
