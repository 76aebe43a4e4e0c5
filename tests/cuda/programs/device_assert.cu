// A failing device assert: CUDA prints "file:line: function: block: [..],
// thread: [..] Assertion `...` failed." on stderr, and the context is unusable
// afterwards: the synchronizing call and every later call return
// cudaErrorAssert (710). Thread 5 of block 1 fails; the rest pass.
#include <cassert>
#include <cstdio>

__global__ void check_below(const int* in, int limit, int* checked) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  assert(in[i] < limit);
  atomicAdd(checked, 1);
}

int main() {
  const int n = 256;
  int host[n];
  for (int i = 0; i < n; ++i) host[i] = i == 128 + 5 ? 1000 : i;
  int *d_in, *d_checked;
  cudaMalloc(&d_in, n * sizeof(int));
  cudaMalloc(&d_checked, sizeof(int));
  cudaMemset(d_checked, 0, sizeof(int));
  cudaMemcpy(d_in, host, n * sizeof(int), cudaMemcpyHostToDevice);
  check_below<<<2, 128>>>(d_in, n, d_checked);
  int launch = (int)cudaGetLastError();
  int sync = (int)cudaDeviceSynchronize();
  int* more = nullptr;
  int after_malloc = (int)cudaMalloc(&more, 16);
  int checked = -1;
  int after_copy = (int)cudaMemcpy(&checked, d_checked, sizeof(int), cudaMemcpyDeviceToHost);
  printf("launch=%d sync=%d after_malloc=%d after_copy=%d\n", launch, sync, after_malloc, after_copy);
  return sync == (int)cudaErrorAssert ? 0 : 1;
}
