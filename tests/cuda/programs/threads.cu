// Several host threads drive the device at once, each on its own stream (and one
// on the per-thread default stream through cudaStreamPerThread): copies large
// enough to go through the arenas in several chunks, kernels, synchronous
// copies back. Replies to different threads interleave on the completion ring,
// and download-arena chunks are released in the order they arrived whichever
// thread finishes copying first. Each thread checks its own results, and ends with
// cudaDeviceSynchronize: none of them calls cudaSetDevice, and the runtime makes
// the primary context current only on the first (docs/export-tables.md, "Worker
// threads").
#include <cstdio>
#include <thread>
#include <vector>
#include <cuda_runtime.h>

__global__ void affine(const int* in, int* out, int a, int b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * a + b;
}

int worker(int id, int rounds, int n) {
  cudaStream_t stream = cudaStreamPerThread;
  if (id != 0 && cudaStreamCreate(&stream) != cudaSuccess) return -1;
  std::vector<int> in(n), out(n);
  int *d_in, *d_out;
  if (cudaMalloc(&d_in, n * sizeof(int)) != cudaSuccess || cudaMalloc(&d_out, n * sizeof(int)) != cudaSuccess)
    return -1;
  int good_rounds = 0;
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < n; ++i) in[i] = i ^ (id * 7919 + r);
    cudaMemcpyAsync(d_in, in.data(), n * sizeof(int), cudaMemcpyHostToDevice, stream);
    affine<<<(n + 255) / 256, 256, 0, stream>>>(d_in, d_out, id + 2, r, n);
    cudaMemcpyAsync(out.data(), d_out, n * sizeof(int), cudaMemcpyDeviceToHost, stream);
    if (cudaStreamSynchronize(stream) != cudaSuccess) return -1;
    int good = 0;
    for (int i = 0; i < n; ++i) good += out[i] == in[i] * (id + 2) + r;
    good_rounds += good == n;
  }
  cudaFree(d_in);
  cudaFree(d_out);
  if (id != 0) cudaStreamDestroy(stream);
  if (cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    printf("thread%d: cudaDeviceSynchronize: %s\n", id, cudaGetErrorString(e));
    return -1;
  }
  return good_rounds;
}

int main(int argc, char** argv) {
  const int threads = 4, rounds = 6;
  const int n = argc > 1 ? atoi(argv[1]) : (5 << 20) / 4;  // 5 MiB per copy by default
  std::vector<int> results(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { results[t] = worker(t, rounds, n); });
  for (auto& th : pool) th.join();
  int all = 0;
  for (int t = 0; t < threads; ++t) {
    printf("thread%d=%d\n", t, results[t]);
    all += results[t];
  }
  printf("good_rounds=%d of %d\n", all, threads * rounds);
  return all == threads * rounds ? 0 : 1;
}
