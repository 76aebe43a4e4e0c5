// Kernels that launch kernels (CUDA dynamic parallelism; build with -rdc=true):
//   - fill: every thread of the parent launches a child that fills its chunk;
//   - nested: a kernel that launches itself until depth 4, each level adding 1 to a
//     counter and passing a struct by value;
//   - tail: a child in the NULL stream writes, a tail launch (cudaStreamTailLaunch)
//     checks that it runs after it;
//   - cudaGetLastError in the parent after its launches;
//   - with the argument "fault": a child writes through a bad pointer; the host sees
//     the launch fail at its next synchronization.
// Prints key=value lines the test checks.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "runtime_check.h"

struct Step {
  int depth;
  int limit;
  int weight[6];   // 32 bytes of parameters by value
};

__global__ void fill_chunk(float* out, int n, float value) {
  int i = threadIdx.x;
  if (i < n) out[i] = value;
}

__global__ void fill(float* out, int n, int chunk) {
  int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t < n / chunk) fill_chunk<<<1, chunk>>>(out + t * chunk, chunk, 1.0f + t);
}

__global__ void nested(Step step, int* visits, int* weights) {
  atomicAdd(&visits[step.depth], 1);
  if (threadIdx.x == 0) atomicAdd(weights, step.weight[step.depth % 6]);
  if (threadIdx.x == 0 && step.depth + 1 < step.limit) {
    Step next = step;
    next.depth += 1;
    nested<<<2, 4>>>(next, visits, weights);
  }
}

__global__ void write_marker(int* marker) { *marker = 42; }

__global__ void check_marker(const int* marker, int* seen) { *seen = *marker; }

__global__ void bad_write(int* where) { *where = 1; }

__global__ void faulty_parent() { bad_write<<<1, 1>>>(reinterpret_cast<int*>(0x10)); }

__global__ void tail(int* marker, int* seen, int* last_error) {
  write_marker<<<1, 1>>>(marker);
  check_marker<<<1, 1, 0, cudaStreamTailLaunch>>>(marker, seen);
  *last_error = static_cast<int>(cudaGetLastError());
}

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "fault") == 0) {
    faulty_parent<<<1, 1>>>();
    printf("fault_error=%d\n", static_cast<int>(cudaDeviceSynchronize()));
    return 0;
  }
  const int n = 169, chunk = 13;
  float* out;
  CHECK(cudaMalloc(&out, n * sizeof(float)));
  CHECK(cudaMemset(out, 0, n * sizeof(float)));
  fill<<<1, n / chunk>>>(out, n, chunk);
  CHECK(cudaGetLastError());
  float host[n];
  CHECK(cudaMemcpy(host, out, sizeof(host), cudaMemcpyDeviceToHost));
  int fill_wrong = 0;
  for (int i = 0; i < n; ++i) fill_wrong += host[i] != 1.0f + i / chunk;
  printf("fill_wrong=%d\n", fill_wrong);

  int *visits, *weights;
  CHECK(cudaMalloc(&visits, 8 * sizeof(int)));
  CHECK(cudaMalloc(&weights, sizeof(int)));
  CHECK(cudaMemset(visits, 0, 8 * sizeof(int)));
  CHECK(cudaMemset(weights, 0, sizeof(int)));
  Step step{0, 4, {1, 10, 100, 1000, 10000, 100000}};
  nested<<<1, 4>>>(step, visits, weights);
  CHECK(cudaDeviceSynchronize());
  int v[8], w;
  CHECK(cudaMemcpy(v, visits, sizeof(v), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&w, weights, sizeof(w), cudaMemcpyDeviceToHost));
  // Level 0: one block of 4 threads; each block's thread 0 launches 2 blocks of the next level.
  printf("visits=%d,%d,%d,%d,%d weights=%d\n", v[0], v[1], v[2], v[3], v[4], w);

  int *marker, *seen, *last_error;
  CHECK(cudaMalloc(&marker, sizeof(int)));
  CHECK(cudaMalloc(&seen, sizeof(int)));
  CHECK(cudaMalloc(&last_error, sizeof(int)));
  CHECK(cudaMemset(marker, 0, sizeof(int)));
  CHECK(cudaMemset(seen, 0, sizeof(int)));
  tail<<<1, 1>>>(marker, seen, last_error);
  int s, e;
  CHECK(cudaMemcpy(&s, seen, sizeof(s), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&e, last_error, sizeof(e), cudaMemcpyDeviceToHost));
  printf("tail_seen=%d last_error=%d\n", s, e);
  printf("done\n");
  return 0;
}
