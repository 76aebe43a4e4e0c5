// Thread-block clusters (sm_90). PTB refuses every kernel using them (its workers take
// blocks one at a time). Slicing keeps clusters whole (the scheduler cuts launches with
// (w, 1, 1) clusters on cluster boundaries and rebuilds %clusterid), except where the
// cluster shape is compiled in, which the scheduler is not told: cluster_exchange.

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
