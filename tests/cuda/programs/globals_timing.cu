// Kernels that lean on module variables, timed with events, for the cost of the
// relocation the cuda backend applies with --suspendable (tests/test_e2e_gpu_mobility.py
// runs it on a plain and on a --suspendable server and compares): a 16-tap filter whose
// taps are __constant__ (uniform reads, the constant cache's best case), and a lookup
// in a __device__ table with an atomic counter. Prints each kernel's best time of
// repeats and a checksum of its output, which must not depend on the server.
// Arguments (optional): elements (default 4 Mi), repeats (default 20).
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#include "runtime_check.h"

constexpr int TAPS = 16;

__constant__ float taps[TAPS];
__device__ unsigned table[256];
__device__ unsigned long long lookups;

__global__ void filter(const float* in, float* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i + TAPS > n) return;
  float acc = 0.f;
#pragma unroll
  for (int t = 0; t < TAPS; ++t) acc += in[i + t] * taps[t];
  out[i] = acc;
}

__global__ void lookup(const float* in, unsigned* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  unsigned key = __float_as_uint(in[i]) & 255u;
  out[i] = table[key] ^ table[(key * 7u) & 255u];
  if ((i & 1023) == 0) atomicAdd(&lookups, 1ull);
}

template <typename Launch>
float best_ms(int repeats, Launch launch) {
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  float best = 1e30f;
  for (int r = 0; r < repeats; ++r) {
    CHECK(cudaEventRecord(start));
    launch();
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0.f;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (ms < best) best = ms;
  }
  return best;
}

int main(int argc, char** argv) {
  const int N = argc > 1 ? atoi(argv[1]) : 1 << 22;
  const int repeats = argc > 2 ? atoi(argv[2]) : 20;
  float* host_in = (float*)malloc(N * sizeof(float));
  float* host_out = (float*)malloc(N * sizeof(float));
  unsigned* host_keys = (unsigned*)malloc(N * sizeof(unsigned));
  float host_taps[TAPS];
  unsigned host_table[256];
  for (int i = 0; i < N; ++i) host_in[i] = (float)((i * 2654435761u) % 1000) / 1000.f;
  for (int t = 0; t < TAPS; ++t) host_taps[t] = 1.f / (t + 1);
  for (int k = 0; k < 256; ++k) host_table[k] = k * 2654435761u;
  float *in, *out;
  unsigned* keys;
  CHECK(cudaMalloc(&in, N * sizeof(float)));
  CHECK(cudaMalloc(&out, N * sizeof(float)));
  CHECK(cudaMalloc(&keys, N * sizeof(unsigned)));
  CHECK(cudaMemcpy(in, host_in, N * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(out, 0, N * sizeof(float)));
  CHECK(cudaMemcpyToSymbol(taps, host_taps, sizeof host_taps));
  CHECK(cudaMemcpyToSymbol(table, host_table, sizeof host_table));
  const int blocks = (N + 255) / 256;
  float filter_ms = best_ms(repeats, [&] { filter<<<blocks, 256>>>(in, out, N); });
  float lookup_ms = best_ms(repeats, [&] { lookup<<<blocks, 256>>>(in, keys, N); });
  CHECK(cudaGetLastError());
  unsigned long long count = 0;
  CHECK(cudaMemcpy(host_out, out, N * sizeof(float), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(host_keys, keys, N * sizeof(unsigned), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpyFromSymbol(&count, lookups, sizeof count));
  double filter_sum = 0;
  unsigned long long key_sum = 0;
  for (int i = 0; i < N; ++i) filter_sum += host_out[i], key_sum += host_keys[i];
  printf("filter_ms=%.4f lookup_ms=%.4f filter_sum=%.6f key_sum=%llu lookups=%llu\n", filter_ms, lookup_ms,
         filter_sum, key_sum, count);
  free(host_in), free(host_out), free(host_keys);
  return 0;
}
