// Cooperative-groups tiles larger than a warp: thread_block_tile<64> and <128>
// synchronize through the block's reserved shared memory (nvcc reads
// %reserved_smem_offset_1 for it on sm_80 and newer). Each tile reduces its
// inputs (sum and max) and checks its own shape.
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>
#include <cstdio>
#include <vector>

#include "runtime_check.h"

namespace cg = cooperative_groups;

template <unsigned Size>
__global__ void tile_reduce(const int* in, int* sums, int* maxes, int* bad_shape) {
  cg::thread_block block = cg::this_thread_block();
  cg::thread_block_tile<Size> tile = cg::tiled_partition<Size>(block);
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  int v = in[i];
  int sum = cg::reduce(tile, v, cg::plus<int>());
  tile.sync();
  int largest = cg::reduce(tile, v, cg::greater<int>());
  int t = i / Size;
  if (tile.size() != Size || tile.thread_rank() != threadIdx.x % Size || tile.meta_group_rank() != threadIdx.x / Size)
    atomicAdd(bad_shape, 1);
  if (tile.thread_rank() == 0) {
    sums[t] = sum;
    maxes[t] = largest;
  }
}

template <unsigned Size>
int run(const std::vector<int>& in, const int* d_in, int* d_sums, int* d_maxes, int* d_bad) {
  const int n = static_cast<int>(in.size()), tiles = n / Size;
  CHECK(cudaMemset(d_bad, 0, sizeof(int)));
  tile_reduce<Size><<<n / 256, 256>>>(d_in, d_sums, d_maxes, d_bad);
  CHECK(cudaGetLastError());
  std::vector<int> sums(tiles), maxes(tiles);
  int bad = 0;
  CHECK(cudaMemcpy(sums.data(), d_sums, tiles * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(maxes.data(), d_maxes, tiles * sizeof(int), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&bad, d_bad, sizeof(int), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int t = 0; t < tiles; ++t) {
    int sum = 0, largest = in[t * Size];
    for (unsigned k = 0; k < Size; ++k) {
      sum += in[t * Size + k];
      largest = in[t * Size + k] > largest ? in[t * Size + k] : largest;
    }
    wrong += sums[t] != sum || maxes[t] != largest;
  }
  printf("tile%u_tiles=%d tile%u_wrong=%d tile%u_bad_shape=%d\n", Size, tiles, Size, wrong, Size, bad);
  return wrong + bad;
}

int main() {
  const int n = 2048;
  std::vector<int> in(n);
  for (int i = 0; i < n; ++i) in[i] = (i * 7919) % 1009 - 500;
  int *d_in, *d_sums, *d_maxes, *d_bad;
  CHECK(cudaMalloc(&d_in, n * sizeof(int)));
  CHECK(cudaMalloc(&d_sums, n / 32 * sizeof(int)));
  CHECK(cudaMalloc(&d_maxes, n / 32 * sizeof(int)));
  CHECK(cudaMalloc(&d_bad, sizeof(int)));
  CHECK(cudaMemcpy(d_in, in.data(), n * sizeof(int), cudaMemcpyHostToDevice));
  int failures = run<32>(in, d_in, d_sums, d_maxes, d_bad) + run<64>(in, d_in, d_sums, d_maxes, d_bad) +
                 run<128>(in, d_in, d_sums, d_maxes, d_bad);
  printf("failures=%d\n", failures);
  return failures == 0 ? 0 : 1;
}
