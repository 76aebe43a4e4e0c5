// Virtual memory management through tally (the driver API, as PyTorch's
// expandable_segments allocator uses it):
//   virtual_memory basics PTX   reserve a range, create two physical chunks, map them
//                               side by side, enable access, run a kernel over both and
//                               copy across the seam; unmap one and map it again (its
//                               contents stay); what must fail (access before
//                               cuMemSetAccess, overlapping maps, cuMemFree of a mapped
//                               address, partial unmaps, sizes off the granularity)
//   virtual_memory quota        physical memory counts against --memory-quota
//   virtual_memory owner        maps memory, prints its address, waits for a line on
//                               stdin (another job tries it), then checks it is intact
//   virtual_memory leak         maps memory and exits without unmapping (the server
//                               must give it back)
// Prints key=value lines; exits 0 unless the setup itself fails.
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver_check.h"

static CUmemAllocationProp g_prop;
static size_t g_gran;

// The context, and the allocation properties every test here uses.
static void setup_virtual_memory(void) {
  setup();
  memset(&g_prop, 0, sizeof g_prop);
  g_prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  g_prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  g_prop.location.id = 0;
  g_prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;  // as PyTorch asks
  CHECK(cuMemGetAllocationGranularity(&g_gran, &g_prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
}

static void set_access(CUdeviceptr ptr, size_t size, CUmemAccess_flags flags) {
  CUmemAccessDesc access;
  memset(&access, 0, sizeof access);
  access.location = g_prop.location;
  access.flags = flags;
  CHECK(cuMemSetAccess(ptr, size, &access, 1));
}

// A reservation of `chunks` chunks with `mapped` of them mapped (and accessible) from the start.
static CUdeviceptr mapped_range(size_t chunks, size_t mapped, CUmemGenericAllocationHandle* handles) {
  CUdeviceptr base;
  CHECK(cuMemAddressReserve(&base, chunks * g_gran, 0, 0, 0));
  for (size_t i = 0; i < mapped; ++i) {
    CHECK(cuMemCreate(&handles[i], g_gran, &g_prop, 0));
    CHECK(cuMemMap(base + i * g_gran, g_gran, 0, handles[i], 0));
  }
  set_access(base, mapped * g_gran, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  return base;
}

static void basics(const char* ptx_path) {
  printf("granularity=%zu\n", g_gran);
  CUmodule mod;
  CUfunction iota;
  char* ptx = read_file(ptx_path, NULL);
  CHECK(cuModuleLoadData(&mod, ptx));
  CHECK(cuModuleGetFunction(&iota, mod, "iota"));

  CUdeviceptr base;
  CUmemGenericAllocationHandle h[2];
  CHECK(cuMemAddressReserve(&base, 4 * g_gran, 0, 0, 0));
  CHECK(cuMemCreate(&h[0], g_gran, &g_prop, 0));
  CHECK(cuMemCreate(&h[1], g_gran, &g_prop, 0));
  CHECK(cuMemMap(base, g_gran, 0, h[0], 0));
  CHECK(cuMemMap(base + g_gran, g_gran, 0, h[1], 0));
  int one = 1;
  // Mapped but not yet accessible: copies are refused.
  printf("copy_before_access=%d\n", (int)cuMemcpyHtoD(base, &one, sizeof one));
  set_access(base, 2 * g_gran, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);

  // A kernel writing ints over the seam between the two chunks, then a copy across it.
  const int n = 4096;
  CUdeviceptr out = base + g_gran - 2048 * sizeof(int);
  int start = 7;
  void* params[] = {&out, (void*)&n, &start};
  CHECK(cuLaunchKernel(iota, (n + 127) / 128, 1, 1, 128, 1, 1, 0, NULL, params, NULL));
  int* host = malloc(n * sizeof(int));
  CHECK(cuMemcpyDtoH(host, out, n * sizeof(int)));
  int good = 0;
  for (int i = 0; i < n; ++i) good += host[i] == 7 + i;
  printf("kernel_over_seam_good=%d\n", good);

  // Unmap the second chunk, map it again: its contents are its own.
  CHECK(cuMemUnmap(base + g_gran, g_gran));
  printf("copy_after_unmap=%d\n", (int)cuMemcpyDtoH(host, base + g_gran, sizeof(int)));
  CHECK(cuMemMap(base + 3 * g_gran, g_gran, 0, h[1], 0));
  set_access(base + 3 * g_gran, g_gran, CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  int again = 0;
  CHECK(cuMemcpyDtoH(&again, base + 3 * g_gran, sizeof again));
  printf("remapped_value=%d\n", again);  // element 2048 of the iota: 7 + 2048

  // What must fail, changing nothing.
  printf("map_overlap=%d\n", (int)cuMemMap(base, g_gran, 0, h[1], 0));
  printf("map_outside=%d\n", (int)cuMemMap(base + 4 * g_gran, g_gran, 0, h[1], 0));
  printf("map_unaligned=%d\n", (int)cuMemMap(base + 2 * g_gran, g_gran / 2, 0, h[0], 0));
  printf("free_mapped=%d\n", (int)cuMemFree(base));
  printf("unmap_partial=%d\n", (int)cuMemUnmap(base, g_gran / 2));
  CUmemGenericAllocationHandle odd;
  printf("create_unaligned=%d\n", (int)cuMemCreate(&odd, g_gran + 4096, &g_prop, 0));
  printf("release_unknown=%d\n", (int)cuMemRelease(h[1] + 1000));
  // Released while mapped: usable until unmapped.
  CHECK(cuMemRelease(h[0]));
  CHECK(cuMemcpyDtoH(&again, base + g_gran - 4, sizeof again));
  printf("released_still_mapped=%d\n", again);  // 7 + 2047
  size_t free_before = 0, free_after = 0, total = 0;
  CHECK(cuMemGetInfo(&free_before, &total));
  CHECK(cuMemUnmap(base, g_gran));
  CHECK(cuMemGetInfo(&free_after, &total));
  printf("freed_at_last_unmap=%d\n", free_after - free_before == g_gran);
  CHECK(cuMemUnmap(base + 3 * g_gran, g_gran));
  CHECK(cuMemRelease(h[1]));
  CHECK(cuMemAddressFree(base, 4 * g_gran));
  printf("copy_after_free=%d\n", (int)cuMemcpyDtoH(host, base, sizeof(int)));
  printf("free_twice=%d\n", (int)cuMemAddressFree(base, 4 * g_gran));
  free(host);
  free(ptx);
}

static void quota(void) {
  // Run with --memory-quota of 3 granules: the third create goes over.
  CUmemGenericAllocationHandle h[3];
  CHECK(cuMemCreate(&h[0], g_gran, &g_prop, 0));
  CHECK(cuMemCreate(&h[1], g_gran, &g_prop, 0));
  CUdeviceptr plain;
  CHECK(cuMemAlloc(&plain, 4096));
  printf("create_over_quota=%d\n", (int)cuMemCreate(&h[2], g_gran, &g_prop, 0));
  CHECK(cuMemRelease(h[1]));
  printf("create_after_release=%d\n", (int)cuMemCreate(&h[2], g_gran, &g_prop, 0));
}

static void owner(void) {
  CUmemGenericAllocationHandle h[1];
  CUdeviceptr base = mapped_range(2, 1, h);
  CHECK(cuMemsetD32(base, 0x5a5a5a5a, g_gran / 4));
  printf("address=%llu\n", (unsigned long long)base);
  fflush(stdout);
  char line[16];
  if (!fgets(line, sizeof line, stdin)) exit(1);
  unsigned* host = malloc(g_gran);
  CHECK(cuMemcpyDtoH(host, base, g_gran));
  int intact = 1;
  for (size_t i = 0; i < g_gran / 4; ++i) intact &= host[i] == 0x5a5a5a5au;
  printf("intact=%d\n", intact);
  free(host);
}

static void intruder(unsigned long long address) {
  int zero = 0;
  printf("intruder_htod=%d\n", (int)cuMemcpyHtoD(address, &zero, sizeof zero));
  printf("intruder_memset=%d\n", (int)cuMemsetD32(address, 0, 16));
  printf("intruder_unmap=%d\n", (int)cuMemUnmap(address, g_gran));
  printf("intruder_free=%d\n", (int)cuMemAddressFree(address, 2 * g_gran));
}

static void leak(void) {
  CUmemGenericAllocationHandle h[2];
  mapped_range(3, 2, h);
  printf("leaking=1\n");
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  setup_virtual_memory();
  if (strcmp(argv[1], "basics") == 0 && argc == 3) basics(argv[2]);
  else if (strcmp(argv[1], "quota") == 0) quota();
  else if (strcmp(argv[1], "owner") == 0) owner();
  else if (strcmp(argv[1], "intruder") == 0 && argc == 3) intruder(strtoull(argv[2], NULL, 10));
  else if (strcmp(argv[1], "leak") == 0) leak();
  else return 2;
  return 0;
}
