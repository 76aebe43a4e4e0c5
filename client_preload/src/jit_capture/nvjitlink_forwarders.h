/* nvJitLink's functions whose calls tally's JIT capture sees (nvjitlink_capture.h),
   each passing the call on to the real nvJitLink and telling the client. C and C++
   alike: tally's stand-in in front of a dlopened libnvJitLink
   (client_preload/nvjitlink/nvjitlink_stand_in.c) defines them with nvJitLink's plain
   names and versioned ones; the client (nvjitlink_exports.cpp) defines the versioned
   ones, which programs linked against libnvJitLink call (nvJitLink.h's inline
   functions call __nvJitLink<Function>_<major>_<minor>).

   The includer defines tally_nvjitlink_next(name): the real nvJitLink's function of
   that name. The client's hooks (tally_client_nvjitlink_*) are looked up at each call,
   so the stand-in passes calls on unchanged in a process without tally's client. */
#ifndef TALLY_NVJITLINK_FORWARDERS_H
#define TALLY_NVJITLINK_FORWARDERS_H

#include <dlfcn.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#define TALLY_NVJITLINK_LINKAGE extern "C" __attribute__((visibility("default")))
#else
#define TALLY_NVJITLINK_LINKAGE __attribute__((visibility("default")))
#endif

typedef int (*TallyNvJitLinkCreateFn)(void**, uint32_t, const char**);
typedef int (*TallyNvJitLinkAddDataFn)(void*, int, const void*, size_t, const char*);
typedef int (*TallyNvJitLinkAddFileFn)(void*, int, const char*);
typedef int (*TallyNvJitLinkGetCubinFn)(void*, void*);
typedef int (*TallyNvJitLinkDestroyFn)(void**);
typedef void* (*TallyNvJitLinkLookupFn)(const char*);

/* The client's hooks (nvjitlink_capture.cpp). */
typedef void (*TallyNvJitLinkCreatedHook)(void*, uint32_t, const char**);
typedef void (*TallyNvJitLinkInputHook)(void*, int, const void*, size_t, const char*);
typedef void (*TallyNvJitLinkCubinHook)(void*, const void*, TallyNvJitLinkLookupFn, const char*, const char*);
typedef void (*TallyNvJitLinkDestroyedHook)(void*);

enum { kTallyNvJitLinkInternalError = 6 }; /* NVJITLINK_ERROR_INTERNAL */

#define TALLY_NVJITLINK_STR2(x) #x
#define TALLY_NVJITLINK_STR(x) TALLY_NVJITLINK_STR2(x)
#define TALLY_NVJITLINK_HOOK(type, name) ((type)dlsym(RTLD_DEFAULT, name))

/* nvJitLink's five calls that matter, named PREFIX nvJitLink<Function> SUFFIX: "" and ""
   for the plain names, __ and _13_0 for version 13.0's. Each returns the real call's
   result; the client hears of a call only when it succeeded. */
#define TALLY_NVJITLINK_FORWARDERS(PREFIX, SUFFIX)                                                              \
  TALLY_NVJITLINK_LINKAGE int PREFIX##nvJitLinkCreate##SUFFIX(void** handle, uint32_t count, const char** options) { \
    TallyNvJitLinkCreateFn real =                                                                               \
        (TallyNvJitLinkCreateFn)tally_nvjitlink_next(TALLY_NVJITLINK_STR(PREFIX##nvJitLinkCreate##SUFFIX));     \
    if (real == NULL) return kTallyNvJitLinkInternalError;                                                      \
    int rc = real(handle, count, options);                                                                      \
    TallyNvJitLinkCreatedHook hook =                                                                            \
        TALLY_NVJITLINK_HOOK(TallyNvJitLinkCreatedHook, "tally_client_nvjitlink_created");                      \
    if (rc == 0 && handle != NULL && hook != NULL) hook(*handle, count, options);                               \
    return rc;                                                                                                  \
  }                                                                                                             \
  TALLY_NVJITLINK_LINKAGE int PREFIX##nvJitLinkAddData##SUFFIX(void* handle, int type, const void* data,          \
                                                               size_t size, const char* name) {                 \
    TallyNvJitLinkAddDataFn real =                                                                              \
        (TallyNvJitLinkAddDataFn)tally_nvjitlink_next(TALLY_NVJITLINK_STR(PREFIX##nvJitLinkAddData##SUFFIX));   \
    if (real == NULL) return kTallyNvJitLinkInternalError;                                                      \
    int rc = real(handle, type, data, size, name);                                                              \
    TallyNvJitLinkInputHook hook = TALLY_NVJITLINK_HOOK(TallyNvJitLinkInputHook, "tally_client_nvjitlink_input"); \
    if (rc == 0 && hook != NULL) hook(handle, type, data, size, name);                                          \
    return rc;                                                                                                  \
  }                                                                                                             \
  TALLY_NVJITLINK_LINKAGE int PREFIX##nvJitLinkAddFile##SUFFIX(void* handle, int type, const char* path) {        \
    TallyNvJitLinkAddFileFn real =                                                                              \
        (TallyNvJitLinkAddFileFn)tally_nvjitlink_next(TALLY_NVJITLINK_STR(PREFIX##nvJitLinkAddFile##SUFFIX));   \
    if (real == NULL) return kTallyNvJitLinkInternalError;                                                      \
    int rc = real(handle, type, path);                                                                          \
    /* a file is an input without bytes: the client reads it */                                                 \
    TallyNvJitLinkInputHook hook = TALLY_NVJITLINK_HOOK(TallyNvJitLinkInputHook, "tally_client_nvjitlink_input"); \
    if (rc == 0 && hook != NULL) hook(handle, type, NULL, 0, path);                                             \
    return rc;                                                                                                  \
  }                                                                                                             \
  TALLY_NVJITLINK_LINKAGE int PREFIX##nvJitLinkGetLinkedCubin##SUFFIX(void* handle, void* cubin) {              \
    TallyNvJitLinkGetCubinFn real = (TallyNvJitLinkGetCubinFn)tally_nvjitlink_next(                             \
        TALLY_NVJITLINK_STR(PREFIX##nvJitLinkGetLinkedCubin##SUFFIX));                                          \
    if (real == NULL) return kTallyNvJitLinkInternalError;                                                      \
    int rc = real(handle, cubin);                                                                               \
    TallyNvJitLinkCubinHook hook = TALLY_NVJITLINK_HOOK(TallyNvJitLinkCubinHook, "tally_client_nvjitlink_cubin"); \
    if (rc == 0 && cubin != NULL && hook != NULL)                                                               \
      hook(handle, cubin, tally_nvjitlink_next, TALLY_NVJITLINK_STR(PREFIX), TALLY_NVJITLINK_STR(SUFFIX));      \
    return rc;                                                                                                  \
  }                                                                                                             \
  TALLY_NVJITLINK_LINKAGE int PREFIX##nvJitLinkDestroy##SUFFIX(void** handle) {                                 \
    TallyNvJitLinkDestroyFn real =                                                                              \
        (TallyNvJitLinkDestroyFn)tally_nvjitlink_next(TALLY_NVJITLINK_STR(PREFIX##nvJitLinkDestroy##SUFFIX));   \
    if (real == NULL) return kTallyNvJitLinkInternalError;                                                      \
    void* was = handle != NULL ? *handle : NULL;                                                                \
    int rc = real(handle);                                                                                      \
    TallyNvJitLinkDestroyedHook hook =                                                                          \
        TALLY_NVJITLINK_HOOK(TallyNvJitLinkDestroyedHook, "tally_client_nvjitlink_destroyed");                  \
    if (rc == 0 && was != NULL && hook != NULL) hook(was);                                                      \
    return rc;                                                                                                  \
  }

/* The versioned names of nvJitLink 12.0 to 13.9 (12.x's library defines _12_0 up to its
   own minor version, 13.x's _13_0 up to its own; a name the real library lacks fails
   with NVJITLINK_ERROR_INTERNAL, and only a program built against a newer nvJitLink
   than the one it runs with asks for one). */
#define TALLY_NVJITLINK_VERSIONED_FORWARDERS(MAJOR)                                                             \
  TALLY_NVJITLINK_FORWARDERS(__, _##MAJOR##_0)                                                                  \
  TALLY_NVJITLINK_FORWARDERS(__, _##MAJOR##_1)                                                                  \
  TALLY_NVJITLINK_FORWARDERS(__, _##MAJOR##_2)                                                                  \
  TALLY_NVJITLINK_FORWARDERS(__, _##MAJOR##_3)                                                                  \
  TALLY_NVJITLINK_FORWARDERS(__, _##MAJOR##_4)                                                                  \
  TALLY_NVJITLINK_FORWARDERS(__, _##MAJOR##_5)                                                                  \
  TALLY_NVJITLINK_FORWARDERS(__, _##MAJOR##_6)                                                                  \
  TALLY_NVJITLINK_FORWARDERS(__, _##MAJOR##_7)                                                                  \
  TALLY_NVJITLINK_FORWARDERS(__, _##MAJOR##_8)                                                                  \
  TALLY_NVJITLINK_FORWARDERS(__, _##MAJOR##_9)

#endif /* TALLY_NVJITLINK_FORWARDERS_H */
