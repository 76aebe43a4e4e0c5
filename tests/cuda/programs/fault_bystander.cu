// A job that shares the device with one whose kernel faults. It computes and checks
// a result, prints "ready good=<elements right>", waits for a line on stdin (the
// other job faults meanwhile), then tries to go on and prints what each call
// returned: after_copy=<copying its result back> after_sync=<cudaDeviceSynchronize>
// after_malloc=<a new allocation>. On a GPU, where the fault poisons the context the
// jobs share, each is cudaErrorIllegalAddress (700). With "unsynced" as its argument
// it launches its kernel once more before printing "ready", without synchronizing.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "runtime_check.h"

constexpr int N = 4096;

__global__ void triple_plus_one(const int* in, int* out, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 3 + 1;
}

int main(int argc, char** argv) {
  static int host_in[N], host_out[N];
  for (int i = 0; i < N; ++i) host_in[i] = i - 17;
  int *in = nullptr, *out = nullptr;
  CHECK(cudaMalloc(&in, N * sizeof(int)));
  CHECK(cudaMalloc(&out, N * sizeof(int)));
  CHECK(cudaMemcpy(in, host_in, sizeof host_in, cudaMemcpyHostToDevice));
  triple_plus_one<<<N / 256, 256>>>(in, out, N);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(host_out, out, sizeof host_out, cudaMemcpyDeviceToHost));
  int good = 0;
  for (int i = 0; i < N; ++i) good += host_out[i] == host_in[i] * 3 + 1;
  if (argc > 1 && strcmp(argv[1], "unsynced") == 0) triple_plus_one<<<N / 256, 256>>>(in, out, N);
  printf("ready good=%d\n", good);
  fflush(stdout);
  char line[16];
  if (fgets(line, sizeof line, stdin) == nullptr) return 1;
  cudaError_t copy = cudaMemcpy(host_out, out, sizeof host_out, cudaMemcpyDeviceToHost);
  cudaError_t sync = cudaDeviceSynchronize();
  int* more = nullptr;
  cudaError_t malloc_status = cudaMalloc(&more, 256);
  printf("after_copy=%d after_sync=%d after_malloc=%d\n", (int)copy, (int)sync, (int)malloc_status);
  fflush(stdout);
  return 0;
}
