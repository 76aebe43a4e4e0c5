// cuCoredump{Get,Set}Attribute{,Global}: GPU core dump settings, accepted and read back.
// tally writes no GPU core dump (a kernel fault is reported through the job's error, see
// README "What tally does not do"), but programs and tools (cuda-bindings' tests, debuggers'
// launchers) set these and read them back, and a refusal would stop them for a setting that
// only matters once a dump is written. The context settings start as the global ones when
// first read, as a context created after cuCoredumpSetAttributeGlobal inherits them; one
// context store per process stands for the process's contexts (tally's jobs use one).
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <string>

#include "entry_points/entry_point.h"

namespace tally::client {
namespace {

constexpr size_t kMaxPathChars = 1023;   // FILE and PIPE, as the driver documents them

// The documented defaults: core.cuda.HOSTNAME.PID and corepipe.cuda.HOSTNAME.PID.
std::string default_path(const char* prefix) {
  char host[256] = {0};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  return std::string(prefix) + "." + host + "." + std::to_string(getpid());
}

struct CoredumpSettings {
  bool on_exception = false;
  bool trigger_host = true;     // documented default: the host process dumps too
  bool lightweight = false;
  bool user_trigger = false;
  std::string file = default_path("core.cuda");
  std::string pipe = default_path("corepipe.cuda");
  int generation_flags = CU_COREDUMP_DEFAULT_FLAGS;
};

std::mutex g_mutex;
CoredumpSettings g_global;
CoredumpSettings g_context;
bool g_context_set = false;

bool* flag_of(CoredumpSettings& s, CUcoredumpSettings attrib) {
  switch (attrib) {
    case CU_COREDUMP_ENABLE_ON_EXCEPTION: return &s.on_exception;
    case CU_COREDUMP_TRIGGER_HOST: return &s.trigger_host;
    case CU_COREDUMP_LIGHTWEIGHT: return &s.lightweight;
    case CU_COREDUMP_ENABLE_USER_TRIGGER: return &s.user_trigger;
    default: return nullptr;
  }
}

std::string* text_of(CoredumpSettings& s, CUcoredumpSettings attrib) {
  if (attrib == CU_COREDUMP_FILE) return &s.file;
  if (attrib == CU_COREDUMP_PIPE) return &s.pipe;
  return nullptr;
}

// *size: the bytes value holds on the way in; the bytes the setting takes on the way out.
CUresult get(CoredumpSettings& s, CUcoredumpSettings attrib, void* value, size_t* size) {
  if (value == nullptr || size == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (bool* flag = flag_of(s, attrib)) {
    if (*size < sizeof(bool)) return CUDA_ERROR_INVALID_VALUE;
    *static_cast<bool*>(value) = *flag;
    *size = sizeof(bool);
  } else if (std::string* text = text_of(s, attrib)) {
    if (*size < text->size() + 1) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(value, text->c_str(), text->size() + 1);
    *size = text->size() + 1;
  } else if (attrib == CU_COREDUMP_GENERATION_FLAGS) {
    if (*size < sizeof(int)) return CUDA_ERROR_INVALID_VALUE;
    *static_cast<int*>(value) = s.generation_flags;
    *size = sizeof(int);
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult set(CoredumpSettings& s, CUcoredumpSettings attrib, void* value, size_t* size) {
  if (value == nullptr || size == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (bool* flag = flag_of(s, attrib)) {
    if (*size < sizeof(bool)) return CUDA_ERROR_INVALID_VALUE;
    *flag = *static_cast<const bool*>(value);
  } else if (std::string* text = text_of(s, attrib)) {
    // *size may count the terminator or not: cuda-bindings passes a bytes object's
    // length, and NVIDIA's driver takes it.
    const char* chars = static_cast<const char*>(value);
    size_t length = strnlen(chars, *size);
    if (length == 0 || length > kMaxPathChars) return CUDA_ERROR_INVALID_VALUE;
    text->assign(chars, length);
  } else if (attrib == CU_COREDUMP_GENERATION_FLAGS) {
    if (*size < sizeof(int)) return CUDA_ERROR_INVALID_VALUE;
    int flags = *static_cast<const int*>(value);
    if (flags & ~static_cast<int>(CU_COREDUMP_LIGHTWEIGHT_FLAGS)) return CUDA_ERROR_INVALID_VALUE;
    s.generation_flags = flags;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CoredumpSettings& context_settings() {
  if (!g_context_set) {
    g_context = g_global;
    g_context_set = true;
  }
  return g_context;
}

}  // namespace
}  // namespace tally::client

using tally::client::g_mutex;

TALLY_ENTRY(cuCoredumpGetAttributeGlobal_v12010)(CUcoredumpSettings attrib, void* value, size_t* size) {
  std::lock_guard lock(g_mutex);
  return tally::client::get(tally::client::g_global, attrib, value, size);
}
TALLY_ENTRY(cuCoredumpSetAttributeGlobal_v12010)(CUcoredumpSettings attrib, void* value, size_t* size) {
  std::lock_guard lock(g_mutex);
  return tally::client::set(tally::client::g_global, attrib, value, size);
}
TALLY_ENTRY(cuCoredumpGetAttribute_v12010)(CUcoredumpSettings attrib, void* value, size_t* size) {
  std::lock_guard lock(g_mutex);
  return tally::client::get(tally::client::context_settings(), attrib, value, size);
}
TALLY_ENTRY(cuCoredumpSetAttribute_v12010)(CUcoredumpSettings attrib, void* value, size_t* size) {
  std::lock_guard lock(g_mutex);
  return tally::client::set(tally::client::context_settings(), attrib, value, size);
}
