// Opens the real driver by absolute path, as some frameworks do, and calls it
// through dlsym. Under tally-run the dlopen hook hands back tally's library.
// Usage: dlopen_driver PATH
#include <dlfcn.h>
#include <stdio.h>

typedef int (*DriverGetVersion)(int*);
typedef const char* (*ClientVersion)(void);
typedef double (*Cos)(double);

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  void* driver = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  printf("driver_handle=%s\n", driver ? "set" : dlerror());
  if (driver != NULL) {
    DriverGetVersion get_version = (DriverGetVersion)dlsym(driver, "cuDriverGetVersion");
    int version = 0;
    int rc = get_version ? get_version(&version) : -1;
    printf("get_version_rc=%d version=%d\n", rc, version);
    ClientVersion tally = (ClientVersion)dlsym(driver, "tally_client_version");
    printf("tally=%s\n", tally ? tally() : "absent");
  }
  // Everything else still goes to the system's dlopen.
  void* libm = dlopen("libm.so.6", RTLD_NOW);
  Cos cosine = libm ? (Cos)dlsym(libm, "cos") : NULL;
  printf("libm_cos0=%g\n", cosine ? cosine(0.0) : -1.0);
  printf("missing=%s\n", dlopen("/nonexistent/libfoo.so", RTLD_NOW) ? "opened" : "null");
  return 0;
}
