#include "jit_capture/nvjitlink_capture.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "jit_capture/jit_records.h"
#include "jit_capture/nvjitlink_forwarders.h"
#include "jit_capture/sha256.h"
#include "logging/trace.h"
#include "modules/linker.h"

namespace tally::client {
namespace {

// nvJitLink.h's nvJitLinkInputType, declared here: the client builds without its headers.
enum NvJitLinkInput : int {
  kInputCubin = 1,
  kInputPtx = 2,
  kInputLtoir = 3,
  kInputFatbin = 4,
  kInputObject = 5,
  kInputLibrary = 6,
  kInputIndex = 7,
  kInputAny = 10,
};

using GetSizeFn = int (*)(void*, size_t*);
using GetBytesFn = int (*)(void*, void*);

struct Input {
  int type;  // as the job named it
  std::vector<uint8_t> bytes;
  std::string name;
};

struct Link {
  std::vector<std::string> options;
  std::vector<Input> inputs;
  std::string unreadable;  // why an input could not be kept ("" when all were)
};

std::mutex g_mutex;
std::unordered_map<void*, Link> g_links;  // by nvJitLinkHandle

bool starts_with(const std::vector<uint8_t>& bytes, const void* magic, size_t n) {
  return bytes.size() >= n && std::memcmp(bytes.data(), magic, n) == 0;
}

// The input's kind as its bytes say (NVJITLINK_INPUT_ANY: nvJitLink decides by content too).
int kind_of(const Input& input) {
  if (input.type != kInputAny) return input.type;
  const std::vector<uint8_t>& b = input.bytes;
  if (starts_with(b, "!<arch>\n", 8)) return kInputLibrary;
  if (starts_with(b, "\x50\xed\x55\xba", 4)) return kInputFatbin;  // the fatbin's magic, little-endian
  if (starts_with(b, "\x7f" "ELF", 4)) {
    constexpr uint16_t kEmCuda = 190;  // e_machine of a cubin; anything else is a host object
    uint16_t machine = 0;
    if (b.size() >= 20) std::memcpy(&machine, b.data() + 18, sizeof machine);
    return machine == kEmCuda ? kInputCubin : kInputObject;
  }
  if (starts_with(b, "BC\xc0\xde", 4) || starts_with(b, "\xde\xc0\x17\x0b", 4)) return kInputLtoir;  // LLVM bitcode
  return kInputPtx;
}

// The driver's name for an nvJitLink input kind (what tally's linker takes), or -1.
int driver_input_type(int kind) {
  switch (kind) {
    case kInputCubin: return CU_JIT_INPUT_CUBIN;
    case kInputPtx: return CU_JIT_INPUT_PTX;
    case kInputFatbin: return CU_JIT_INPUT_FATBINARY;
    case kInputObject: return CU_JIT_INPUT_OBJECT;
    case kInputLibrary: return CU_JIT_INPUT_LIBRARY;
    default: return -1;  // LTO-IR and index files: tally's linker reads neither
  }
}

std::string text_of(const uint8_t* bytes, size_t size) {
  return std::string(reinterpret_cast<const char*>(bytes), strnlen(reinterpret_cast<const char*>(bytes), size));
}

// The register cap the job's options ask of every kernel (-maxrregcount=N), 0 for none:
// what the cubin was built with travels in the recorded PTX (.maxnreg), as a cuLink with
// CU_JIT_MAX_REGISTERS gets it, so the kernels' attributes say what the job asked for.
unsigned register_cap(const std::vector<std::string>& options) {
  constexpr char kOption[] = "-maxrregcount=";
  unsigned cap = 0;
  for (const std::string& o : options)
    if (o.rfind(kOption, 0) == 0) cap = static_cast<unsigned>(std::strtoul(o.c_str() + sizeof kOption - 1, nullptr, 10));
  return cap;
}

// The PTX of a link's LTO-IR inputs: nvJitLink's own, from a second link of those inputs
// with the job's options and -ptx (which takes LTO-IR only; what the other inputs define
// stays declared, for tally's linker). `lookup` finds the real nvJitLink's functions
// named <prefix>nvJitLink<Function><suffix>, as the job called them.
bool lto_ptx(const Link& link, const std::vector<const Input*>& lto_inputs, TallyNvJitLinkLookupFn lookup,
             const std::string& prefix, const std::string& suffix, std::string* ptx, std::string* why) {
  auto fn = [&](const char* function) { return lookup((prefix + "nvJitLink" + function + suffix).c_str()); };
  auto create = reinterpret_cast<TallyNvJitLinkCreateFn>(fn("Create"));
  auto add = reinterpret_cast<TallyNvJitLinkAddDataFn>(fn("AddData"));
  auto complete = reinterpret_cast<int (*)(void*)>(fn("Complete"));
  auto ptx_size = reinterpret_cast<GetSizeFn>(fn("GetLinkedPtxSize"));
  auto get_ptx = reinterpret_cast<GetBytesFn>(fn("GetLinkedPtx"));
  auto destroy = reinterpret_cast<TallyNvJitLinkDestroyFn>(fn("Destroy"));
  if (!create || !add || !complete || !ptx_size || !get_ptx || !destroy) {
    *why = "the nvJitLink the job uses lacks a function the second link needs";
    return false;
  }
  std::vector<const char*> options;
  bool has_ptx = false;
  for (const std::string& o : link.options) {
    options.push_back(o.c_str());
    has_ptx = has_ptx || o == "-ptx";
  }
  if (!has_ptx) options.push_back("-ptx");
  void* handle = nullptr;
  if (create(&handle, static_cast<uint32_t>(options.size()), options.data()) != 0) {
    *why = "nvJitLink refused the job's options with -ptx";
    return false;
  }
  int rc = 0;
  for (const Input* input : lto_inputs)
    if (rc == 0) rc = add(handle, input->type, input->bytes.data(), input->bytes.size(), input->name.c_str());
  size_t size = 0;
  if (rc == 0) rc = complete(handle);
  if (rc == 0) rc = ptx_size(handle, &size);
  std::vector<char> text(size + 1, '\0');
  if (rc == 0 && size > 0) rc = get_ptx(handle, text.data());
  destroy(&handle);
  if (rc != 0 || size <= 1) {
    *why = "nvJitLink's second link, with -ptx, gave no PTX (error " + std::to_string(rc) + ")";
    return false;
  }
  ptx->assign(text.data(), strnlen(text.data(), size));
  return true;
}

// The PTX `link` makes, or false with *why.
bool ptx_of(const Link& link, TallyNvJitLinkLookupFn lookup, const std::string& prefix, const std::string& suffix,
            std::string* ptx, std::string* why) {
  if (!link.unreadable.empty()) {
    *why = link.unreadable;
    return false;
  }
  if (link.inputs.empty()) {
    *why = "the link had no inputs tally saw";
    return false;
  }
  std::vector<const Input*> lto_inputs;
  for (const Input& input : link.inputs) {
    const int kind = kind_of(input);
    if (kind == kInputIndex) {
      *why = "an index file (" + input.name + ") names its inputs, which tally does not follow";
      return false;
    }
    if (kind == kInputLtoir) lto_inputs.push_back(&input);
  }
  // The LTO-IR inputs become one PTX input, where the first of them was.
  std::string lto_text;
  if (!lto_inputs.empty() && !lto_ptx(link, lto_inputs, lookup, prefix, suffix, &lto_text, why)) return false;
  std::vector<LinkInputBytes> inputs;
  for (const Input& input : link.inputs) {
    if (&input == (lto_inputs.empty() ? nullptr : lto_inputs[0])) {
      inputs.push_back({CU_JIT_INPUT_PTX, reinterpret_cast<const uint8_t*>(lto_text.data()), lto_text.size(),
                        "the LTO-IR inputs' PTX"});
    } else if (kind_of(input) != kInputLtoir) {
      inputs.push_back({static_cast<CUjitInputType>(driver_input_type(kind_of(input))), input.bytes.data(),
                        input.bytes.size(), input.name});
    }
  }
  const unsigned max_registers = register_cap(link.options);
  if (inputs.size() == 1 && inputs[0].type == CU_JIT_INPUT_PTX && max_registers == 0) {
    *ptx = text_of(inputs[0].data, inputs[0].size);
    return true;
  }
  std::vector<uint8_t> image;
  std::string error;
  const CUresult rc = link_through_server(inputs, max_registers, &image, &error);
  if (rc != CUDA_SUCCESS) {
    *why = "tally's linker could not link the inputs (CUresult " + std::to_string(rc) + (error.empty() ? "" : ": ") +
           error + ")";
    return false;
  }
  *ptx = text_of(image.data(), image.size());
  return true;
}

// "PTX jit.ptx, LTO-IR 2.ltoir": what the link's inputs are, for the trace.
std::string input_kinds(const Link& link) {
  std::string out;
  for (const Input& input : link.inputs) {
    static const char* const kNames[] = {"none", "cubin", "PTX", "LTO-IR", "fatbin", "object", "library", "index"};
    const int kind = kind_of(input);
    if (!out.empty()) out += ", ";
    out += kind >= 0 && kind < 8 ? kNames[kind] : "?";
    out += " " + (input.name.empty() ? std::string("(unnamed)") : input.name);
  }
  return out;
}

// Whether the cache already holds this cubin's record (the same link made again).
bool recorded(const uint8_t* cubin, size_t size) {
  const std::vector<uint8_t> record = jit_record_for(cubin, size);
  if (record.empty()) return false;
  const std::string wanted = "cubin-sha256 " + sha256_hex(cubin, size) + "\n";
  return std::search(record.begin(), record.end(), wanted.begin(), wanted.end()) != record.end();
}

}  // namespace
}  // namespace tally::client

using namespace tally::client;

// The hooks nvjitlink_forwarders.h calls after nvJitLink's own call succeeded.
extern "C" __attribute__((visibility("default"))) void tally_client_nvjitlink_created(void* handle, uint32_t count,
                                                                                      const char** options) {
  if (!jit_capture_on() || handle == nullptr) return;
  Link link;
  for (uint32_t i = 0; options != nullptr && i < count; ++i)
    if (options[i] != nullptr) link.options.emplace_back(options[i]);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_links[handle] = std::move(link);  // a handle nvJitLink reuses starts afresh
}

extern "C" __attribute__((visibility("default"))) void tally_client_nvjitlink_input(void* handle, int type,
                                                                                    const void* data, size_t size,
                                                                                    const char* name) {
  if (!jit_capture_on()) return;
  Input input{type, {}, name != nullptr ? name : ""};
  std::string unreadable;
  if (data != nullptr) {
    const auto* bytes = static_cast<const uint8_t*>(data);
    input.bytes.assign(bytes, bytes + size);
  } else {  // nvJitLinkAddFile: read now, as nvJitLink did (the file may go before the link completes)
    std::ifstream file(input.name, std::ios::binary);
    input.bytes.assign(std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>());
    if (input.bytes.empty()) unreadable = "tally could not read the input file " + input.name;
  }
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_links.find(handle);
  if (it == g_links.end()) return;  // created before capture could see it
  if (!unreadable.empty() && it->second.unreadable.empty()) it->second.unreadable = unreadable;
  it->second.inputs.push_back(std::move(input));
}

extern "C" __attribute__((visibility("default"))) void tally_client_nvjitlink_cubin(void* handle, const void* cubin,
                                                                                    TallyNvJitLinkLookupFn lookup,
                                                                                    const char* prefix,
                                                                                    const char* suffix) {
  if (!jit_capture_on() || lookup == nullptr) return;
  Link link;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    auto it = g_links.find(handle);
    if (it == g_links.end()) return;
    link = it->second;  // a copy: the linking below runs without the lock
  }
  const std::string p = prefix != nullptr ? prefix : "", s = suffix != nullptr ? suffix : "";
  auto cubin_size = reinterpret_cast<GetSizeFn>(lookup((p + "nvJitLinkGetLinkedCubinSize" + s).c_str()));
  size_t size = 0;
  if (cubin_size == nullptr || cubin_size(handle, &size) != 0 || size == 0) return;
  const auto* bytes = static_cast<const uint8_t*>(cubin);
  if (recorded(bytes, size)) return;
  std::string ptx, why;
  if (!ptx_of(link, lookup, p, s, &ptx, &why)) {
    trace_line("jit capture: nvJitLink's cubin (%zu bytes; inputs: %s) goes unrecorded: %s", size,
               input_kinds(link).c_str(), why.c_str());
    return;
  }
  jit_record_store(bytes, size, ptx.data(), ptx.size(), "nvjitlink");  // it traces what it wrote
}

extern "C" __attribute__((visibility("default"))) void tally_client_nvjitlink_destroyed(void* handle) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_links.erase(handle);
}
