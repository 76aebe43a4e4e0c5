// Memory pools that hand out no device memory (CUDA 13), as cuda.core's
// ManagedMemoryResource and PinnedMemoryResource use them: managed pools
// (CU_MEM_ALLOCATION_TYPE_MANAGED) and pinned host memory pools (location HOST or
// HOST_NUMA): each kind's default pool and a pool the job creates, allocations from them
// that the CPU and a kernel both use, each kind's current pool, and what cuda.h refuses.
// Prints key=value lines; exits 0 unless a call that must succeed fails.
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#include "driver_check.h"

__global__ void add_index(int* v, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) v[i] += i;
}

int main() {
  setup();
  CUstream stream;
  CHECK(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUmemLocation none{CU_MEM_LOCATION_TYPE_NONE, 0}, device{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemoryPool default_managed, default_device, pool, current;
  CHECK(cuMemGetDefaultMemPool(&default_managed, &none, CU_MEM_ALLOCATION_TYPE_MANAGED));
  CHECK(cuMemGetDefaultMemPool(&default_device, &device, CU_MEM_ALLOCATION_TYPE_PINNED));
  printf("defaults_differ=%d\n", default_managed != default_device);

  CUmemPoolProps props;
  memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_MANAGED;
  props.location = device;
  CHECK(cuMemPoolCreate(&pool, &props));

  CUmemLocation host{CU_MEM_LOCATION_TYPE_HOST, 0}, numa{CU_MEM_LOCATION_TYPE_HOST_NUMA, 0};
  CUmemoryPool default_host, host_pool;
  CHECK(cuMemGetDefaultMemPool(&default_host, &host, CU_MEM_ALLOCATION_TYPE_PINNED));
  printf("host_default_differs=%d\n", default_host != default_device && default_host != default_managed);
  CUmemPoolProps host_props;
  memset(&host_props, 0, sizeof host_props);
  host_props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  host_props.location = numa;
  CHECK(cuMemPoolCreate(&host_pool, &host_props));
  CUmemAccessDesc access{device, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
  CHECK(cuMemPoolSetAccess(host_pool, &access, 1));

  const int n = 4096;
  int bad = 0;
  for (CUmemoryPool from : {default_managed, pool, default_host, host_pool}) {
    CUdeviceptr p;
    CHECK(cuMemAllocFromPoolAsync(&p, n * sizeof(int), from, stream));
    CHECK(cuStreamSynchronize(stream));
    int* v = reinterpret_cast<int*>(p);
    for (int i = 0; i < n; ++i) v[i] = 3 * i;          // the CPU writes it in place
    add_index<<<(n + 255) / 256, 256, 0, reinterpret_cast<cudaStream_t>(stream)>>>(v, n);
    CHECK(cuStreamSynchronize(stream));
    for (int i = 0; i < n; ++i) bad += v[i] != 4 * i;   // and reads what the kernel wrote
    unsigned managed = 0;
    CUmemoryPool owner = nullptr;
    CHECK(cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p));
    CHECK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p));
    cuuint64_t used = 0, after = 1;
    CHECK(cuMemPoolGetAttribute(from, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    CHECK(cuMemFreeAsync(p, stream));
    CHECK(cuStreamSynchronize(stream));
    CHECK(cuMemPoolGetAttribute(from, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &after));
    const char* which = from == pool ? "created" : from == default_managed ? "default"
                        : from == host_pool ? "host_created" : "host_default";
    printf("%s: is_managed=%u owner_is_pool=%d used=%llu after_free=%llu\n", which, managed, owner == from,
           (unsigned long long)used, (unsigned long long)after);
  }
  printf("bad=%d\n", bad);

  CHECK(cuMemGetMemPool(&current, &none, CU_MEM_ALLOCATION_TYPE_MANAGED));
  printf("current_is_default=%d\n", current == default_managed);
  CHECK(cuMemSetMemPool(&none, CU_MEM_ALLOCATION_TYPE_MANAGED, pool));
  CHECK(cuMemGetMemPool(&current, &device, CU_MEM_ALLOCATION_TYPE_MANAGED));
  printf("current_is_created=%d\n", current == pool);
  // refused: a managed pool as the device's current pool, a device pool as the current
  // managed pool, destroying the default managed pool, an unknown location type
  CUmemLocation unknown{static_cast<CUmemLocationType>(7), 0};
  printf("refused=%d,%d,%d,%d\n", (int)cuDeviceSetMemPool(0, pool),
         (int)cuMemSetMemPool(&none, CU_MEM_ALLOCATION_TYPE_MANAGED, default_device),
         (int)cuMemPoolDestroy(default_managed),
         (int)cuMemGetMemPool(&current, &unknown, CU_MEM_ALLOCATION_TYPE_MANAGED));
  CHECK(cuMemSetMemPool(&numa, CU_MEM_ALLOCATION_TYPE_PINNED, host_pool));
  CHECK(cuMemGetMemPool(&current, &host, CU_MEM_ALLOCATION_TYPE_PINNED));
  printf("host_current_is_created=%d\n", current == host_pool);
  CHECK(cuMemPoolDestroy(host_pool));
  CHECK(cuMemPoolDestroy(pool));
  CHECK(cuMemGetMemPool(&current, &none, CU_MEM_ALLOCATION_TYPE_MANAGED));
  printf("default_current_again=%d\n", current == default_managed);
  return 0;
}
