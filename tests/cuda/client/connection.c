// Exercises the client's connection to tally-server.
// Usage: connection MODE [ARGS]
//   init                 cuInit; prints init=RC
//   devices              cuInit, then every device query answered from the snapshot
//   ping N               N synchronous round trips (tally_client_ping); prints ping=RC ok=COUNT
//   threads T N          T threads x N pings with distinct values, each checks its echo
//   notify N             N asynchronous requests, then one ping (which the server answers
//                        after handling them, the ring being in order)
//   fork                 cuInit, fork; the child's driver calls fail, the parent's work
//   ping-until-failure   pings every 10 ms until one fails (the test kills the server)
// cuDeviceComputeCapability is deprecated, and still exported and used.
#define CUDA_ENABLE_DEPRECATED 1
#include <cuda.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

// tally's own exports (client_preload/src/connection/diagnostics.cpp)
int tally_client_ping(uint64_t value, uint64_t* echoed);
int tally_client_notify(uint64_t value);

static int pings(uint64_t base, int n) {
  int ok = 0;
  for (int i = 0; i < n; ++i) {
    uint64_t echoed = 0;
    int rc = tally_client_ping(base + (uint64_t)i, &echoed);
    if (rc != 0) return -rc;
    if (echoed == base + (uint64_t)i) ++ok;
  }
  return ok;
}

struct ThreadArg {
  int index;
  int n;
  int ok;
};

static void* ping_thread(void* p) {
  struct ThreadArg* arg = (struct ThreadArg*)p;
  arg->ok = pings(((uint64_t)arg->index + 1) << 32, arg->n);
  return NULL;
}

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const char* mode = argv[1];
  if (strcmp(mode, "init") == 0) {
    printf("init=%d\n", (int)cuInit(0));
    printf("init_again=%d\n", (int)cuInit(0));
    int count = -1;
    int count_rc = (int)cuDeviceGetCount(&count);
    printf("count_rc=%d count=%d\n", count_rc, count);
    return 0;
  }
  if (strcmp(mode, "devices") == 0) {
    int count = -1;
    printf("before_init=%d\n", (int)cuDeviceGetCount(&count));
    printf("init=%d\n", (int)cuInit(0));
    cuDeviceGetCount(&count);
    printf("count=%d\n", count);
    CUdevice dev = -1;
    int get_rc = (int)cuDeviceGet(&dev, 0);
    printf("get_rc=%d dev=%d\n", get_rc, dev);
    printf("get_bad=%d\n", (int)cuDeviceGet(&dev, 1));
    char name[256];
    cuDeviceGetName(name, sizeof name, 0);
    printf("name=%s\n", name);
    char small[5];
    cuDeviceGetName(small, sizeof small, 0);
    printf("name5=%s\n", small);
    CUuuid uuid;
    cuDeviceGetUuid(&uuid, 0);
    printf("uuid=");
    for (int i = 0; i < 16; ++i) printf("%02x", (unsigned char)uuid.bytes[i]);
    printf("\n");
    size_t total = 0;
    cuDeviceTotalMem(&total, 0);
    printf("total=%zu\n", total);
    int major = 0, minor = 0;
    cuDeviceComputeCapability(&major, &minor, 0);
    printf("cc=%d.%d\n", major, minor);
    char bus_id[16];
    printf("pci_rc=%d\n", (int)cuDeviceGetPCIBusId(bus_id, sizeof bus_id, 0));
    printf("pci=%s\n", bus_id);
    CUdevice by_bus = -1;
    int by_bus_rc = (int)cuDeviceGetByPCIBusId(&by_bus, bus_id);
    printf("by_bus_rc=%d dev=%d\n", by_bus_rc, by_bus);
    for (int attr = 1; attr < CU_DEVICE_ATTRIBUTE_MAX; ++attr) {
      int value = 0;
      if (cuDeviceGetAttribute(&value, (CUdevice_attribute)attr, 0) == CUDA_SUCCESS)
        printf("attr=%d %d\n", attr, value);
    }
    int value = 0;
    printf("attr_bad=%d\n", (int)cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_MAX, 0));
    printf("attr_bad_dev=%d\n", (int)cuDeviceGetAttribute(&value, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 3));
    CUcontext ctx = NULL, current = NULL;
    printf("retain=%d\n", (int)cuDevicePrimaryCtxRetain(&ctx, 0));
    printf("set_current=%d\n", (int)cuCtxSetCurrent(ctx));
    cuCtxGetCurrent(&current);
    printf("current_is_primary=%d\n", current == ctx && ctx != NULL);
    CUdevice ctx_dev = -1;
    int ctx_device_rc = (int)cuCtxGetDevice(&ctx_dev);
    printf("ctx_device=%d dev=%d\n", ctx_device_rc, ctx_dev);
    printf("release=%d\n", (int)cuDevicePrimaryCtxRelease(0));
    printf("release_again=%d\n", (int)cuDevicePrimaryCtxRelease(0));
    return 0;
  }
  if (strcmp(mode, "ping") == 0) {
    int n = argc > 2 ? atoi(argv[2]) : 1;
    int ok = pings(1000, n);
    printf("ping=%d ok=%d\n", ok < 0 ? -ok : 0, ok < 0 ? 0 : ok);
    return 0;
  }
  if (strcmp(mode, "threads") == 0) {
    int threads = atoi(argv[2]), n = atoi(argv[3]);
    pthread_t ids[64];
    struct ThreadArg args[64];
    if (threads > 64) return 2;
    for (int i = 0; i < threads; ++i) {
      args[i] = (struct ThreadArg){i, n, 0};
      pthread_create(&ids[i], NULL, ping_thread, &args[i]);
    }
    int total = 0;
    for (int i = 0; i < threads; ++i) {
      pthread_join(ids[i], NULL);
      total += args[i].ok;
    }
    printf("threads_ok=%d\n", total);
    return 0;
  }
  if (strcmp(mode, "notify") == 0) {
    int n = atoi(argv[2]);
    int failed = 0;
    for (int i = 0; i < n; ++i) failed += tally_client_notify((uint64_t)i) != 0;
    printf("notify_failed=%d\n", failed);
    printf("ping_after=%d\n", pings(7, 1));
    return 0;
  }
  if (strcmp(mode, "fork") == 0) {
    printf("init=%d\n", (int)cuInit(0));
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
      uint64_t echoed = 0;
      int count = -1;
      printf("child_init=%d child_ping=%d child_count=%d\n", (int)cuInit(0), tally_client_ping(1, &echoed),
             (int)cuDeviceGetCount(&count));
      fflush(stdout);
      if (argc > 2) sleep((unsigned)atoi(argv[2]));  // outlive the parent
      _exit(0);
    }
    if (argc <= 2) waitpid(child, NULL, 0);
    printf("parent_ping=%d\n", pings(5, 3) == 3 ? 0 : 1);
    return 0;
  }
  if (strcmp(mode, "ping-until-failure") == 0) {
    printf("init=%d\n", (int)cuInit(0));
    fflush(stdout);
    for (int i = 0; i < 3000; ++i) {
      uint64_t echoed = 0;
      int rc = tally_client_ping((uint64_t)i, &echoed);
      if (rc != 0) {
        printf("failed=%d after=%d\n", rc, i);
        uint64_t again = 0;
        printf("again=%d\n", tally_client_ping(1, &again));
        int count = -1;
        printf("count_after=%d\n", (int)cuDeviceGetCount(&count));
        return 0;
      }
      if (i == 0) {
        printf("first_ping_ok\n");
        fflush(stdout);
      }
      usleep(10000);
    }
    printf("never_failed\n");
    return 0;
  }
  return 2;
}
