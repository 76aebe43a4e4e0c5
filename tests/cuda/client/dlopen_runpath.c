// dlopen_runpath OUTER NAME SYMBOL...: opens OUTER (runpath_outer.c) by path, has it
// dlopen NAME by bare name, and for each SYMBOL looked up in the handle it got, prints
// "<symbol>=<the file it lives in>" ("null" when it is not there). Prints opened=set,
// or opened=null with dlerror's words.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char** argv) {
  if (argc < 3) return 2;
  void* outer = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  void* (*outer_open)(const char*) = outer != NULL ? (void* (*)(const char*))dlsym(outer, "outer_open") : NULL;
  if (outer_open == NULL) {
    printf("error cannot use %s: %s\n", argv[1], dlerror());
    return 1;
  }
  void* lib = outer_open(argv[2]);
  if (lib == NULL) {
    printf("opened=null %s\n", dlerror());
    return 0;
  }
  printf("opened=set\n");
  for (int i = 3; i < argc; ++i) {
    void* symbol = dlsym(lib, argv[i]);
    Dl_info info;
    printf("%s=%s\n", argv[i], symbol != NULL && dladdr(symbol, &info) != 0 ? info.dli_fname : "null");
  }
  return 0;
}
