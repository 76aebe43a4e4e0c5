#include "modules/linker.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

#include "connection/connection.h"
#include "contexts/contexts.h"
#include "driver_objects.h"
#include "entry_points/entry_point.h"
#include "jit_capture/jit_records.h"
#include "logging/log.h"
#include "modules/module_images.h"
#include "connection/staged_bytes.h"

namespace tally::client {
namespace {

std::atomic<uint64_t> g_next_link{1};

// The options of cuLinkCreate that tally acts on. Output options point into the
// application's optionValues array, which CUDA requires to outlive the link state.
struct LinkOptions {
  char* info_log = nullptr;
  size_t info_capacity = 0;
  void** info_size_out = nullptr;
  char* error_log = nullptr;
  size_t error_capacity = 0;
  void** error_size_out = nullptr;
  void** wall_time_out = nullptr;  // CU_JIT_WALL_TIME: a float written over the option's value
  bool verbose = false;
  unsigned max_registers = 0;      // CU_JIT_MAX_REGISTERS (0: none)
};

struct LinkStateObject {
  std::atomic<ObjectTag> tag{ObjectTag::kLinkState};
  uint64_t id = 0;  // the link state the server knows
  std::mutex mutex;
  LinkOptions options;
  std::string info, error;       // what the logs hold so far (they accumulate until destroyed)
  int inputs = 0;
  float wall_ms = 0;
  std::vector<uint8_t> image;    // the last cuLinkComplete's image, owned by the link state
};

LinkStateObject* as_link(CUlinkState state) { return live_object<LinkStateObject, ObjectTag::kLinkState>(state); }

uintptr_t option_number(void* value) { return reinterpret_cast<uintptr_t>(value); }

bool known_option(CUjit_option option) {
  return option >= 0 && option < CU_JIT_NUM_OPTIONS && static_cast<int>(option) != 15;  // 15: no longer defined
}

CUresult read_create_options(unsigned count, CUjit_option* options, void** values, LinkOptions* out) {
  if (count > 0 && (options == nullptr || values == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < count; ++i) {
    if (!known_option(options[i])) return CUDA_ERROR_INVALID_VALUE;
    switch (options[i]) {
      case CU_JIT_INFO_LOG_BUFFER: out->info_log = static_cast<char*>(values[i]); break;
      case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
        out->info_capacity = option_number(values[i]);
        out->info_size_out = &values[i];
        break;
      case CU_JIT_ERROR_LOG_BUFFER: out->error_log = static_cast<char*>(values[i]); break;
      case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
        out->error_capacity = option_number(values[i]);
        out->error_size_out = &values[i];
        break;
      case CU_JIT_WALL_TIME: out->wall_time_out = &values[i]; break;
      case CU_JIT_LOG_VERBOSE: out->verbose = option_number(values[i]) != 0; break;
      case CU_JIT_MAX_REGISTERS: out->max_registers = static_cast<unsigned>(option_number(values[i])); break;
      case CU_JIT_GLOBAL_SYMBOL_COUNT:
        if (option_number(values[i]) != 0) {
          log_error("cuLinkCreate: CU_JIT_GLOBAL_SYMBOL_ADDRESSES (host addresses for unresolved symbols) is not "
                    "supported by tally; define the symbols in a linked input instead");
          return CUDA_ERROR_NOT_SUPPORTED;
        }
        break;
      default:
        // Compiler options (optimization level, target, debug and line info, caching,
        // ...) steer code generation for a GPU; the linked image is PTX, which the
        // loader compiles for the device with its own settings. The register cap
        // travels in the PTX (.maxnreg), as cuFuncGetAttribute then shows it.
        break;
    }
  }
  return CUDA_SUCCESS;
}

// cuLinkAddData takes only compiler options (cuda.h lists the ones it refuses).
CUresult check_input_options(unsigned count, CUjit_option* options, void** values) {
  if (count > 0 && (options == nullptr || values == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < count; ++i) {
    switch (options[i]) {
      case CU_JIT_WALL_TIME:
      case CU_JIT_INFO_LOG_BUFFER:
      case CU_JIT_ERROR_LOG_BUFFER:
      case CU_JIT_TARGET_FROM_CUCONTEXT:
      case CU_JIT_TARGET: return CUDA_ERROR_INVALID_VALUE;
      default:
        if (!known_option(options[i])) return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

// Copies a log into the application's buffer (capped, NUL-terminated) and reports
// how much of it was filled, terminator included (0 when there is nothing to say).
void write_log(const std::string& text, char* buffer, size_t capacity, void** size_out) {
  size_t filled = 0;
  if (buffer != nullptr && capacity > 0) {
    const size_t n = std::min(text.size(), capacity - 1);
    std::memcpy(buffer, text.data(), n);
    buffer[n] = '\0';
    filled = text.empty() ? 0 : n + 1;
  }
  if (size_out != nullptr) *size_out = reinterpret_cast<void*>(static_cast<uintptr_t>(filled));
}

void append_line(std::string* log, const std::string& line) {
  if (line.empty()) return;
  if (!log->empty() && log->back() != '\n') log->push_back('\n');
  log->append(line);
}

void publish_logs(LinkStateObject* link) {
  const LinkOptions& o = link->options;
  write_log(link->info, o.info_log, o.info_capacity, o.info_size_out);
  write_log(link->error, o.error_log, o.error_capacity, o.error_size_out);
  if (o.wall_time_out != nullptr) std::memcpy(o.wall_time_out, &link->wall_ms, sizeof link->wall_ms);
}

// The text of an Error record (why the server refused a request), or "".
std::string server_reason(const Reply& reply) {
  if (reply.kind != static_cast<uint32_t>(protocol::MessageKind::Error) || reply.payload.size() < sizeof(protocol::ErrorMsg))
    return {};
  return std::string(reinterpret_cast<const char*>(reply.payload.data()) + sizeof(protocol::ErrorMsg),
                     reply.payload.size() - sizeof(protocol::ErrorMsg));
}

CUresult add_input(uint64_t link, CUjitInputType type, const uint8_t* data, size_t size, const std::string& name,
                   std::string* error) {
  Connection& c = Connection::instance();
  protocol::LinkAddMsg m{};
  m.link = link;
  // A bare cubin a JIT compiler of the job made (relocatable, as NVRTC's -dc makes) may
  // have its PTX recorded (jit_capture/): it travels after the input, and the server links
  // that PTX when the record matches the cubin. Whatever the type the job named: the
  // driver takes an input by its content (CuPy passes its cubins as CU_JIT_INPUT_PTX).
  const std::vector<uint8_t> with_record =
      type == CU_JIT_INPUT_LIBRARY ? std::vector<uint8_t>() : image_with_jit_record(data, size, &m.record_size);
  if (!with_record.empty()) {
    data = with_record.data();
    size = with_record.size();
  }
  m.size = size;
  m.type = static_cast<uint32_t>(type);
  m.name_size = static_cast<uint32_t>(name.size());
  Reply reply;
  CUresult rc;
  if (name.size() + size <= kInlineRequestBytes) {
    std::vector<uint8_t> tail(name.begin(), name.end());
    tail.insert(tail.end(), data, data + size);
    rc = c.request(m, &reply, tail.data(), static_cast<uint32_t>(tail.size()));
  } else {
    std::lock_guard<std::mutex> staging(staging_mutex());
    rc = stage_bytes(data, size);
    m.staged = 1;
    if (rc == CUDA_SUCCESS) rc = c.request(m, &reply, name.data(), static_cast<uint32_t>(name.size()));
  }
  if (rc != CUDA_SUCCESS) {
    append_line(error, server_reason(reply));
    return rc;
  }
  return Connection::expect_kind(reply, protocol::MessageKind::Done, 0);
}

CUresult complete(uint64_t link, const LinkOptions& options, std::vector<uint8_t>* image, std::string* info,
                  std::string* error) {
  Connection& c = Connection::instance();
  Reply reply;
  protocol::LinkCompleteMsg m{link, options.verbose ? 1u : 0u, options.max_registers};
  if (CUresult rc = c.request(m, &reply); rc != CUDA_SUCCESS) {
    append_line(error, server_reason(reply));
    return rc;
  }
  if (CUresult rc = Connection::expect_kind(reply, protocol::MessageKind::LinkReply, sizeof(protocol::LinkReplyMsg));
      rc != CUDA_SUCCESS)
    return rc;
  protocol::LinkReplyMsg got{};
  std::memcpy(&got, reply.payload.data(), sizeof got);
  if (got.size > 0) {
    const uint8_t* bytes = c.download_data(got.arena_offset);
    const bool consistent = got.image_size + got.info_log_size + got.error_log_size == got.size &&
                            got.arena_offset + got.size <= c.download_capacity();
    if (consistent) {
      image->assign(bytes, bytes + got.image_size);
      append_line(info, std::string(reinterpret_cast<const char*>(bytes) + got.image_size, got.info_log_size));
      append_line(error, std::string(reinterpret_cast<const char*>(bytes) + got.image_size + got.info_log_size,
                                     got.error_log_size));
    }
    c.release_download(got.arena_offset);
    if (!consistent) return Connection::expect_kind(Reply{}, protocol::MessageKind::LinkReply, 1);
  }
  return static_cast<CUresult>(got.status);
}

CUresult add_to(LinkStateObject* link, CUjitInputType type, const uint8_t* data, size_t size, const char* name) {
  std::lock_guard<std::mutex> lock(link->mutex);
  ++link->inputs;
  const std::string label = name != nullptr && *name ? std::string(name) : "input " + std::to_string(link->inputs);
  CUresult rc = add_input(link->id, type, data, size, label, &link->error);
  publish_logs(link);
  return rc;
}

}  // namespace

CUresult link_through_server(const std::vector<LinkInputBytes>& inputs, unsigned max_registers,
                             std::vector<uint8_t>* image, std::string* error) {
  // A job may link before its first CUDA call (nvJitLink needs no driver): the server
  // links, so connect as cuInit would (a second cuInit of the job's finds it connected).
  if (CUresult rc = Connection::instance().usable(); rc == CUDA_ERROR_NOT_INITIALIZED) {
    if (CUresult connected = Connection::instance().connect(); connected != CUDA_SUCCESS) return connected;
  } else if (rc != CUDA_SUCCESS) {
    return rc;
  }
  const uint64_t link = g_next_link.fetch_add(1, std::memory_order_relaxed);
  std::string info;
  CUresult rc = CUDA_SUCCESS;
  for (size_t i = 0; rc == CUDA_SUCCESS && i < inputs.size(); ++i)
    rc = add_input(link, inputs[i].type, inputs[i].data, inputs[i].size, inputs[i].name, error);
  LinkOptions options;
  options.max_registers = max_registers;
  if (rc == CUDA_SUCCESS) rc = complete(link, options, image, &info, error);
  Connection::instance().send(protocol::LinkDestroyMsg{link});
  return rc;
}

CUresult link_relocatable_fatbins(const uint64_t* fatbins, std::vector<uint8_t>* image) {
  std::vector<LinkInputBytes> inputs;
  for (int i = 0; fatbins[i] != 0; ++i) {
    const auto* fatbin = reinterpret_cast<const uint8_t*>(fatbins[i]);
    const size_t size = fatbin_bytes(fatbin);
    if (size == 0) return CUDA_ERROR_INVALID_IMAGE;
    inputs.push_back({CU_JIT_INPUT_FATBINARY, fatbin, size, "relocatable device code " + std::to_string(i + 1)});
  }
  std::string error;
  const CUresult rc = link_through_server(inputs, 0, image, &error);
  if (rc != CUDA_SUCCESS)
    log_error("linking the program's relocatable device code (nvcc -rdc=true, %zu translation units) failed: %s",
              inputs.size(), error.empty() ? "no reason given" : error.c_str());
  return rc;
}

}  // namespace tally::client

using namespace tally::client;
namespace protocol = tally::protocol;

TALLY_ENTRY(cuLinkCreate_v6050)(unsigned int numOptions, CUjit_option* options, void** optionValues,
                                CUlinkState* stateOut) {
  if (stateOut == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = check_current_context_for_new_resource(); rc != CUDA_SUCCESS) return rc;
  LinkOptions parsed;
  if (CUresult rc = read_create_options(numOptions, options, optionValues, &parsed); rc != CUDA_SUCCESS) return rc;
  auto* link = new LinkStateObject();
  link->id = g_next_link.fetch_add(1, std::memory_order_relaxed);
  link->options = parsed;
  publish_logs(link);  // the logs start empty
  *stateOut = reinterpret_cast<CUlinkState>(link);
  note_context_resource(ContextResource::kLinkState, reinterpret_cast<uint64_t>(link));
  return CUDA_SUCCESS;
}
TALLY_ENTRY(cuLinkCreate_v5050)(unsigned int numOptions, CUjit_option* options, void** optionValues,
                                CUlinkState* stateOut) {
  return tally_entry_cuLinkCreate_v6050(numOptions, options, optionValues, stateOut);
}

TALLY_ENTRY(cuLinkAddData_v6050)(CUlinkState state, CUjitInputType type, void* data, size_t size, const char* name,
                                 unsigned int numOptions, CUjit_option* options, void** optionValues) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  LinkStateObject* link = as_link(state);
  if (link == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (data == nullptr || size == 0 || type < 0 || type >= CU_JIT_NUM_INPUT_TYPES) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_input_options(numOptions, options, optionValues); rc != CUDA_SUCCESS) return rc;
  return add_to(link, type, static_cast<const uint8_t*>(data), size, name);
}
TALLY_ENTRY(cuLinkAddData_v5050)(CUlinkState state, CUjitInputType type, void* data, size_t size, const char* name,
                                 unsigned int numOptions, CUjit_option* options, void** optionValues) {
  return tally_entry_cuLinkAddData_v6050(state, type, data, size, name, numOptions, options, optionValues);
}

TALLY_ENTRY(cuLinkAddFile_v6050)(CUlinkState state, CUjitInputType type, const char* path, unsigned int numOptions,
                                 CUjit_option* options, void** optionValues) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  LinkStateObject* link = as_link(state);
  if (link == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (path == nullptr || type < 0 || type >= CU_JIT_NUM_INPUT_TYPES) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_input_options(numOptions, options, optionValues); rc != CUDA_SUCCESS) return rc;
  std::ifstream file(path, std::ios::binary);
  if (!file) return CUDA_ERROR_FILE_NOT_FOUND;
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (bytes.empty()) return CUDA_ERROR_INVALID_VALUE;
  return add_to(link, type, bytes.data(), bytes.size(), path);
}
TALLY_ENTRY(cuLinkAddFile_v5050)(CUlinkState state, CUjitInputType type, const char* path, unsigned int numOptions,
                                 CUjit_option* options, void** optionValues) {
  return tally_entry_cuLinkAddFile_v6050(state, type, path, numOptions, options, optionValues);
}

TALLY_ENTRY(cuLinkComplete_v5050)(CUlinkState state, void** cubinOut, size_t* sizeOut) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  LinkStateObject* link = as_link(state);
  if (link == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (cubinOut == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(link->mutex);
  const auto started = std::chrono::steady_clock::now();
  std::vector<uint8_t> image;
  CUresult rc = complete(link->id, link->options, &image, &link->info, &link->error);
  link->wall_ms += std::chrono::duration<float, std::milli>(std::chrono::steady_clock::now() - started).count();
  publish_logs(link);
  if (rc != CUDA_SUCCESS) return rc;
  link->image = std::move(image);
  *cubinOut = link->image.data();
  if (sizeOut != nullptr) *sizeOut = link->image.size();
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuLinkDestroy_v5050)(CUlinkState state) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  LinkStateObject* link = as_link(state);
  if (link == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  ObjectTag expected = ObjectTag::kLinkState;
  if (!link->tag.compare_exchange_strong(expected, ObjectTag::kDead)) return CUDA_ERROR_INVALID_HANDLE;
  forget_context_resource(ContextResource::kLinkState, reinterpret_cast<uint64_t>(link));
  {
    std::lock_guard<std::mutex> lock(link->mutex);
    std::vector<uint8_t>().swap(link->image);  // the image the link state owned goes with it
  }
  return Connection::instance().send(protocol::LinkDestroyMsg{link->id});
}
