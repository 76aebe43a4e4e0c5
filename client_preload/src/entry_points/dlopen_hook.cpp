// dlopen, as seen by a job that LD_PRELOADs this library (tally-run does): opening
// the real driver (basename libcuda.so, libcuda.so.1 or libcuda.so.<version>, with
// or without a directory) yields this library instead, so a framework that
// dlopens /usr/lib/x86_64-linux-gnu/libcuda.so.1 by absolute path still lands on
// tally. Opening a JIT compiler's library (NVRTC, nvJitLink) with JIT capture on
// yields tally's stand-in in front of it (jit_capture/stand_ins.h). Everything else
// goes to the next dlopen (libc's).
#include "entry_points/dlopen_hook.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "jit_capture/jit_records.h"
#include "jit_capture/stand_ins.h"
#include "logging/log.h"
#include "logging/trace.h"

namespace tally::client {

DlopenFn system_dlopen() {
  static std::atomic<DlopenFn> next{nullptr};
  DlopenFn fn = next.load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = reinterpret_cast<DlopenFn>(dlsym(RTLD_NEXT, "dlopen"));
    next.store(fn, std::memory_order_release);
  }
  return fn;
}

namespace {

bool names_the_driver(const char* filename) {
  const char* slash = std::strrchr(filename, '/');
  const char* base = slash != nullptr ? slash + 1 : filename;
  constexpr char kStem[] = "libcuda.so";
  if (std::strncmp(base, kStem, sizeof kStem - 1) != 0) return false;
  const char* rest = base + sizeof kStem - 1;
  if (*rest == '\0') return true;
  if (*rest != '.') return false;
  for (const char* p = rest + 1; *p != '\0'; ++p)
    if ((*p < '0' || *p > '9') && *p != '.') return false;
  return rest[1] != '\0';
}

// The directories glibc searches for a bare name dlopened by the object that holds
// `address`, in order (its RPATH, LD_LIBRARY_PATH, its RUNPATH, the system's).
std::vector<std::string> search_path_of(const void* address) {
  Dl_info info{};
  void* object = nullptr;  // glibc's handles are link maps
  Dl_serinfo size{};
  if (dladdr1(address, &info, &object, RTLD_DL_LINKMAP) == 0 || object == nullptr ||
      dlinfo(object, RTLD_DI_SERINFOSIZE, &size) != 0)
    return {};
  std::vector<char> buffer(size.dls_size);
  auto* paths = reinterpret_cast<Dl_serinfo*>(buffer.data());
  paths->dls_size = size.dls_size;
  paths->dls_cnt = size.dls_cnt;
  if (dlinfo(object, RTLD_DI_SERINFO, paths) != 0) return {};
  std::vector<std::string> out;
  for (unsigned i = 0; i < paths->dls_cnt; ++i) out.emplace_back(paths->dls_serpath[i].dls_name);
  return out;
}

// libc's dlopen of `filename` as `caller` would have made it, for the calls the hook
// makes itself (the others are tail calls). A bare name is looked for in the caller's
// search path up to the last directory that is the caller's own (its RPATH or
// RUNPATH: those not in this library's path, which has neither), so the order of
// RPATH, LD_LIBRARY_PATH and RUNPATH is glibc's; then as anyone's (ld.so.cache).
void* open_as(DlopenFn next, const char* filename, int flags, const void* caller) {
  if (std::strchr(filename, '/') != nullptr) return next(filename, flags);
  if (void* loaded = next(filename, flags | RTLD_NOLOAD)) return loaded;
  if ((flags & RTLD_NOLOAD) != 0) return nullptr;  // dlerror() says so, as it would have
  dlerror();  // the probe's miss is not the job's error
  const std::vector<std::string> theirs = search_path_of(caller);
  const std::vector<std::string> ours = search_path_of(reinterpret_cast<const void*>(&search_path_of));
  size_t own_end = 0;
  for (size_t i = 0; i < theirs.size(); ++i)
    if (std::find(ours.begin(), ours.end(), theirs[i]) == ours.end()) own_end = i + 1;
  for (size_t i = 0; i < own_end; ++i) {
    const std::string path = theirs[i] + "/" + filename;
    if (::access(path.c_str(), F_OK) == 0) return next(path.c_str(), flags);
  }
  return next(filename, flags);
}

// The real library opened as the job asked, for when no stand-in goes in front of it:
// `local` (opened without RTLD_GLOBAL) made global if the job asked for that.
void* as_asked(DlopenFn next, void* local, int flags) {
  if ((flags & RTLD_GLOBAL) == 0) return local;
  link_map* map = nullptr;
  if (dlinfo(local, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr || map->l_name == nullptr) return local;
  void* global = next(map->l_name, flags | RTLD_NOLOAD);  // RTLD_NOLOAD | RTLD_GLOBAL: made global
  if (global == nullptr) return local;
  dlclose(local);
  return global;
}

// A JIT compiler's library opened with JIT capture on: the real one, found as the caller
// would have, with tally's stand-in in front of it (jit_capture/stand_ins.h) when there is one.
__attribute__((noinline)) void* open_with_stand_in(const StandIn& library, DlopenFn next, const char* filename,
                                                   int flags, const void* caller) {
  // Opened local first: a job that asks for RTLD_GLOBAL (cuda-pathfinder does) and looks
  // names up with RTLD_DEFAULT (cuda-bindings does, before its handle) must find the
  // stand-in's definitions first, so the stand-in joins the global scope before the real
  // library, as its dependency, when it is opened below.
  void* real = open_as(next, filename, flags & ~RTLD_GLOBAL, caller);
  if (real == nullptr) return nullptr;  // dlerror() says why, as it would have
  const std::string stand_in = stand_in_path(library, real);
  dlerror();  // the misses of the probes (RTLD_NOLOAD) are not the job's: its dlopen succeeds
  if (stand_in.empty()) return as_asked(next, real, flags);
  // RTLD_NOLOAD asked whether the library is loaded: it is, so its stand-in is the answer
  void* wrapped = next(stand_in.c_str(), flags & ~RTLD_NOLOAD);
  if (wrapped == nullptr) {
    trace_line("jit capture: %s did not load (%s); %s is used as is", stand_in.c_str(), dlerror(), filename);
    return as_asked(next, real, flags);
  }
  dlclose(real);  // the stand-in depends on it: it stays as long as the job's handle
  Dl_info from{};
  trace_line("jit capture: dlopen(%s) from %s -> %s", filename,
             dladdr(caller, &from) != 0 && from.dli_fname != nullptr ? from.dli_fname : "?", stand_in.c_str());
  return wrapped;
}

}  // namespace

const char* own_path() {
  static const char* path = [] {
    Dl_info info{};
    return dladdr(reinterpret_cast<void*>(&names_the_driver), &info) != 0 ? info.dli_fname : nullptr;
  }();
  return path;
}

}  // namespace tally::client

extern "C" __attribute__((visibility("default"))) void* dlopen(const char* filename, int flags) {
  using namespace tally::client;
  DlopenFn next = system_dlopen();
  if (next == nullptr) {
    log_error("cannot find the system dlopen behind tally's; dlopen(%s) fails", filename ? filename : "NULL");
    return nullptr;
  }
  if (filename != nullptr && names_the_driver(filename)) {
    const char* self = own_path();
    if (self != nullptr && std::strcmp(self, filename) != 0) return next(self, flags);
  }
  if (const StandIn* library = stand_in_library(filename); library != nullptr && jit_capture_on())
    return open_with_stand_in(*library, next, filename, flags, __builtin_return_address(0));
#ifdef __OPTIMIZE__
  // A tail call (GCC makes it one from -O1 on; tests/test_client_dlopen.py checks what
  // depends on it): libc's dlopen then sees the job's return address, not ours, and
  // searches the RUNPATH of the library that called, as it would without tally.
  return next(filename, flags);
#else
  // Unoptimized builds make no tail call: search as the caller would, as the hook's own opens do.
  return filename != nullptr ? open_as(next, filename, flags, __builtin_return_address(0)) : next(filename, flags);
#endif
}
