// Explicit memory pools through the CUDA runtime, as cuda-samples'
// streamOrderedAllocation and cudaMallocAsync users make them:
//   memory_pools basics   a pool created with cudaMemPoolCreate, its release threshold
//                         set and read back, cudaMallocFromPoolAsync memory a kernel
//                         fills and the host reads, the pool's used/reserved counts
//                         (current and high) before and after cudaFreeAsync, the
//                         high-water reset, cudaMemPoolTrimTo, the device's current
//                         pool (cudaDeviceSetMemPool: cudaMallocAsync allocates from
//                         it), destroying it (the default pool is current again); what
//                         must fail: an attribute that is not one, a high-water mark
//                         set to nonzero, a current count set, allocating past maxSize
//   memory_pools quota    under tally-run --memory-quota 8M: 16 MiB from a pool fails,
//                         4 MiB works
//   memory_pools hold     4 MiB from a pool filled by a kernel; prints ready=1, waits
//                         for a line on stdin (the test suspends and resumes the job
//                         meanwhile), then checks every byte (pool_intact=1)
// Prints key=value lines; exits 0 unless the setup itself fails.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

#include "runtime_check.h"

__global__ void fill(unsigned* data, unsigned seed, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) data[i] = seed ^ (unsigned)(i * 2654435761u);
}

static cudaMemPool_t make_pool(size_t max_size) {
  cudaMemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = cudaMemAllocationTypePinned;
  props.handleTypes = cudaMemHandleTypeNone;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  props.maxSize = max_size;
  cudaMemPool_t pool;
  CHECK(cudaMemPoolCreate(&pool, &props));
  return pool;
}

static uint64_t attr(cudaMemPool_t pool, cudaMemPoolAttr a) {
  uint64_t v = 0;
  CHECK(cudaMemPoolGetAttribute(pool, a, &v));
  return v;
}

static int wrong_words(const unsigned* host, unsigned seed, size_t n) {
  int wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += host[i] != (seed ^ (unsigned)(i * 2654435761u));
  return wrong;
}

static int basics() {
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  int supported = 0;
  CHECK(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, 0));
  printf("pools_supported=%d\n", supported);

  cudaMemPool_t pool = make_pool(0);
  uint64_t threshold = UINT64_MAX;   // as streamOrderedAllocation sets it: keep everything
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
  printf("threshold_read_back=%d\n", attr(pool, cudaMemPoolAttrReleaseThreshold) == UINT64_MAX);

  const size_t n = 1 << 18, bytes = n * sizeof(unsigned);
  fill<<<1, 1>>>(nullptr, 0, 0);          // loads the module before memory is counted
  CHECK(cudaDeviceSynchronize());
  size_t free_before = 0, free_during = 0, total = 0;
  CHECK(cudaMemGetInfo(&free_before, &total));
  unsigned* data = nullptr;
  CHECK(cudaMallocFromPoolAsync((void**)&data, bytes, pool, stream));
  CHECK(cudaMemGetInfo(&free_during, &total));
  printf("charged=%d\n", (int)(free_before - free_during >= bytes));
  fill<<<(n + 255) / 256, 256, 0, stream>>>(data, 0x5eed, n);
  CHECK(cudaGetLastError());
  unsigned* host = (unsigned*)malloc(bytes);
  CHECK(cudaMemcpyAsync(host, data, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  printf("pool_wrong=%d\n", wrong_words(host, 0x5eed, n));
  printf("used_current=%llu reserved_current=%llu used_high=%llu\n",
         (unsigned long long)attr(pool, cudaMemPoolAttrUsedMemCurrent),
         (unsigned long long)attr(pool, cudaMemPoolAttrReservedMemCurrent),
         (unsigned long long)attr(pool, cudaMemPoolAttrUsedMemHigh));
  CHECK(cudaFreeAsync(data, stream));
  CHECK(cudaStreamSynchronize(stream));
  printf("used_after_free=%llu high_after_free=%llu\n",
         (unsigned long long)attr(pool, cudaMemPoolAttrUsedMemCurrent),
         (unsigned long long)attr(pool, cudaMemPoolAttrUsedMemHigh));
  uint64_t zero = 0, five = 5;
  CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &zero));
  printf("high_after_reset=%llu\n", (unsigned long long)attr(pool, cudaMemPoolAttrUsedMemHigh));
  printf("set_high_nonzero=%d\n", (int)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &five));
  printf("set_current=%d\n", (int)cudaMemPoolSetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &zero));
  printf("unknown_attribute=%d\n", (int)cudaMemPoolSetAttribute(pool, (cudaMemPoolAttr)99, &zero));
  (void)cudaGetLastError();
  CHECK(cudaMemPoolTrimTo(pool, 0));

  // The device's current pool is where cudaMallocAsync allocates.
  cudaMemPool_t default_pool, current;
  CHECK(cudaDeviceGetDefaultMemPool(&default_pool, 0));
  CHECK(cudaDeviceSetMemPool(0, pool));
  CHECK(cudaDeviceGetMemPool(&current, 0));
  printf("current_is_pool=%d\n", current == pool);
  void* from_current = nullptr;
  CHECK(cudaMallocAsync(&from_current, 4096, stream));
  printf("current_used=%llu\n", (unsigned long long)attr(pool, cudaMemPoolAttrUsedMemCurrent));
  CHECK(cudaFreeAsync(from_current, stream));
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaMemPoolDestroy(pool));
  CHECK(cudaDeviceGetMemPool(&current, 0));
  printf("default_current_again=%d\n", current == default_pool);
  printf("destroy_default=%d\n", (int)cudaMemPoolDestroy(default_pool));
  (void)cudaGetLastError();

  // A pool with a maxSize refuses what would take it past.
  cudaMemPool_t small = make_pool(1 << 20);
  void* a = nullptr;
  void* b = nullptr;
  CHECK(cudaMallocFromPoolAsync(&a, 768 << 10, small, stream));
  printf("past_max_size=%d\n", (int)cudaMallocFromPoolAsync(&b, 512 << 10, small, stream));
  (void)cudaGetLastError();
  CHECK(cudaFreeAsync(a, stream));
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaMemPoolDestroy(small));
  free(host);
  return 0;
}

static int quota() {
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  cudaMemPool_t pool = make_pool(0);
  void* big = nullptr;
  void* fits = nullptr;
  printf("over_quota=%d\n", (int)cudaMallocFromPoolAsync(&big, 16 << 20, pool, stream));
  (void)cudaGetLastError();
  printf("under_quota=%d\n", (int)cudaMallocFromPoolAsync(&fits, 4 << 20, pool, stream));
  CHECK(cudaFreeAsync(fits, stream));
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaMemPoolDestroy(pool));
  return 0;
}

static int hold() {
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  cudaMemPool_t pool = make_pool(0);
  const size_t n = 1 << 20, bytes = n * sizeof(unsigned);
  unsigned* data = nullptr;
  CHECK(cudaMallocFromPoolAsync((void**)&data, bytes, pool, stream));
  fill<<<(n + 255) / 256, 256, 0, stream>>>(data, 0xfeed, n);
  CHECK(cudaStreamSynchronize(stream));
  printf("ready=1\n");
  fflush(stdout);
  char line[64];
  if (!fgets(line, sizeof line, stdin)) return 1;
  unsigned* host = (unsigned*)malloc(bytes);
  CHECK(cudaMemcpyAsync(host, data, bytes, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  printf("pool_intact=%d\n", wrong_words(host, 0xfeed, n) == 0);
  CHECK(cudaFreeAsync(data, stream));
  CHECK(cudaStreamSynchronize(stream));
  CHECK(cudaMemPoolDestroy(pool));
  free(host);
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const char* mode = argc > 1 ? argv[1] : "basics";
  if (strcmp(mode, "basics") == 0) return basics();
  if (strcmp(mode, "quota") == 0) return quota();
  if (strcmp(mode, "hold") == 0) return hold();
  fprintf(stderr, "unknown mode %s\n", mode);
  return 2;
}
