// A job's memory limits, through every allocator (tally/cluster/memory_limits.py).
//   memory_limits try MIB    prints what cuMemGetInfo shows (info_free, info_total), then
//                            allocates MIB MiB with cuMemAlloc, with cuMemCreate (physical
//                            memory, as PyTorch's expandable segments make it), with
//                            cuMemAllocManaged and from the stream-ordered pool (cuMemAllocAsync,
//                            what cudaMallocAsync calls), each freed before the next: plain=,
//                            virtual=, managed=, pooled= are the CUresults
//   memory_limits hold MIB   allocates MIB MiB and keeps it (held=); then for each line on
//                            stdin allocates MIB MiB more and prints allocN= and what
//                            cuMemGetInfo shows (infoN_free, infoN_total), until end of input
//   memory_limits fill ALLOCATOR MIB MAX
//                            allocates MIB-MiB chunks with one allocator (plain: cuMemAlloc,
//                            pooled: cuMemAllocAsync, virtual: cuMemCreate mapped into a
//                            cuMemAddressReserve range, managed: cuMemAllocManaged) until one is
//                            refused or MAX are held: filled=N refused=CUresult (0: none); then
//                            waits for a line on stdin, frees them all and prints freed=N
// Prints key=value lines, flushed as they come; exits 0 unless the setup itself fails.
#include <cuda.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver_check.h"

#define MIB (1024ull * 1024ull)

static CUresult create_physical(size_t bytes) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle handle;
  CUresult rc = cuMemCreate(&handle, bytes, &prop, 0);
  if (rc == CUDA_SUCCESS) CHECK(cuMemRelease(handle));
  return rc;
}

static void print_info(const char* prefix) {
  size_t free_bytes = 0, total = 0;
  CHECK(cuMemGetInfo(&free_bytes, &total));
  printf("%s_free=%zu %s_total=%zu\n", prefix, free_bytes, prefix, total);
}

static void try_all(size_t bytes) {
  print_info("info");
  CUdeviceptr ptr;
  CUresult rc = cuMemAlloc(&ptr, bytes);
  if (rc == CUDA_SUCCESS) CHECK(cuMemFree(ptr));
  printf("plain=%d\n", (int)rc);
  printf("virtual=%d\n", (int)create_physical(bytes));
  rc = cuMemAllocManaged(&ptr, bytes, CU_MEM_ATTACH_GLOBAL);
  if (rc == CUDA_SUCCESS) CHECK(cuMemFree(ptr));
  printf("managed=%d\n", (int)rc);
  rc = cuMemAllocAsync(&ptr, bytes, NULL);
  if (rc == CUDA_SUCCESS) {
    CHECK(cuMemFreeAsync(ptr, NULL));
    CHECK(cuStreamSynchronize(NULL));
  }
  printf("pooled=%d\n", (int)rc);
}

static void hold(size_t bytes) {
  CUdeviceptr ptr;
  printf("held=%d\n", (int)cuMemAlloc(&ptr, bytes));
  fflush(stdout);
  char line[64];
  for (int n = 1; fgets(line, sizeof line, stdin); ++n) {
    printf("alloc%d=%d\n", n, (int)cuMemAlloc(&ptr, bytes));
    char prefix[16];
    snprintf(prefix, sizeof prefix, "info%d", n);
    print_info(prefix);
    fflush(stdout);
  }
}

#define FILL_MAX 4096

// One chunk with `allocator`; what it needs to be given back goes in *ptr and *handle.
static CUresult allocate(const char* allocator, size_t bytes, CUdeviceptr* ptr, CUmemGenericAllocationHandle* handle) {
  if (strcmp(allocator, "plain") == 0) return cuMemAlloc(ptr, bytes);
  if (strcmp(allocator, "managed") == 0) return cuMemAllocManaged(ptr, bytes, CU_MEM_ATTACH_GLOBAL);
  if (strcmp(allocator, "pooled") == 0) {
    CUresult rc = cuMemAllocAsync(ptr, bytes, NULL);
    CUresult synced = cuStreamSynchronize(NULL);
    return rc != CUDA_SUCCESS ? rc : synced;
  }
  if (strcmp(allocator, "virtual") == 0) {
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    CHECK(cuMemAddressReserve(ptr, bytes, 0, 0, 0));
    CUresult rc = cuMemCreate(handle, bytes, &prop, 0);
    if (rc != CUDA_SUCCESS) {
      CHECK(cuMemAddressFree(*ptr, bytes));
      return rc;
    }
    CHECK(cuMemMap(*ptr, bytes, 0, *handle, 0));
    CUmemAccessDesc access;
    memset(&access, 0, sizeof access);
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CHECK(cuMemSetAccess(*ptr, bytes, &access, 1));
    CHECK(cuMemsetD8(*ptr, 0x5a, bytes));    // the mapping is usable memory
    return CUDA_SUCCESS;
  }
  printf("unknown allocator %s\n", allocator);
  exit(2);
}

static void release(const char* allocator, size_t bytes, CUdeviceptr ptr, CUmemGenericAllocationHandle handle) {
  if (strcmp(allocator, "virtual") == 0) {
    CHECK(cuMemUnmap(ptr, bytes));
    CHECK(cuMemRelease(handle));
    CHECK(cuMemAddressFree(ptr, bytes));
  } else if (strcmp(allocator, "pooled") == 0) {
    CHECK(cuMemFreeAsync(ptr, NULL));
    CHECK(cuStreamSynchronize(NULL));
  } else {
    CHECK(cuMemFree(ptr));
  }
}

static void fill(const char* allocator, size_t bytes, int most) {
  static CUdeviceptr ptrs[FILL_MAX];
  static CUmemGenericAllocationHandle handles[FILL_MAX];
  int held = 0;
  CUresult refused = CUDA_SUCCESS;
  while (held < most && held < FILL_MAX) {
    refused = allocate(allocator, bytes, &ptrs[held], &handles[held]);
    if (refused != CUDA_SUCCESS) break;
    ++held;
  }
  printf("filled=%d refused=%d\n", held, (int)refused);
  fflush(stdout);
  char line[64];
  if (!fgets(line, sizeof line, stdin)) return;
  for (int i = 0; i < held; ++i) release(allocator, bytes, ptrs[i], handles[i]);
  printf("freed=%d\n", held);
}

int main(int argc, char** argv) {
  if (argc == 5 && strcmp(argv[1], "fill") == 0) {
    setup();
    fill(argv[2], strtoull(argv[3], NULL, 10) * MIB, atoi(argv[4]));
    return 0;
  }
  if (argc != 3) return 2;
  setup();
  size_t bytes = strtoull(argv[2], NULL, 10) * MIB;
  if (strcmp(argv[1], "try") == 0) {
    try_all(bytes);
  } else if (strcmp(argv[1], "hold") == 0) {
    hold(bytes);
  } else {
    return 2;
  }
  return 0;
}
