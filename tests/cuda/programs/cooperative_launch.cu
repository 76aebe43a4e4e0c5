// Cooperative launches as CUDA C++ programs write them: the device attributes that
// say they exist, a kernel that synchronizes its whole grid with cooperative
// groups (grid.sync() between rounds that read what every other block wrote),
// launched by cudaLaunchCooperativeKernel and by cudaLaunchKernelEx with the
// cooperative attribute, the grid sized by the occupancy calculator, and a grid
// one block too large, which must fail with cudaErrorCooperativeLaunchTooLarge
// and leave the job able to go on; a cooperative launch captured into a graph
// replays cooperatively, also with new node parameters.
//   cooperative_launch [BLOCKS_PER_SM]   (default 2: blocks of each SM's share used)
#include <cooperative_groups.h>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "runtime_check.h"

namespace cg = cooperative_groups;

constexpr int kThreads = 64;
constexpr int kRounds = 4;

// Each round every block adds its left neighbour's value of the round before.
__global__ void ring_rounds(int* values, int* scratch, int rounds) {
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

// How many blocks hold values that differ from a host computation of the rounds.
int wrong_blocks(const int* d_values, int blocks) {
  std::vector<long long> expect(blocks);
  for (int b = 0; b < blocks; ++b) expect[b] = b;
  for (int r = 0; r < kRounds; ++r) {
    std::vector<long long> next(blocks);
    for (int b = 0; b < blocks; ++b) next[b] = expect[b] + expect[(b + blocks - 1) % blocks];
    expect = next;
  }
  std::vector<int> got(blocks);
  CHECK(cudaMemcpy(got.data(), d_values, blocks * sizeof(int), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int b = 0; b < blocks; ++b) wrong += got[b] != static_cast<int>(expect[b]);
  return wrong;
}

int main(int argc, char** argv) {
  const int blocks_per_sm = argc > 1 ? atoi(argv[1]) : 2;
  int cooperative = 0, sms = 0, per_sm = 0;
  CHECK(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, 0));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, ring_rounds, kThreads, 0));
  printf("cooperative_attribute=%d\n", cooperative);
  const int largest = per_sm * sms;
  const int blocks = blocks_per_sm * sms < largest ? blocks_per_sm * sms : largest;

  int *d_values, *d_scratch;
  CHECK(cudaMalloc(&d_values, (largest + 1) * sizeof(int)));
  CHECK(cudaMalloc(&d_scratch, (largest + 1) * sizeof(int)));
  int rounds = kRounds;
  void* args[] = {&d_values, &d_scratch, &rounds};

  CHECK(cudaLaunchCooperativeKernel((void*)ring_rounds, dim3(blocks), dim3(kThreads), args, 0, 0));
  CHECK(cudaDeviceSynchronize());
  printf("blocks=%d launch_wrong=%d\n", blocks, wrong_blocks(d_values, blocks));

  CHECK(cudaMemset(d_values, 0, (largest + 1) * sizeof(int)));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(kThreads);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeCooperative;
  attr[0].val.cooperative = 1;
  config.attrs = attr;
  config.numAttrs = 1;
  CHECK(cudaLaunchKernelEx(&config, ring_rounds, d_values, d_scratch, rounds));
  CHECK(cudaDeviceSynchronize());
  printf("launch_ex_wrong=%d\n", wrong_blocks(d_values, blocks));

  // Captured into a graph, the launch stays cooperative when replayed, and when the
  // instantiated graph's node gets new parameters (a smaller grid).
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CHECK(cudaMemset(d_values, 0, (largest + 1) * sizeof(int)));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  CHECK(cudaLaunchCooperativeKernel((void*)ring_rounds, dim3(blocks), dim3(kThreads), args, 0, stream));
  CHECK(cudaStreamEndCapture(stream, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaStreamSynchronize(stream));
  const int graph_wrong = wrong_blocks(d_values, blocks);
  cudaGraphNode_t node;
  size_t nodes = 1;
  CHECK(cudaGraphGetNodes(graph, &node, &nodes));
  cudaKernelNodeParams params = {};
  params.func = (void*)ring_rounds;
  params.gridDim = dim3(5);
  params.blockDim = dim3(kThreads);
  params.kernelParams = args;
  CHECK(cudaGraphExecKernelNodeSetParams(exec, node, &params));
  CHECK(cudaGraphLaunch(exec, stream));
  CHECK(cudaStreamSynchronize(stream));
  printf("graph_wrong=%d updated_graph_wrong=%d\n", graph_wrong, wrong_blocks(d_values, 5));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));
  CHECK(cudaStreamDestroy(stream));

  // One block more than the device holds at once.
  cudaError_t too_large =
      cudaLaunchCooperativeKernel((void*)ring_rounds, dim3(largest + 1), dim3(kThreads), args, 0, 0);
  printf("too_large=%d\n", (int)too_large);
  // Not a sticky error: the job goes on.
  printf("last_error=%d\n", (int)cudaGetLastError());
  CHECK(cudaLaunchCooperativeKernel((void*)ring_rounds, dim3(3), dim3(kThreads), args, 0, 0));
  CHECK(cudaDeviceSynchronize());
  printf("after_wrong=%d\n", wrong_blocks(d_values, 3));
  CHECK(cudaFree(d_values));
  CHECK(cudaFree(d_scratch));
  return 0;
}
