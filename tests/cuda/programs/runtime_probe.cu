// Loads the CUDA runtime library named on the command line (any 12.x or 13.x
// release: its C API is stable) and makes the calls every program's first ones
// are, printing what each returned. Host code only, built with -cudart none, so
// the runtime under test is the only one in the process.
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

typedef int (*GetInt)(int*);
typedef int (*Malloc)(void**, size_t);
typedef int (*Memset)(void*, int, size_t);
typedef int (*Memcpy)(void*, const void*, size_t, int);
typedef int (*Free)(void*);
typedef int (*Sync)();
typedef int (*GetLimit)(size_t*, int);
typedef const char* (*ErrorString)(int);

template <class F>
F need(void* lib, const char* name) {
  F f = reinterpret_cast<F>(dlsym(lib, name));
  if (f == nullptr) {
    std::printf("missing %s\n", name);
    std::exit(3);
  }
  return f;
}

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::printf("dlopen failed: %s\n", dlerror());
    return 2;
  }
  auto error_string = need<ErrorString>(lib, "cudaGetErrorString");
  int runtime = 0, driver = 0, devices = 0;
  int rc = need<GetInt>(lib, "cudaRuntimeGetVersion")(&runtime);
  std::printf("runtime %d rc=%d\n", runtime, rc);
  rc = need<GetInt>(lib, "cudaDriverGetVersion")(&driver);
  std::printf("driver %d rc=%d\n", driver, rc);
  rc = need<GetInt>(lib, "cudaGetDeviceCount")(&devices);
  std::printf("devices %d rc=%d %s\n", devices, rc, error_string(rc));
  void* d = nullptr;
  rc = need<Malloc>(lib, "cudaMalloc")(&d, 4096);
  std::printf("malloc rc=%d %s\n", rc, error_string(rc));
  if (rc != 0) return 1;
  rc = need<Memset>(lib, "cudaMemset")(d, 0x5a, 4096);
  unsigned char host[4096];
  std::memset(host, 0, sizeof host);
  int copy = need<Memcpy>(lib, "cudaMemcpy")(host, d, sizeof host, 2 /* device to host */);
  int sync = need<Sync>(lib, "cudaDeviceSynchronize")();
  int freed = need<Free>(lib, "cudaFree")(d);
  int bad = 0;
  for (unsigned char b : host) bad += b != 0x5a;
  std::printf("memset rc=%d copy rc=%d sync rc=%d free rc=%d bad=%d\n", rc, copy, sync, freed, bad);
  int worker_malloc = -1, worker_limit = -1, worker_sync = -1;
  std::thread worker([&] {
    void* w = nullptr;
    worker_malloc = need<Malloc>(lib, "cudaMalloc")(&w, 256);
    size_t stack = 0;
    worker_limit = need<GetLimit>(lib, "cudaDeviceGetLimit")(&stack, 0 /* cudaLimitStackSize */);
    worker_sync = need<Sync>(lib, "cudaDeviceSynchronize")();
    need<Free>(lib, "cudaFree")(w);
  });
  worker.join();
  std::printf("worker thread malloc rc=%d limit rc=%d sync rc=%d\n", worker_malloc, worker_limit, worker_sync);
  return (rc || copy || sync || freed || bad || worker_malloc || worker_limit || worker_sync) ? 1 : 0;
}
