// Calls the integrity-check table's slot 1 the way cudart does and prints what the
// hash is computed from, so the test can recompute it independently.
// Usage: integrity (init|noinit) UNIX_SECONDS VERSION [VERSION ...]
#include <cuda.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef CUresult (*IntegrityCheckFn)(uint32_t version, uint64_t unix_seconds, uint64_t result[2]);

static const CUuuid kRuntimeInterface = {{0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87, 0xd9, 0x39,
                                          0x12, 0xfd, 0x9d, 0xf9}};
static const CUuuid kIntegrityCheck = {{0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba, 0x12,
                                        0x3c, 0x66, 0xe1, 0xf2}};

int main(int argc, char** argv) {
  if (argc < 4) return 2;
  if (strcmp(argv[1], "init") == 0) printf("init=%d\n", (int)cuInit(0));
  const void* runtime_interface = NULL;
  const void* integrity = NULL;
  if (cuGetExportTable(&runtime_interface, &kRuntimeInterface) != CUDA_SUCCESS ||
      cuGetExportTable(&integrity, &kIntegrityCheck) != CUDA_SUCCESS) {
    printf("export tables missing\n");
    return 1;
  }
  const void* const* table = (const void* const*)integrity;
  IntegrityCheckFn check = (IntegrityCheckFn)table[1];
  int driver_version = 0;
  cuDriverGetVersion(&driver_version);
  printf("driver_version=%d\n", driver_version);
  printf("table_size=%" PRIuPTR "\n", (uintptr_t)table[0]);
  printf("pid=%u\n", (unsigned)getpid());
  printf("thread=%u\n", (unsigned)(uint32_t)pthread_self());
  printf("runtime_interface=%" PRIu64 "\n", (uint64_t)(uintptr_t)runtime_interface);
  printf("integrity_table=%" PRIu64 "\n", (uint64_t)(uintptr_t)integrity);
  printf("check_fn=%" PRIu64 "\n", (uint64_t)(uintptr_t)table[1]);
  int count = 0;
  if (cuDeviceGetCount(&count) != CUDA_SUCCESS) count = 0;
  printf("devices=%d\n", count);
  for (int dev = 0; dev < count; ++dev) {
    CUuuid uuid;
    int domain = -1, bus = -1, device = -1;
    cuDeviceGetUuid(&uuid, dev);
    cuDeviceGetAttribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev);
    cuDeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev);
    cuDeviceGetAttribute(&device, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev);
    printf("device=");
    for (int i = 0; i < 16; ++i) printf("%02x", (unsigned char)uuid.bytes[i]);
    printf(" %d %d %d\n", domain, bus, device);
  }
  uint64_t seconds = strtoull(argv[2], NULL, 10);
  for (int i = 3; i < argc; ++i) {
    uint32_t version = (uint32_t)strtoul(argv[i], NULL, 10);
    uint64_t result[2] = {0, 0};
    CUresult rc = check(version, seconds, result);
    printf("check=%u %d %016" PRIx64 " %016" PRIx64 "\n", version, (int)rc, result[0], result[1]);
  }
  return 0;
}
