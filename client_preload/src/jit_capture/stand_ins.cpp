#include "jit_capture/stand_ins.h"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <cstring>

#include "entry_points/dlopen_hook.h"
#include "jit_capture/jit_records.h"
#include "logging/trace.h"

namespace tally::client {
namespace {

// The sonames CMakeLists.txt builds a stand-in for (the same lists): NVRTC of CUDA 11.2
// to 11.8, 12.x, 13.x; nvJitLink since CUDA 12.0.
constexpr const char* kNvrtcVersions[] = {"13", "12", "11.2", nullptr};
constexpr const char* kNvJitLinkVersions[] = {"13", "12", nullptr};
constexpr StandIn kStandIns[] = {
    {"libnvrtc.so", kNvrtcVersions, "libtally-nvrtc.so."},
    {"libnvJitLink.so", kNvJitLinkVersions, "libtally-nvjitlink.so."},
};

}  // namespace

bool basename_is(const char* path, const char* stem) {
  const char* slash = std::strrchr(path, '/');
  const char* base = slash != nullptr ? slash + 1 : path;
  const size_t n = std::strlen(stem);
  return std::strncmp(base, stem, n) == 0 && (base[n] == '\0' || base[n] == '.');
}

std::string loaded_library(const char* stem, const char* symbol) {
  Dl_info info{};
  void* next = dlsym(RTLD_NEXT, symbol);
  if (next != nullptr && dladdr(next, &info) != 0 && info.dli_fname != nullptr && basename_is(info.dli_fname, stem))
    return info.dli_fname;
  struct Search {
    const char* stem;
    std::string path;
  } search{stem, ""};
  dl_iterate_phdr(
      [](dl_phdr_info* object, size_t, void* out) -> int {
        auto* s = static_cast<Search*>(out);
        if (object->dlpi_name == nullptr || !basename_is(object->dlpi_name, s->stem)) return 0;
        s->path = object->dlpi_name;
        return 1;
      },
      &search);
  return search.path;
}

void* symbol_in(const std::string& path, const char* name) {
  const DlopenFn open = system_dlopen();
  void* library = open != nullptr && !path.empty() ? open(path.c_str(), RTLD_LAZY | RTLD_NOLOAD) : nullptr;
  if (library == nullptr) return nullptr;
  void* symbol = dlsym(library, name);
  dlclose(library);  // NOLOAD took a reference; the library stays loaded by whoever loaded it
  return symbol;
}

const StandIn* stand_in_library(const char* filename) {
  if (filename == nullptr) return nullptr;
  for (const StandIn& library : kStandIns)
    if (basename_is(filename, library.stem)) return &library;
  return nullptr;
}

std::string stand_in_path(const StandIn& library, void* handle) {
  const DlopenFn open = system_dlopen();
  if (open == nullptr || !jit_capture_on()) return "";
  const char* self = own_path();
  if (self == nullptr) return "";
  std::string folder = self;
  folder.resize(folder.rfind('/') + 1);
  for (const char* const* version = library.sonames; *version != nullptr; ++version) {
    // The version is the soname's: a handle opened by soname is the same handle
    // when the library is the one already loaded.
    const std::string soname = std::string(library.stem) + "." + *version;
    void* same = open(soname.c_str(), RTLD_LAZY | RTLD_NOLOAD);
    if (same == nullptr) continue;
    dlclose(same);
    if (same != handle) continue;
    const std::string stand_in = folder + library.stand_in_stem + *version;
    if (::access(stand_in.c_str(), R_OK) == 0) return stand_in;
    trace_line("jit capture: no %s beside %s; %s's results go unrecorded", stand_in.c_str(), self, library.stem);
    return "";
  }
  trace_line("jit capture: a %s tally has no stand-in for (its soname is none of those tally knows)", library.stem);
  return "";
}

}  // namespace tally::client
