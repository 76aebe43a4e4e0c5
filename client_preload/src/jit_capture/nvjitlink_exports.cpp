// nvJitLink's versioned names, for programs and libraries linked against libnvJitLink
// (nvjitlink_capture.h): the preloaded client comes first in their lookup order.
#include <dlfcn.h>

#include <mutex>
#include <string>
#include <unordered_map>

#include "entry_points/dlopen_hook.h"
#include "jit_capture/stand_ins.h"

namespace {

// The real nvJitLink's function `name`: in the libnvJitLink the job loaded (never
// tally's stand-in, which a job's RTLD_GLOBAL open would put after this library).
void* tally_nvjitlink_next(const char* name) {
  static std::mutex mutex;
  static std::unordered_map<std::string, void*> found;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = found.find(name); it != found.end()) return it->second;
  void* fn = nullptr;
  const std::string path = tally::client::loaded_library("libnvJitLink.so", name);
  const tally::client::DlopenFn open = tally::client::system_dlopen();
  if (!path.empty() && open != nullptr) {
    if (void* library = open(path.c_str(), RTLD_LAZY | RTLD_NOLOAD)) {
      fn = dlsym(library, name);
      dlclose(library);  // NOLOAD took a reference; the library stays loaded by whoever loaded it
    }
  }
  if (fn != nullptr) found.emplace(name, fn);  // a miss is looked for again: the library may load later
  return fn;
}

}  // namespace

#include "jit_capture/nvjitlink_forwarders.h"

TALLY_NVJITLINK_VERSIONED_FORWARDERS(12)
TALLY_NVJITLINK_VERSIONED_FORWARDERS(13)
