// Device-side malloc/free from the context's heap (cudaLimitMallocHeapSize).
//
// argv[1] is the heap size to set in MiB (0: keep the driver's default of 8 MiB).
// 1. many threads allocate at once: every thread of 64 blocks x 128 threads gets
//    its own 48-byte block and writes through it; a second kernel reads each
//    back and frees it; their addresses must all differ and lie in one
//    heap-sized range;
// 2. exhaustion: one thread takes 64 KiB blocks until malloc returns NULL (the
//    count shows the heap's size), frees them all, and can take as many again;
//    a block larger than the heap is NULL at once;
// 3. the heap's size is fixed once such a kernel ran: setting another fails
//    with cudaErrorInvalidValue, setting the same one succeeds;
// 4. with argv[2] == "badfree": free of a pointer malloc never returned fails
//    the launch with cudaErrorIllegalAddress.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "runtime_check.h"

__global__ void many_threads(unsigned long long* addresses, int* wrong) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  int* block = static_cast<int*>(malloc(48));
  addresses[i] = reinterpret_cast<unsigned long long>(block);
  if (block == nullptr) {
    atomicAdd(wrong, 1);
    return;
  }
  for (int k = 0; k < 12; ++k) block[k] = i * 12 + k;
}

// The blocks outlive the kernel that took them, as CUDA's do: a later kernel reads and frees them.
__global__ void check_and_free(const unsigned long long* addresses, int* wrong) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  int* block = reinterpret_cast<int*>(addresses[i]);
  if (block == nullptr) return;
  for (int k = 0; k < 12; ++k) {
    if (block[k] != i * 12 + k) atomicAdd(wrong, 1);
  }
  free(block);
}

__global__ void exhaust(int* counts, unsigned long long* too_big) {
  const size_t chunk = 64 << 10;
  void* taken[1024];
  int n = 0;
  while (n < 1024 && (taken[n] = malloc(chunk)) != nullptr) {
    static_cast<char*>(taken[n])[chunk - 1] = 1;   // the whole block is usable
    ++n;
  }
  counts[0] = n;
  for (int k = 0; k < n; ++k) free(taken[k]);
  int again = 0;
  while (again < 1024 && (taken[again] = malloc(chunk)) != nullptr) ++again;
  counts[1] = again;
  for (int k = 0; k < again; ++k) free(taken[k]);
  *too_big = reinterpret_cast<unsigned long long>(malloc(size_t{1} << 40));
}

__global__ void bad_free(int* p) { free(p + 1); }

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? strtoul(argv[1], nullptr, 10) : 0;
  if (mib != 0) {
    cudaError_t e = cudaDeviceSetLimit(cudaLimitMallocHeapSize, mib << 20);
    printf("set_limit=%d\n", (int)e);
    if (e != cudaSuccess) return 0;
  }
  size_t limit = 0;
  CHECK(cudaDeviceGetLimit(&limit, cudaLimitMallocHeapSize));
  printf("limit=%zu\n", limit);
  size_t free_bytes = 0, total_bytes = 0;
  CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  printf("free_before=%zu\n", free_bytes);

  const int blocks = 64, threads = 128, n = blocks * threads;
  unsigned long long* d_addresses;
  int* d_wrong;
  CHECK(cudaMalloc(&d_addresses, n * sizeof(unsigned long long)));
  CHECK(cudaMalloc(&d_wrong, sizeof(int)));
  CHECK(cudaMemset(d_wrong, 0, sizeof(int)));
  many_threads<<<blocks, threads>>>(d_addresses, d_wrong);
  CHECK(cudaGetLastError());
  check_and_free<<<blocks, threads>>>(d_addresses, d_wrong);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  std::vector<unsigned long long> addresses(n);
  int wrong = 0;
  CHECK(cudaMemcpy(addresses.data(), d_addresses, n * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&wrong, d_wrong, sizeof(int), cudaMemcpyDeviceToHost));
  std::set<unsigned long long> distinct(addresses.begin(), addresses.end());
  unsigned long long low = *distinct.begin(), high = *distinct.rbegin();
  printf("many_wrong=%d distinct=%zu null=%d span_ok=%d\n", wrong, distinct.size(), (int)distinct.count(0),
         (int)(high - low < limit));
  CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  printf("free_after=%zu\n", free_bytes);

  int* d_counts;
  unsigned long long* d_too_big;
  CHECK(cudaMalloc(&d_counts, 2 * sizeof(int)));
  CHECK(cudaMalloc(&d_too_big, sizeof(unsigned long long)));
  exhaust<<<1, 1>>>(d_counts, d_too_big);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  int counts[2];
  unsigned long long too_big = 1;
  CHECK(cudaMemcpy(counts, d_counts, sizeof counts, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&too_big, d_too_big, sizeof too_big, cudaMemcpyDeviceToHost));
  printf("chunks=%d chunks_again=%d too_big=%llu\n", counts[0], counts[1], too_big);

  printf("set_other=%d\n", (int)cudaDeviceSetLimit(cudaLimitMallocHeapSize, limit * 2));
  printf("set_same=%d\n", (int)cudaDeviceSetLimit(cudaLimitMallocHeapSize, limit));
  cudaGetLastError();   // the refused set is the runtime's last error: not the next launch's

  if (argc > 2 && strcmp(argv[2], "badfree") == 0) {
    bad_free<<<1, 1>>>(d_wrong);
    printf("bad_free_launch=%d\n", (int)cudaGetLastError());
    printf("bad_free_sync=%d\n", (int)cudaDeviceSynchronize());
  }
  printf("done=1\n");
  return 0;
}
