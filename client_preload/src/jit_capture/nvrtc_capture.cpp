#include "jit_capture/nvrtc_capture.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "jit_capture/jit_records.h"
#include "jit_capture/stand_ins.h"
#include "logging/trace.h"

namespace tally::client {
namespace {

// nvrtc.h's types, declared here: the client builds without NVRTC's headers.
using NvrtcProgram = void*;
using NvrtcResult = int;
constexpr NvrtcResult kNvrtcSuccess = 0;
constexpr NvrtcResult kNvrtcInternalError = 11;  // NVRTC_ERROR_INTERNAL_ERROR
using GetBytesFn = NvrtcResult (*)(NvrtcProgram, char*);
using GetSizeFn = NvrtcResult (*)(NvrtcProgram, size_t*);

// The NVRTC functions the client's nvrtcGetCUBIN needs, all from one libnvrtc.
struct NvrtcFunctions {
  GetBytesFn get_cubin = nullptr;
  void* get_cubin_size = nullptr;
  void* get_ptx_size = nullptr;
  void* get_ptx = nullptr;
};

// NVRTC's own functions, looked up once, in the libnvrtc the job loaded (stand_ins.h).
const NvrtcFunctions& real_nvrtc() {
  static const NvrtcFunctions found = [] {
    const std::string path = loaded_library("libnvrtc.so", "nvrtcGetCUBIN");
    NvrtcFunctions f;
    f.get_cubin = reinterpret_cast<GetBytesFn>(symbol_in(path, "nvrtcGetCUBIN"));
    f.get_cubin_size = symbol_in(path, "nvrtcGetCUBINSize");
    f.get_ptx_size = symbol_in(path, "nvrtcGetPTXSize");
    f.get_ptx = symbol_in(path, "nvrtcGetPTX");
    return f;
  }();
  return found;
}

}  // namespace

}  // namespace tally::client

using namespace tally::client;

// After NVRTC wrote the cubin of `program` into `cubin`: its PTX, from the same NVRTC,
// recorded for it. Exported for tally's libtally-nvrtc (client_preload/nvrtc/), which
// passes the functions of the libnvrtc it stands in front of.
extern "C" __attribute__((visibility("default"))) void tally_client_record_nvrtc_cubin(
    void* program, const char* cubin, void* get_cubin_size, void* get_ptx_size, void* get_ptx) {
  if (!jit_capture_on() || get_cubin_size == nullptr || get_ptx_size == nullptr ||
      get_ptx == nullptr)
    return;
  size_t cubin_size = 0, ptx_size = 0;
  if (reinterpret_cast<GetSizeFn>(get_cubin_size)(program, &cubin_size) != kNvrtcSuccess || cubin_size == 0) return;
  // a compile for a virtual architecture, or with -dlto, has no PTX to give: nothing to record
  if (reinterpret_cast<GetSizeFn>(get_ptx_size)(program, &ptx_size) != kNvrtcSuccess || ptx_size <= 1) return;
  std::vector<char> ptx(ptx_size);
  if (reinterpret_cast<GetBytesFn>(get_ptx)(program, ptx.data()) != kNvrtcSuccess) return;
  jit_record_store(reinterpret_cast<const uint8_t*>(cubin), cubin_size, ptx.data(), strnlen(ptx.data(), ptx_size),
                   "nvrtc");
}

// What a program or library linked against libnvrtc calls (see nvrtc_capture.h).
extern "C" __attribute__((visibility("default"))) NvrtcResult nvrtcGetCUBIN(NvrtcProgram program, char* cubin) {
  const NvrtcFunctions& nvrtc = real_nvrtc();
  if (nvrtc.get_cubin == nullptr) return kNvrtcInternalError;  // unreachable: only NVRTC's users call this
  const NvrtcResult rc = nvrtc.get_cubin(program, cubin);
  if (rc == kNvrtcSuccess && cubin != nullptr)
    tally_client_record_nvrtc_cubin(program, cubin, nvrtc.get_cubin_size, nvrtc.get_ptx_size, nvrtc.get_ptx);
  return rc;
}
