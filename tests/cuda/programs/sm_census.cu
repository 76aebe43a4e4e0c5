// Which SMs a job's kernels run on: argv[1] launches of a kernel of argv[2] blocks,
// each block spinning argv[3] iterations (so on a GPU blocks spread over every SM
// the kernel may use) and recording the SM it ran on (%smid). Prints how many
// different SMs ran blocks over all launches, the highest %smid, the device's SM
// count, whether every block did its work, and the wall time of the launches.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void census(unsigned* smid_of_block, unsigned* work, unsigned iterations) {
  unsigned v = threadIdx.x + blockIdx.x;
  for (unsigned i = 0; i < iterations; ++i) v = v * 1664525u + 1013904223u;
  if (threadIdx.x == 0) {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    smid_of_block[blockIdx.x] = id;
    work[blockIdx.x] = v | 1u;  // never 0: the block ran
  }
}

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? atoi(argv[1]) : 4;
  const unsigned blocks = argc > 2 ? (unsigned)atoi(argv[2]) : 1024;
  const unsigned iterations = argc > 3 ? (unsigned)strtoul(argv[3], nullptr, 0) : 1000;
  int device_sms = 0;
  CHECK(cudaDeviceGetAttribute(&device_sms, cudaDevAttrMultiProcessorCount, 0));
  unsigned *smids, *work;
  CHECK(cudaMalloc(&smids, blocks * sizeof(unsigned)));
  CHECK(cudaMalloc(&work, blocks * sizeof(unsigned)));
  unsigned* host = (unsigned*)malloc(blocks * sizeof(unsigned));
  static bool seen[4096];
  unsigned distinct = 0, highest = 0, blocks_missed = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < rounds; ++r) {
    CHECK(cudaMemset(work, 0, blocks * sizeof(unsigned)));
    census<<<blocks, 128>>>(smids, work, iterations);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(host, smids, blocks * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (unsigned b = 0; b < blocks; ++b) {
      unsigned id = host[b] < 4096 ? host[b] : 4095;
      distinct += !seen[id];
      seen[id] = true;
      highest = id > highest ? id : highest;
    }
    CHECK(cudaMemcpy(host, work, blocks * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (unsigned b = 0; b < blocks; ++b) blocks_missed += host[b] == 0;
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  printf("device_sms=%d distinct_sms=%u max_smid=%u blocks_missed=%u\n", device_sms, distinct, highest,
         blocks_missed);
  printf("rounds=%d elapsed_ms=%.3f\n", rounds, ms);
  return 0;
}
