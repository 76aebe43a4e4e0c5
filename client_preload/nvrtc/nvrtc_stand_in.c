/* libtally-nvrtc.so.<version>: what tally's dlopen hands a job that opens NVRTC
   (src/jit_capture/nvrtc_capture.h). It depends on the real libnvrtc (its soname,
   the only dependency this library records), so a name looked up in its handle that
   it does not define is NVRTC's own; it defines only nvrtcGetCUBIN, which passes the
   call on and has the client record the cubin's PTX. C, so it brings no C++ runtime. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

typedef int (*GetBytesFn)(void*, char*);
typedef void (*RecordFn)(void*, const char*, void*, void*, void*);
enum { kNvrtcInternalError = 11 }; /* NVRTC_ERROR_INTERNAL_ERROR */

/* The next definition after this library in its own lookup order: its libnvrtc's.
   Looked up at each call: a few microseconds beside a compile. */
static void* nvrtc(const char* name) { return dlsym(RTLD_NEXT, name); }

__attribute__((visibility("default"))) int nvrtcGetCUBIN(void* program, char* cubin) {
  GetBytesFn real = (GetBytesFn)nvrtc("nvrtcGetCUBIN");
  if (real == NULL) return kNvrtcInternalError;
  int rc = real(program, cubin);
  /* the client (preloaded by tally-run) records; without it, the call is only passed on */
  RecordFn record = (RecordFn)dlsym(RTLD_DEFAULT, "tally_client_record_nvrtc_cubin");
  if (rc == 0 && cubin != NULL && record != NULL)
    record(program, cubin, nvrtc("nvrtcGetCUBINSize"), nvrtc("nvrtcGetPTXSize"), nvrtc("nvrtcGetPTX"));
  return rc;
}
