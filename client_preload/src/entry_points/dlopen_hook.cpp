// dlopen, as seen by a job that LD_PRELOADs this library (tally-run does): opening
// the real driver (basename libcuda.so, libcuda.so.1 or libcuda.so.<version>, with
// or without a directory) yields this library instead, so a framework that
// dlopens /usr/lib/x86_64-linux-gnu/libcuda.so.1 by absolute path still lands on
// tally. Everything else goes to the next dlopen (libc's).
#include <dlfcn.h>

#include <atomic>
#include <cstring>

#include "logging/log.h"

namespace tally::client {
namespace {

using DlopenFn = void* (*)(const char*, int);

DlopenFn next_dlopen() {
  static std::atomic<DlopenFn> next{nullptr};
  DlopenFn fn = next.load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = reinterpret_cast<DlopenFn>(dlsym(RTLD_NEXT, "dlopen"));
    next.store(fn, std::memory_order_release);
  }
  return fn;
}

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

// The file this code was loaded from.
const char* own_path() {
  static const char* path = [] {
    Dl_info info{};
    return dladdr(reinterpret_cast<void*>(&names_the_driver), &info) != 0 ? info.dli_fname : nullptr;
  }();
  return path;
}

}  // namespace
}  // namespace tally::client

extern "C" __attribute__((visibility("default"))) void* dlopen(const char* filename, int flags) {
  using namespace tally::client;
  DlopenFn next = next_dlopen();
  if (next == nullptr) {
    log_error("cannot find the system dlopen behind tally's; dlopen(%s) fails", filename ? filename : "NULL");
    return nullptr;
  }
  if (filename != nullptr && names_the_driver(filename)) {
    const char* self = own_path();
    if (self != nullptr && std::strcmp(self, filename) != 0) return next(self, flags);
  }
  return next(filename, flags);
}
