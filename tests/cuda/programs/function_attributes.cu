// cudaFuncGetAttributes of kernels whose needs are known
// from their source: static shared memory, __constant__ data, a local array,
// __launch_bounds__ and compile-time cluster dimensions. Then a launch with more
// threads than __launch_bounds__ allows, which CUDA refuses at the launch itself.
// Prints `name.field=value` tokens.
#include <cstdio>

#include "runtime_check.h"

__constant__ float table[64];          // 256 bytes
__constant__ int offsets[6];           // 24 bytes

__global__ void uses_shared(float* out) {
  __shared__ float tile[100];          // 400 bytes
  __shared__ double pair[2];           // 16 bytes
  tile[threadIdx.x % 100] = threadIdx.x;
  pair[threadIdx.x % 2] = 1.0;
  __syncthreads();
  out[threadIdx.x] = tile[(threadIdx.x + 1) % 100] + pair[0] + table[threadIdx.x % 64] + offsets[threadIdx.x % 6];
}

__global__ void uses_local(float* out, int n) {
  volatile float scratch[300];         // 1200 bytes, indexed at run time: stays in local memory
  for (int i = 0; i < 300; ++i) scratch[i] = i * n;
  out[threadIdx.x] = scratch[(threadIdx.x * 7 + n) % 300];
}

__global__ void __launch_bounds__(128) bounded(float* out) { out[threadIdx.x] = threadIdx.x; }

__global__ void __cluster_dims__(2, 1, 1) clustered(float* out) { out[blockIdx.x] = blockIdx.x; }

template <class K>
void report(const char* name, K kernel) {
  cudaFuncAttributes a;
  CHECK(cudaFuncGetAttributes(&a, kernel));
  printf("%s.shared=%zu %s.const=%zu %s.local=%zu %s.regs=%d %s.max_threads=%d %s.ptx=%d %s.binary=%d\n", name,
         a.sharedSizeBytes, name, a.constSizeBytes, name, a.localSizeBytes, name, a.numRegs, name,
         a.maxThreadsPerBlock, name, a.ptxVersion, name, a.binaryVersion);
  printf("%s.cluster_width=%d %s.cluster_must_be_set=%d\n", name, a.requiredClusterWidth, name,
         a.clusterDimMustBeSet);
}

int main() {
  report("shared", uses_shared);
  report("local", uses_local);
  report("bounded", bounded);
  report("clustered", clustered);
  float* out;
  CHECK(cudaMalloc(&out, 1024 * sizeof(float)));
  bounded<<<1, 256>>>(out);                 // over its bound: refused by the launch
  cudaError_t over = cudaGetLastError();
  bounded<<<1, 128>>>(out);
  cudaError_t within = cudaGetLastError();
  cudaError_t sync = cudaDeviceSynchronize();
  printf("over_bound=%d within_bound=%d sync=%d\n", (int)over, (int)within, (int)sync);
  return 0;
}
