// The NVIDIA device files, as a job under tally-run sees them on a machine that has
// none (tally's emulator on a CPU-only node). Some frameworks look for them before
// they ever call the driver: JAX tries its CUDA backend only when /dev/nvidia0,
// /dev/nvidiactl or /dev/dxg exists (jax/_src/hardware_utils.py), even when the job
// asks for CUDA, so under tally on the emulator it silently ran on the CPU. tally's
// libcuda is the driver such a job talks to, so stat() and access() report
// /dev/nvidiactl and /dev/nvidia0 (tally shows one device) as the character devices
// the real driver makes (major 195), but only where the real call finds nothing: on
// a GPU machine the files are the driver's own. Opening them still fails; nothing
// under tally uses them.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace {

constexpr unsigned kNvidiaMajor = 195;   // what the driver registers its devices under

// The minor number of a device file tally stands in for, or -1.
int stand_in_minor(const char* path) {
  if (path == nullptr) return -1;
  if (std::strcmp(path, "/dev/nvidiactl") == 0) return 255;
  if (std::strcmp(path, "/dev/nvidia0") == 0) return 0;
  return -1;
}

void describe(struct stat* st, int minor) {
  std::memset(st, 0, sizeof *st);
  st->st_mode = S_IFCHR | 0666;
  st->st_nlink = 1;
  st->st_rdev = makedev(kNvidiaMajor, static_cast<unsigned>(minor));
  st->st_blksize = 4096;
}

template <class Fn>
Fn next(const char* name, std::atomic<Fn>* cache) {
  Fn fn = cache->load(std::memory_order_acquire);
  if (fn == nullptr) {
    fn = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
    cache->store(fn, std::memory_order_release);
  }
  return fn;
}

using StatFn = int (*)(const char*, struct stat*);

// The system's stat (glibc 2.33 and newer export it; older ones only __xstat, which
// their callers use instead, so this is then only a fallback).
int system_stat(const char* name, const char* path, struct stat* st) {
  static std::atomic<StatFn> by_stat{nullptr}, by_stat64{nullptr};
  StatFn fn = next<StatFn>(name, std::strcmp(name, "stat") == 0 ? &by_stat : &by_stat64);
  if (fn != nullptr) return fn(path, st);
  return static_cast<int>(syscall(SYS_newfstatat, AT_FDCWD, path, st, 0));
}

int stat_or_stand_in(const char* name, const char* path, struct stat* st) {
  const int rc = system_stat(name, path, st);
  if (rc == 0 || errno != ENOENT) return rc;
  const int minor = stand_in_minor(path);
  if (minor < 0) return rc;
  describe(st, minor);
  return 0;
}

}  // namespace

// On x86-64 struct stat and struct stat64 are the same.
static_assert(sizeof(struct stat) == sizeof(struct stat64), "stat and stat64 differ on this platform");

extern "C" __attribute__((visibility("default"))) int stat(const char* path, struct stat* st) {
  return stat_or_stand_in("stat", path, st);
}

extern "C" __attribute__((visibility("default"))) int stat64(const char* path, struct stat64* st) {
  return stat_or_stand_in("stat64", path, reinterpret_cast<struct stat*>(st));
}

extern "C" __attribute__((visibility("default"))) int access(const char* path, int mode) {
  using AccessFn = int (*)(const char*, int);
  static std::atomic<AccessFn> cache{nullptr};
  AccessFn fn = next<AccessFn>("access", &cache);
  const int rc = fn != nullptr ? fn(path, mode) : static_cast<int>(syscall(SYS_access, path, mode));
  if (rc == 0 || errno != ENOENT || stand_in_minor(path) < 0) return rc;
  return (mode & X_OK) != 0 ? (errno = EACCES, -1) : 0;
}
