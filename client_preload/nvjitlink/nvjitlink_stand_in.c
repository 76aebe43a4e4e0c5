/* libtally-nvjitlink.so.<version>: what tally's dlopen hands a job that opens nvJitLink
   (src/jit_capture/stand_ins.h). It depends on the real libnvJitLink (its soname, the
   only dependency this library records), so a name looked up in its handle that it
   does not define is nvJitLink's own; it defines the calls tally's JIT capture follows
   (src/jit_capture/nvjitlink_forwarders.h), under nvJitLink's plain names (what
   cuda-bindings looks up) and its versioned ones. C, so it brings no C++ runtime. */
#define _GNU_SOURCE
#include <dlfcn.h>

/* The next definition after this library in its own lookup order: its libnvJitLink's.
   Looked up at each call: a few microseconds beside a link. */
static void* tally_nvjitlink_next(const char* name) { return dlsym(RTLD_NEXT, name); }

#include "../src/jit_capture/nvjitlink_forwarders.h"

TALLY_NVJITLINK_FORWARDERS(, )
TALLY_NVJITLINK_VERSIONED_FORWARDERS(12)
TALLY_NVJITLINK_VERSIONED_FORWARDERS(13)
