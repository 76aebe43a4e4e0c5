// Physical memory shared between two jobs through shareable handles, as NCCL and
// PyTorch's expandable segments share it (cuMemExportToShareableHandle with a
// POSIX file descriptor; here the importer opens it through /proc, which gives it
// the same file, where they pass it over a unix socket):
//   vmm_sharing owner     2 MiB of physical memory made shareable, mapped and filled;
//                         its properties and cuMemGetAccess read back; the handle
//                         retained from its address and released; exports it, prints
//                         pid=, fd=; waits for a line on stdin, then reads what the
//                         importer wrote (written_by_importer=1); what must fail:
//                         exporting memory not made shareable
//   vmm_sharing importer PID FD   imports it, maps it in its own reservation, checks the
//                         owner's bytes (read_owners=1), writes its own, unmaps and
//                         releases; what must fail: a descriptor that is no export
// Prints key=value lines; exits 0 unless the setup itself fails.
#include <cuda.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "driver_check.h"

#define WORDS (1u << 18)   // 1 MiB of the 2 MiB chunk is checked

static CUmemAllocationProp prop_with(CUmemAllocationHandleType types) {
  CUmemAllocationProp prop;
  memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = types;
  return prop;
}

static CUdeviceptr map_accessible(CUmemGenericAllocationHandle handle, size_t size) {
  CUdeviceptr base;
  CHECK(cuMemAddressReserve(&base, size, 0, 0, 0));
  CHECK(cuMemMap(base, size, 0, handle, 0));
  CUmemAccessDesc access;
  memset(&access, 0, sizeof access);
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = 0;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  CHECK(cuMemSetAccess(base, size, &access, 1));
  return base;
}

static int all_words(CUdeviceptr ptr, unsigned value) {
  unsigned* host = malloc(WORDS * sizeof(unsigned));
  CHECK(cuMemcpyDtoH(host, ptr, WORDS * sizeof(unsigned)));
  int ok = 1;
  for (unsigned i = 0; i < WORDS; ++i) ok &= host[i] == value;
  free(host);
  return ok;
}

static int owner(void) {
  setup();
  CUmemAllocationProp prop = prop_with(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  size_t gran = 0;
  CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CUmemGenericAllocationHandle handle;
  CHECK(cuMemCreate(&handle, gran, &prop, 0));
  CUdeviceptr base = map_accessible(handle, gran);
  CHECK(cuMemsetD32(base, 0x11111111u, WORDS));
  CHECK(cuCtxSynchronize());

  CUmemAllocationProp read_back;
  CHECK(cuMemGetAllocationPropertiesFromHandle(&read_back, handle));
  unsigned long long flags = 0;
  CUmemLocation here = prop.location;
  CHECK(cuMemGetAccess(&flags, &here, base));
  printf("props_read_back=%d access=%llu\n",
         read_back.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR &&
             read_back.location.id == 0 && read_back.type == CU_MEM_ALLOCATION_TYPE_PINNED,
         flags);
  CUmemGenericAllocationHandle retained;
  CHECK(cuMemRetainAllocationHandle(&retained, (void*)(uintptr_t)(base + 4096)));
  printf("retained_same=%d\n", retained == handle);
  CHECK(cuMemRelease(retained));

  CUmemAllocationProp plain = prop_with(CU_MEM_HANDLE_TYPE_NONE);
  CUmemGenericAllocationHandle unshareable;
  CHECK(cuMemCreate(&unshareable, gran, &plain, 0));
  int unused_fd = -1;
  printf("export_unshareable=%d\n",
         (int)cuMemExportToShareableHandle(&unused_fd, unshareable, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  CHECK(cuMemRelease(unshareable));

  int fd = -1;
  CHECK(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  printf("pid=%d\nfd=%d\n", (int)getpid(), fd);
  fflush(stdout);
  char line[64];
  if (!fgets(line, sizeof line, stdin)) return 1;
  printf("written_by_importer=%d\n", all_words(base, 0x22222222u));
  CHECK(cuMemUnmap(base, gran));
  CHECK(cuMemRelease(handle));
  CHECK(cuMemAddressFree(base, gran));
  close(fd);
  return 0;
}

static int importer(int pid, int owner_fd) {
  setup();
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", pid, owner_fd);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    perror(path);
    return 1;
  }
  int not_an_export = open("/dev/null", O_RDONLY | O_CLOEXEC);
  CUmemGenericAllocationHandle bogus;
  printf("import_not_an_export=%d\n", (int)cuMemImportFromShareableHandle(
                                          &bogus, (void*)(intptr_t)not_an_export, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  CUmemGenericAllocationHandle handle;
  CHECK(cuMemImportFromShareableHandle(&handle, (void*)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
  CUmemAllocationProp prop = prop_with(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  size_t gran = 0;
  CHECK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
  CUdeviceptr base = map_accessible(handle, gran);
  printf("read_owners=%d\n", all_words(base, 0x11111111u));
  CHECK(cuMemsetD32(base, 0x22222222u, WORDS));
  CHECK(cuCtxSynchronize());
  CHECK(cuMemUnmap(base, gran));
  CHECK(cuMemRelease(handle));
  CHECK(cuMemAddressFree(base, gran));
  close(fd);
  close(not_an_export);
  printf("imported_done=1\n");
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc > 1 && strcmp(argv[1], "owner") == 0) return owner();
  if (argc > 3 && strcmp(argv[1], "importer") == 0) return importer(atoi(argv[2]), atoi(argv[3]));
  fprintf(stderr, "usage: vmm_sharing owner | importer PID FD\n");
  return 2;
}
