// A job whose memory is of every kind a migration moves (tally-server migrate):
// virtual memory (a reservation of two chunks of physical memory, one released
// while still mapped, as PyTorch's expandable segments do), pinned host memory
// (a mapped buffer kernels write at its host address, and one copies go through),
// managed memory, and timed events. It fills everything, records events around a
// kernel, prints "ready" and waits for a line on stdin (the test migrates it
// then), and goes on: kernels over each kind of memory and copies through pinned
// memory, then checks every byte on the host. Prints key=value lines:
//   wrong_vmm= wrong_pinned= wrong_mapped= wrong_managed=   0 when nothing was lost
//   before_ms= carried_ms=     elapsed time of two events recorded before the wait,
//                              asked before and after it (the same when carried over)
//   across_ms=                 from an event recorded before the wait to one after it
//   inner_ms= outer_ms=        host time (CLOCK_MONOTONIC) that bounds across_ms
// Build with -lcuda (tally's libcuda.so.1): virtual memory is driver API only.
#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <ctime>

#include "driver_call.h"
#include "runtime_check.h"

constexpr int N = 1 << 16;            // ints per buffer

__global__ void fill(unsigned* out, unsigned seed, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) out[i] = (unsigned)i * 2654435761u + seed;
}

__global__ void step(unsigned* data, unsigned k, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) data[i] = data[i] * 3u + k;
}

static unsigned expect_fill(size_t i, unsigned seed) { return (unsigned)i * 2654435761u + seed; }

static double now_ms() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int blocks(size_t n) { return (int)((n + 255) / 256); }

int main() {
  CHECK(cudaFree(0));                          // the primary context, for the driver calls
  // Virtual memory: two chunks side by side in one reservation.
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  size_t gran = 0;
  DRIVER(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  CUdeviceptr base;
  CUmemGenericAllocationHandle chunk[2];
  DRIVER(cuMemAddressReserve(&base, 2 * gran, 0, 0, 0));
  for (int c = 0; c < 2; ++c) {
    DRIVER(cuMemCreate(&chunk[c], gran, &prop, 0));
    DRIVER(cuMemMap(base + c * gran, gran, 0, chunk[c], 0));
  }
  CUmemAccessDesc access;
  memset(&access, 0, sizeof access);
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  DRIVER(cuMemSetAccess(base, 2 * gran, &access, 1));
  DRIVER(cuMemRelease(chunk[1]));              // released while mapped: lives until unmapped
  const size_t vmm_n = 2 * gran / sizeof(unsigned);
  unsigned* vmm = (unsigned*)base;
  fill<<<blocks(vmm_n), 256>>>(vmm, 11, vmm_n);

  // Pinned: one buffer kernels write at its host address, one copies go through.
  unsigned *mapped, *staging, *managed, *device;
  CHECK(cudaHostAlloc(&mapped, N * sizeof(unsigned), cudaHostAllocMapped));
  CHECK(cudaMallocHost(&staging, N * sizeof(unsigned)));
  CHECK(cudaMallocManaged(&managed, N * sizeof(unsigned)));
  CHECK(cudaMalloc(&device, N * sizeof(unsigned)));
  for (int i = 0; i < N; ++i) managed[i] = expect_fill(i, 5), staging[i] = expect_fill(i, 7);
  fill<<<blocks(N), 256>>>(mapped, 3, N);
  CHECK(cudaMemcpy(device, staging, N * sizeof(unsigned), cudaMemcpyHostToDevice));

  cudaEvent_t first, second, third;
  CHECK(cudaEventCreate(&first));
  CHECK(cudaEventCreate(&second));
  CHECK(cudaEventCreate(&third));
  CHECK(cudaEventRecord(first));
  step<<<blocks(vmm_n), 256>>>(vmm, 1, vmm_n);
  const double before_second = now_ms();       // `second` is reached after this
  CHECK(cudaEventRecord(second));
  CHECK(cudaEventSynchronize(second));
  const double after_second = now_ms();        // ... and before this
  float before_ms = 0;
  CHECK(cudaEventElapsedTime(&before_ms, first, second));

  printf("ready\n");
  fflush(stdout);
  char line[16];
  if (fgets(line, sizeof line, stdin) == nullptr) return 1;

  const double before_third = now_ms();        // `third` is reached after this
  CHECK(cudaEventRecord(third));
  CHECK(cudaEventSynchronize(third));
  const double after_third = now_ms();         // ... and before this
  float carried_ms = 0, across_ms = 0;
  CHECK(cudaEventElapsedTime(&carried_ms, first, second));
  CHECK(cudaEventElapsedTime(&across_ms, second, third));

  step<<<blocks(vmm_n), 256>>>(vmm, 2, vmm_n);
  step<<<blocks(N), 256>>>(mapped, 4, N);
  step<<<blocks(N), 256>>>(managed, 6, N);
  step<<<blocks(N), 256>>>(device, 8, N);
  CHECK(cudaMemcpy(staging, device, N * sizeof(unsigned), cudaMemcpyDeviceToHost));
  CHECK(cudaDeviceSynchronize());

  static unsigned host_vmm[1 << 20];
  int wrong_vmm = 0, wrong_pinned = 0, wrong_mapped = 0, wrong_managed = 0;
  for (size_t done = 0; done < vmm_n; done += 1 << 20) {
    size_t n = vmm_n - done < (1u << 20) ? vmm_n - done : (1u << 20);
    CHECK(cudaMemcpy(host_vmm, vmm + done, n * sizeof(unsigned), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; ++i) wrong_vmm += host_vmm[i] != (expect_fill(done + i, 11) * 3u + 1) * 3u + 2;
  }
  for (int i = 0; i < N; ++i) {
    wrong_mapped += mapped[i] != expect_fill(i, 3) * 3u + 4;
    wrong_managed += managed[i] != expect_fill(i, 5) * 3u + 6;
    wrong_pinned += staging[i] != expect_fill(i, 7) * 3u + 8;
  }
  printf("wrong_vmm=%d wrong_pinned=%d wrong_mapped=%d wrong_managed=%d\n", wrong_vmm, wrong_pinned, wrong_mapped,
         wrong_managed);
  printf("before_ms=%.6f carried_ms=%.6f across_ms=%.3f inner_ms=%.3f outer_ms=%.3f\n", before_ms, carried_ms,
         across_ms, before_third - after_second, after_third - before_second);

  DRIVER(cuMemUnmap(base, 2 * gran));
  DRIVER(cuMemRelease(chunk[0]));
  DRIVER(cuMemAddressFree(base, 2 * gran));
  CHECK(cudaFreeHost(mapped));
  CHECK(cudaFreeHost(staging));
  CHECK(cudaFree(managed));
  CHECK(cudaFree(device));
  return 0;
}
