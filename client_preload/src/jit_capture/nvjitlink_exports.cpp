// nvJitLink's versioned names, for programs and libraries linked against libnvJitLink
// (nvjitlink_capture.h): the preloaded client comes first in their lookup order.

#include <mutex>
#include <string>
#include <unordered_map>

#include "jit_capture/stand_ins.h"

namespace {

// The real nvJitLink's function `name`: in the libnvJitLink the job loaded (never
// tally's stand-in, which a job's RTLD_GLOBAL open would put after this library).
void* tally_nvjitlink_next(const char* name) {
  static std::mutex mutex;
  static std::unordered_map<std::string, void*> found;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = found.find(name); it != found.end()) return it->second;
  void* fn = tally::client::symbol_in(tally::client::loaded_library("libnvJitLink.so", name), name);
  if (fn != nullptr) found.emplace(name, fn);  // a miss is looked for again: the library may load later
  return fn;
}

}  // namespace

#include "jit_capture/nvjitlink_forwarders.h"

TALLY_NVJITLINK_VERSIONED_FORWARDERS(12)
TALLY_NVJITLINK_VERSIONED_FORWARDERS(13)
