// How many of the device's SMs a kernel's blocks ran on (%smid per block) and how
// many of its blocks ran at the same moment (an atomic count of running blocks).
// Every block's first thread spins for spin_us microseconds (%globaltimer), so blocks
// that run on different SMs overlap in time. The kernel also writes out[i] = 2i + 1,
// which the host checks.
//
//   sm_share [blocks=64] [spin_us=2000] [launches=1] [wait]
// prints: sm_count=<SMs of the device> sms_used=<distinct %smid> peak_blocks=<most at once> results=ok|bad
// With `wait` it prints "ready" once its memory is set up and waits for a line on
// stdin before it launches (for tests that act on the job in between).
//
// Two more kernels serve the emulator's own tests (compiled to PTX):
// `announce` prints each block's number after a spin that is longest for the lowest
// block, and `fault_at` makes two blocks write through `bad` (an address the host
// picks outside every allocation), the higher one first.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#include "runtime_check.h"

__device__ unsigned sm_id() {
  unsigned id;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
  return id;
}

__device__ unsigned long long now_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ void spin(unsigned long long ns) {
  unsigned long long start = now_ns();
  while (now_ns() - start < ns) {
  }
}

extern "C" __global__ void measure(int* block_sm, unsigned* running, unsigned* peak, int* out, int n,
                                   unsigned long long spin_ns) {
  if (threadIdx.x == 0) {
    block_sm[blockIdx.x] = (int)sm_id();
    unsigned now = atomicAdd(running, 1u) + 1;
    atomicMax(peak, now);
    spin(spin_ns);
    atomicSub(running, 1u);
  }
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = 2 * i + 1;
}

extern "C" __global__ void announce(unsigned long long spin_ns) {
  if (threadIdx.x == 0) {
    spin(spin_ns * (gridDim.x - blockIdx.x));
    printf("block %d\n", (int)blockIdx.x);
  }
}

extern "C" __global__ void fault_at(int* out, int* bad, int low, int high, unsigned long long spin_ns) {
  if (threadIdx.x != 0) return;
  if ((int)blockIdx.x == low) {
    spin(spin_ns);
    bad[low] = 1;
  } else if ((int)blockIdx.x == high) {
    bad[high] = 1;
  } else {
    out[blockIdx.x] = 1;
  }
}

int main(int argc, char** argv) {
  int blocks = argc > 1 ? atoi(argv[1]) : 64;
  unsigned long long spin_ns = (argc > 2 ? atoll(argv[2]) : 2000) * 1000ull;
  int launches = argc > 3 ? atoi(argv[3]) : 1;
  const int threads = 128, n = blocks * threads;
  int sm_count = 0;
  CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, 0));
  int *block_sm, *out;
  unsigned* counters;
  CHECK(cudaMalloc(&block_sm, blocks * sizeof(int)));
  CHECK(cudaMalloc(&out, n * sizeof(int)));
  CHECK(cudaMalloc(&counters, 2 * sizeof(unsigned)));
  CHECK(cudaMemset(counters, 0, 2 * sizeof(unsigned)));
  int* seen = (int*)calloc(sm_count > 0 ? sm_count : 1, sizeof(int));
  int used = 0, bad_sm = 0;
  int* host_sm = (int*)malloc(blocks * sizeof(int));
  int* host_out = (int*)malloc(n * sizeof(int));
  bool ok = true;
  if (argc > 4 && strcmp(argv[4], "wait") == 0) {
    CHECK(cudaDeviceSynchronize());
    printf("ready\n");
    fflush(stdout);
    char line[16];
    if (fgets(line, sizeof line, stdin) == nullptr) return 1;
  }
  for (int l = 0; l < launches; ++l) {
    CHECK(cudaMemset(out, 0, n * sizeof(int)));
    measure<<<blocks, threads>>>(block_sm, counters, counters + 1, out, n, spin_ns);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(host_sm, block_sm, blocks * sizeof(int), cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(host_out, out, n * sizeof(int), cudaMemcpyDeviceToHost));
    for (int b = 0; b < blocks; ++b) {
      int s = host_sm[b];
      if (s < 0 || s >= sm_count) {
        bad_sm = 1;
      } else if (!seen[s]) {
        seen[s] = 1;
        ++used;
      }
    }
    for (int i = 0; i < n; ++i) ok = ok && host_out[i] == 2 * i + 1;
  }
  unsigned host_counters[2];
  CHECK(cudaMemcpy(host_counters, counters, sizeof host_counters, cudaMemcpyDeviceToHost));
  printf("sm_count=%d sms_used=%d peak_blocks=%u smid_in_range=%d results=%s\n", sm_count, used,
         host_counters[1], !bad_sm, ok && host_counters[0] == 0 ? "ok" : "bad");
  return ok ? 0 : 1;
}
