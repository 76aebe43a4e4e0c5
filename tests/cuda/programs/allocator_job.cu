// A job that takes 16 MiB of device memory through one allocator (argv[1]):
//   malloc   cudaMalloc                  async   cudaMallocAsync on a stream
//   pool     cudaMallocFromPoolAsync (the device's default pool)
//   pitch    cudaMallocPitch (4096 rows of 4096 bytes)
//   vmm      cuMemAddressReserve + cuMemCreate + cuMemMap + cuMemSetAccess
//   managed  cudaMallocManaged
// fills it with a kernel, optionally (argv[2] "wait") prints "holding" and waits
// for a line on stdin, then runs a second kernel over it and checks every word on
// the host. Prints "wrong=<count>" (0 when exact); a failed call prints where and
// its error, and exits 1. Build with -lcuda (tally's libcuda.so.1) for vmm.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>

#include "driver_call.h"
#include "runtime_check.h"

constexpr size_t BYTES = 16u << 20;
constexpr size_t WORDS = BYTES / sizeof(unsigned);

__global__ void fill(unsigned* data, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) data[i] = (unsigned)i * 2654435761u;
}

__global__ void step(unsigned* data, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) data[i] = data[i] * 3u + 1u;
}

static unsigned* take(const char* how, cudaStream_t stream) {
  void* p = nullptr;
  if (!strcmp(how, "malloc")) {
    CHECK(cudaMalloc(&p, BYTES));
  } else if (!strcmp(how, "async")) {
    CHECK(cudaMallocAsync(&p, BYTES, stream));
  } else if (!strcmp(how, "pool")) {
    cudaMemPool_t pool;
    CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
    CHECK(cudaMallocFromPoolAsync(&p, BYTES, pool, stream));
  } else if (!strcmp(how, "pitch")) {
    size_t pitch = 0;
    CHECK(cudaMallocPitch(&p, &pitch, 4096, BYTES / 4096));
    if (pitch != 4096) {
      printf("pitch=%zu\n", pitch);
      exit(1);
    }
  } else if (!strcmp(how, "managed")) {
    CHECK(cudaMallocManaged(&p, BYTES));
  } else if (!strcmp(how, "vmm")) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    CUdeviceptr base;
    CUmemGenericAllocationHandle handle;
    DRIVER(cuMemAddressReserve(&base, BYTES, 0, 0, 0));
    DRIVER(cuMemCreate(&handle, BYTES, &prop, 0));
    DRIVER(cuMemMap(base, BYTES, 0, handle, 0));
    CUmemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    DRIVER(cuMemSetAccess(base, BYTES, &access, 1));
    DRIVER(cuMemRelease(handle));           // the mapping keeps it; it goes at exit
    p = (void*)base;
  } else {
    printf("unknown allocator %s\n", how);
    exit(2);
  }
  return (unsigned*)p;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  cudaStream_t stream;
  CHECK(cudaStreamCreate(&stream));
  unsigned* data = take(argv[1], stream);
  const int blocks = (int)((WORDS + 255) / 256);
  fill<<<blocks, 256, 0, stream>>>(data, WORDS);
  CHECK(cudaStreamSynchronize(stream));
  if (argc > 2 && !strcmp(argv[2], "wait")) {
    printf("holding\n");
    fflush(stdout);
    char line[16];
    if (fgets(line, sizeof line, stdin) == nullptr) return 1;
  }
  step<<<blocks, 256, 0, stream>>>(data, WORDS);
  static unsigned host[WORDS];
  CHECK(cudaMemcpyAsync(host, data, BYTES, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  int wrong = 0;
  for (size_t i = 0; i < WORDS; ++i) wrong += host[i] != (unsigned)i * 2654435761u * 3u + 1u;
  printf("wrong=%d\n", wrong);
  return 0;
}
