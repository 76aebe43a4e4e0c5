// Managed memory through the CUDA runtime (cudaMallocManaged), as tutorials and
// many programs use it: one pointer for the CPU and the kernels.
//   managed basics   the CPU fills, a kernel updates in place, the CPU reads after a
//                    synchronize; copies and memset into and out of managed memory;
//                    prefetch and advice read back; pointer attributes; the device
//                    attributes; memory comes back at cudaFree; what must fail
//   managed quota    an allocation over tally-run --memory-quota fails, one under it works
//   managed leak     allocates, writes, and exits without freeing
//   managed owner    allocates 1 MiB, fills it from the CPU, prints its address, waits
//                    for a line on stdin (another job tries it), then checks it is intact
// Prints key=value lines; exits 0 unless the setup itself fails.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>
#include <unistd.h>

#include "runtime_check.h"

__global__ void scale_add(int* data, int factor, int offset, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = data[i] * factor + offset;
}

__global__ void sum_into(const int* data, int n, unsigned long long* total) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(total, (unsigned long long)data[i]);
}

static int basics() {
  int managed = -1, concurrent = -1;
  CHECK(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, 0));
  CHECK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, 0));
  printf("attr_managed=%d attr_concurrent=%d\n", managed, concurrent);

  const int n = 1 << 16;
  size_t free_before = 0, free_during = 0, free_after = 0, total = 0;
  scale_add<<<1, 1>>>(nullptr, 0, 0, 0);  // loads the module (its memory) before the count starts
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemGetInfo(&free_before, &total));
  int* data = nullptr;
  CHECK(cudaMallocManaged(&data, n * sizeof(int)));
  CHECK(cudaMemGetInfo(&free_during, &total));
  printf("charged=%d\n", (int)(free_before - free_during >= n * sizeof(int)));

  for (int i = 0; i < n; ++i) data[i] = i;  // the CPU writes through the pointer ...
  scale_add<<<(n + 255) / 256, 256>>>(data, 3, 1, n);  // ... a kernel updates in place ...
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += data[i] != 3 * i + 1;  // ... and the CPU reads the result
  printf("kernel_wrong=%d\n", wrong);

  // A kernel reads what the CPU wrote since, with no copy in between.
  unsigned long long* sum = nullptr;
  CHECK(cudaMallocManaged(&sum, sizeof *sum));
  *sum = 0;
  for (int i = 0; i < n; ++i) data[i] = 2;
  sum_into<<<(n + 255) / 256, 256>>>(data, n, sum);
  CHECK(cudaDeviceSynchronize());
  printf("sum=%llu\n", *sum);

  // Copies and memset name managed memory like device memory.
  int* host = (int*)malloc(n * sizeof(int));
  int* dev = nullptr;
  CHECK(cudaMalloc(&dev, n * sizeof(int)));
  for (int i = 0; i < n; ++i) host[i] = 7 * i;
  CHECK(cudaMemcpy(data, host, n * sizeof(int), cudaMemcpyHostToDevice));
  CHECK(cudaDeviceSynchronize());  // a copy from pageable memory may still be landing when cudaMemcpy returns
  printf("htod_seen_by_cpu=%d\n", data[n - 1] == 7 * (n - 1));
  CHECK(cudaMemcpy(dev, data, n * sizeof(int), cudaMemcpyDefault));
  CHECK(cudaMemset(data, 0, n * sizeof(int)));
  CHECK(cudaDeviceSynchronize());
  printf("memset_seen_by_cpu=%d\n", data[5] == 0 && data[n - 1] == 0);
  CHECK(cudaMemcpy(host, dev, n * sizeof(int), cudaMemcpyDeviceToHost));
  printf("dtod_from_managed=%d\n", host[n - 1] == 7 * (n - 1));

  // Prefetch and advice are accepted and read back.
  cudaMemLocation gpu = {cudaMemLocationTypeDevice, 0}, cpu = {cudaMemLocationTypeHost, 0};
  CHECK(cudaMemPrefetchAsync(data, n * sizeof(int), gpu, 0, 0));
  CHECK(cudaMemAdvise(data, n * sizeof(int), cudaMemAdviseSetReadMostly, gpu));
  CHECK(cudaMemAdvise(data, n * sizeof(int), cudaMemAdviseSetPreferredLocation, cpu));
  int read_mostly = -1, preferred = 0, last_prefetch = 0;
  CHECK(cudaMemRangeGetAttribute(&read_mostly, sizeof read_mostly, cudaMemRangeAttributeReadMostly, data,
                                 n * sizeof(int)));
  CHECK(cudaMemRangeGetAttribute(&preferred, sizeof preferred, cudaMemRangeAttributePreferredLocation, data,
                                 n * sizeof(int)));
  CHECK(cudaMemRangeGetAttribute(&last_prefetch, sizeof last_prefetch, cudaMemRangeAttributeLastPrefetchLocation,
                                 data, n * sizeof(int)));
  printf("read_mostly=%d preferred=%d last_prefetch=%d\n", read_mostly, preferred, last_prefetch);
  CHECK(cudaStreamAttachMemAsync(0, data, 0, cudaMemAttachGlobal));

  cudaPointerAttributes attr;
  CHECK(cudaPointerGetAttributes(&attr, data + 10));
  printf("pointer_type=%d same_pointers=%d\n", (int)attr.type,
         attr.hostPointer == (void*)(data + 10) && attr.devicePointer == (void*)(data + 10));

  // What must fail, and change nothing.
  int* device_only = nullptr;
  CHECK(cudaMalloc(&device_only, 4096));
  printf("prefetch_device_memory=%d\n", (int)cudaMemPrefetchAsync(device_only, 4096, gpu, 0, 0));
  printf("advise_beyond_end=%d\n", (int)cudaMemAdvise(data, (n + 1024) * sizeof(int), cudaMemAdviseSetReadMostly, gpu));
  int* unused = nullptr;
  printf("bad_flags=%d\n", (int)cudaMallocManaged(&unused, 64, 0x10));
  cudaGetLastError();

  CHECK(cudaFree(device_only));
  CHECK(cudaFree(dev));
  CHECK(cudaFree(sum));
  CHECK(cudaFree(data));
  CHECK(cudaMemGetInfo(&free_after, &total));
  printf("given_back=%d\n", (int)(free_after == free_before));
  if (free_after != free_before) printf("free_before=%zu free_after=%zu\n", free_before, free_after);
  free(host);
  return 0;
}

static int quota() {
  void* big = nullptr;
  printf("over_quota=%d\n", (int)cudaMallocManaged(&big, 64 << 20));
  cudaGetLastError();
  void* small = nullptr;
  printf("under_quota=%d\n", (int)cudaMallocManaged(&small, 1 << 20));
  if (small) {
    memset(small, 1, 1 << 20);
    CHECK(cudaFree(small));
  }
  return 0;
}

static int leak() {
  int* data = nullptr;
  CHECK(cudaMallocManaged(&data, 8 << 20));
  memset(data, 0x01, 8 << 20);
  scale_add<<<1, 256>>>(data, 2, 0, 256);
  CHECK(cudaDeviceSynchronize());
  printf("leaked=%d\n", data[0] == 2 * 0x01010101);
  fflush(stdout);
  _exit(0);  // no cudaFree, no exit handlers: the server must give it back
}

static int owner() {
  const size_t bytes = 1 << 20;
  unsigned char* data = nullptr;
  CHECK(cudaMallocManaged(&data, bytes));
  memset(data, 0x11, bytes);
  printf("owner_ptr=%p\n", (void*)data);
  fflush(stdout);
  char line[64];
  if (!fgets(line, sizeof line, stdin)) return 1;
  CHECK(cudaDeviceSynchronize());
  size_t intact = 0;
  for (size_t i = 0; i < bytes; ++i) intact += data[i] == 0x11;
  printf("owner_intact=%d\n", (int)(intact == bytes));
  CHECK(cudaFree(data));
  return 0;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "basics";
  if (strcmp(mode, "basics") == 0) return basics();
  if (strcmp(mode, "quota") == 0) return quota();
  if (strcmp(mode, "leak") == 0) return leak();
  if (strcmp(mode, "owner") == 0) return owner();
  fprintf(stderr, "unknown mode %s\n", mode);
  return 2;
}
