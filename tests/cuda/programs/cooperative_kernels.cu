// Device code of cooperative_driver.c (built as PTX at test time): rounds separated
// by cooperative groups' grid barriers, each reading what every block wrote in the
// round before (as cooperative_launch.cu's ring_rounds).
#include <cooperative_groups.h>
namespace cg = cooperative_groups;

extern "C" __global__ void ring_rounds(int* values, int* scratch, int rounds) {
  cg::grid_group grid = cg::this_grid();
  const int b = blockIdx.x, n = gridDim.x;
  if (threadIdx.x == 0) values[b] = b;
  grid.sync();
  for (int r = 0; r < rounds; ++r) {
    if (threadIdx.x == 0) scratch[b] = values[b] + values[(b + n - 1) % n];
    grid.sync();
    if (threadIdx.x == 0) values[b] = scratch[b];
    grid.sync();
  }
}
