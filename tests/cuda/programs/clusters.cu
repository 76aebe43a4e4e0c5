// Thread-block clusters through the runtime API: a __cluster_dims__ kernel launched
// with <<<>>> (cooperative_groups::this_cluster(), cluster.sync(), map_shared_rank:
// each block reads its neighbour's shared memory and adds to rank 0's counter), a
// kernel given its cluster at launch by cudaLaunchKernelEx (2x2 clusters summing into
// rank 0's shared memory), the launches the driver refuses (their codes printed), a
// non-portable 16-block cluster after cudaFuncSetAttribute, and the occupancy
// calculator's cluster answers. Prints key=value lines.
#include <cooperative_groups.h>
#include <cstdio>
#include <vector>

#include "runtime_check.h"

namespace cg = cooperative_groups;

__global__ void __cluster_dims__(4, 1, 1) neighbour(int* out) {
  __shared__ int mine[2];
  cg::cluster_group cluster = cg::this_cluster();
  unsigned rank = cluster.block_rank();
  if (threadIdx.x == 0) {
    mine[0] = 100 * (int)rank + (int)blockIdx.x;
    mine[1] = 0;
  }
  cluster.sync();
  int* theirs = cluster.map_shared_rank(mine, (rank + 1) % cluster.num_blocks());
  if (threadIdx.x == 0) {
    out[blockIdx.x] = theirs[0];
    atomicAdd(cluster.map_shared_rank(&mine[1], 0), 1);
  }
  cluster.sync();
  if (threadIdx.x == 0 && rank == 0) out[gridDim.x + blockIdx.x / 4] = mine[1];
}

// Launched with a cluster shape: each cluster sums its blocks' inputs in rank 0's
// shared memory; rank 0 writes the sum, and each block its rank and cluster size.
__global__ void cluster_sum(const int* x, int* sums, int* ranks) {
  __shared__ int total;
  cg::cluster_group cluster = cg::this_cluster();
  if (threadIdx.x == 0) total = 0;
  cluster.sync();
  unsigned b = blockIdx.x + gridDim.x * blockIdx.y;
  atomicAdd(cluster.map_shared_rank(&total, 0), x[b * blockDim.x + threadIdx.x]);
  cluster.sync();
  unsigned clusters_x = gridDim.x / cluster.dim_blocks().x;
  if (threadIdx.x == 0) {
    ranks[b] = (int)(cluster.block_rank() * 100 + cluster.num_blocks());
    if (cluster.block_rank() == 0) sums[blockIdx.x / 2 + clusters_x * (blockIdx.y / 2)] = total;
  }
}

cudaError_t launch_sum(dim3 grid, dim3 cluster, const int* x, int* sums, int* ranks, cudaStream_t stream = 0) {
  cudaLaunchConfig_t config = {};
  config.stream = stream;
  config.gridDim = grid;
  config.blockDim = dim3(64, 1, 1);
  cudaLaunchAttribute attrs[2];
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = cluster.x;
  attrs[0].val.clusterDim.y = cluster.y;
  attrs[0].val.clusterDim.z = cluster.z;
  attrs[1].id = cudaLaunchAttributeClusterSchedulingPolicyPreference;
  attrs[1].val.clusterSchedulingPolicyPreference = cudaClusterSchedulingPolicySpread;
  config.attrs = attrs;
  config.numAttrs = 2;
  return cudaLaunchKernelEx(&config, cluster_sum, x, sums, ranks);
}

int main() {
  // 1. A compile-time cluster.
  const int grid = 16;
  int* d_out;
  CHECK(cudaMalloc(&d_out, (grid + grid / 4) * sizeof(int)));
  neighbour<<<grid, 64>>>(d_out);
  CHECK(cudaGetLastError());
  std::vector<int> out(grid + grid / 4);
  CHECK(cudaMemcpy(out.data(), d_out, out.size() * sizeof(int), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int b = 0; b < grid; ++b) {
    int next = (b % 4 + 1) % 4;
    wrong += out[b] != 100 * next + (b - b % 4 + next);
  }
  for (int c = 0; c < grid / 4; ++c) wrong += out[grid + c] != 4;
  printf("neighbour_wrong=%d\n", wrong);

  // 2. A cluster given at launch: 4x4 blocks in 2x2 clusters.
  const int blocks = 16, threads = 64;
  std::vector<int> x(blocks * threads);
  for (size_t i = 0; i < x.size(); ++i) x[i] = (int)(i * 7 % 23) - 11;
  int *d_x, *d_sums, *d_ranks;
  CHECK(cudaMalloc(&d_x, x.size() * sizeof(int)));
  CHECK(cudaMalloc(&d_sums, 4 * sizeof(int)));
  CHECK(cudaMalloc(&d_ranks, blocks * sizeof(int)));
  CHECK(cudaMemcpy(d_x, x.data(), x.size() * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(launch_sum(dim3(4, 4, 1), dim3(2, 2, 1), d_x, d_sums, d_ranks));
  std::vector<int> sums(4), ranks(blocks);
  CHECK(cudaMemcpy(sums.data(), d_sums, 4 * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(ranks.data(), d_ranks, blocks * sizeof(int), cudaMemcpyDeviceToHost));
  wrong = 0;
  for (int cy = 0; cy < 2; ++cy) {
    for (int cx = 0; cx < 2; ++cx) {
      int want = 0;
      for (int by = 2 * cy; by < 2 * cy + 2; ++by)
        for (int bx = 2 * cx; bx < 2 * cx + 2; ++bx)
          for (int t = 0; t < threads; ++t) want += x[(bx + 4 * by) * threads + t];
      wrong += sums[cx + 2 * cy] != want;
    }
  }
  for (int b = 0; b < blocks; ++b) wrong += ranks[b] != ((b % 4) % 2 + 2 * ((b / 4) % 2)) * 100 + 4;
  printf("ex_wrong=%d\n", wrong);

  // 2b. The same launch captured into a graph and replayed twice.
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  CHECK(cudaMemsetAsync(d_sums, 0, 4 * sizeof(int), stream));
  CHECK(launch_sum(dim3(4, 4, 1), dim3(2, 2, 1), d_x, d_sums, d_ranks, stream));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  int graph_wrong = 0;
  for (int round = 0; round < 2; ++round) {
    CHECK(cudaGraphLaunch(exec, stream));
    std::vector<int> replayed(4);
    CHECK(cudaMemcpyAsync(replayed.data(), d_sums, 4 * sizeof(int), cudaMemcpyDeviceToHost, stream));
    CHECK(cudaStreamSynchronize(stream));
    graph_wrong += replayed != sums;
  }
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(stream));
  printf("graph_wrong=%d\n", graph_wrong);

  // 3. What the driver refuses; the job carries on.
  printf("too_big=%d\n", (int)launch_sum(dim3(16, 1, 1), dim3(16, 1, 1), d_x, d_sums, d_ranks));
  cudaGetLastError();
  printf("not_multiple=%d\n", (int)launch_sum(dim3(6, 1, 1), dim3(4, 1, 1), d_x, d_sums, d_ranks));
  cudaGetLastError();
  printf("wrong_shape=%d\n", (int)[&] {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(8, 1, 1);
    config.blockDim = dim3(64, 1, 1);
    cudaLaunchAttribute attr;
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 2, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    config.attrs = &attr;
    config.numAttrs = 1;
    return cudaLaunchKernelEx(&config, neighbour, d_out);
  }());
  cudaGetLastError();

  // 4. The occupancy calculator, then sixteen blocks once the kernel allows
  // non-portable sizes.
  cudaLaunchConfig_t occupancy = {};
  occupancy.gridDim = dim3(16, 1, 1);
  occupancy.blockDim = dim3(64, 1, 1);
  cudaLaunchAttribute shape;
  shape.id = cudaLaunchAttributeClusterDimension;
  shape.val.clusterDim.x = 4, shape.val.clusterDim.y = 1, shape.val.clusterDim.z = 1;
  occupancy.attrs = &shape;
  occupancy.numAttrs = 1;
  int active = -1, potential = -1;
  CHECK(cudaOccupancyMaxActiveClusters(&active, cluster_sum, &occupancy));
  CHECK(cudaOccupancyMaxPotentialClusterSize(&potential, cluster_sum, &occupancy));
  printf("active_clusters_of_4=%d potential=%d\n", active, potential);
  shape.val.clusterDim.x = 16;
  printf("active_clusters_of_16=%d\n", (int)cudaOccupancyMaxActiveClusters(&active, cluster_sum, &occupancy));
  cudaGetLastError();
  CHECK(cudaFuncSetAttribute(cluster_sum, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  CHECK(cudaOccupancyMaxActiveClusters(&active, cluster_sum, &occupancy));
  CHECK(cudaOccupancyMaxPotentialClusterSize(&potential, cluster_sum, &occupancy));
  printf("non_portable_active=%d non_portable_potential=%d\n", active, potential);
  printf("non_portable=%d\n", (int)launch_sum(dim3(16, 1, 1), dim3(16, 1, 1), d_x, d_sums, d_ranks));
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(ranks.data(), d_ranks, blocks * sizeof(int), cudaMemcpyDeviceToHost));
  wrong = 0;
  for (int b = 0; b < blocks; ++b) wrong += ranks[b] != b * 100 + 16;
  printf("non_portable_wrong=%d\n", wrong);

  // 5. A cluster shape required at run time applies to <<<>>> launches; a shape the
  // kernel was compiled with cannot be changed.
  printf("set_compiled=%d\n", (int)cudaFuncSetAttribute(neighbour, cudaFuncAttributeRequiredClusterWidth, 2));
  cudaGetLastError();
  CHECK(cudaFuncSetAttribute(cluster_sum, cudaFuncAttributeNonPortableClusterSizeAllowed, 0));
  CHECK(cudaFuncSetAttribute(cluster_sum, cudaFuncAttributeRequiredClusterWidth, 2));
  CHECK(cudaFuncSetAttribute(cluster_sum, cudaFuncAttributeRequiredClusterHeight, 2));
  CHECK(cudaFuncSetAttribute(cluster_sum, cudaFuncAttributeRequiredClusterDepth, 1));
  CHECK(cudaMemset(d_sums, 0, 4 * sizeof(int)));
  cluster_sum<<<dim3(4, 4, 1), 64>>>(d_x, d_sums, d_ranks);
  CHECK(cudaGetLastError());
  std::vector<int> again(4);
  CHECK(cudaMemcpy(again.data(), d_sums, 4 * sizeof(int), cudaMemcpyDeviceToHost));
  printf("required_wrong=%d\n", (int)(again != sums));
  // What cudaFuncGetAttributes reads back: the shapes, the settings made above.
  CHECK(cudaFuncSetAttribute(cluster_sum, cudaFuncAttributeClusterSchedulingPolicyPreference,
                             cudaClusterSchedulingPolicySpread));
  cudaFuncAttributes set_at_run_time, compiled;
  CHECK(cudaFuncGetAttributes(&set_at_run_time, cluster_sum));
  CHECK(cudaFuncGetAttributes(&compiled, neighbour));
  printf("run_time_attrs=%d,%d,%d,%d,%d\n", set_at_run_time.requiredClusterWidth,
         set_at_run_time.requiredClusterHeight, set_at_run_time.requiredClusterDepth,
         set_at_run_time.nonPortableClusterSizeAllowed, set_at_run_time.clusterSchedulingPolicyPreference);
  printf("compiled_attrs=%d,%d,%d,%d\n", compiled.requiredClusterWidth, compiled.requiredClusterHeight,
         compiled.requiredClusterDepth, compiled.clusterDimMustBeSet);

  CHECK(cudaFree(d_out));
  CHECK(cudaFree(d_x));
  CHECK(cudaFree(d_sums));
  CHECK(cudaFree(d_ranks));
  printf("done=1\n");
  return 0;
}
