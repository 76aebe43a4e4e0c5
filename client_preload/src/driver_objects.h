// What the job's driver handles point at. CUmodule/CUlibrary, CUfunction/CUkernel,
// CUstream and CUevent are addresses of these client-side objects; each starts
// with a tag word, so a handle of the wrong kind (or NULL) is an error instead of
// a crash. CUDA lets a job pass a CUkernel where a CUfunction is expected (cudart
// launches that way), so one object serves both names; likewise a library is a
// module. Objects are never freed: a handle used after
// unload/destroy finds its tag cleared and fails cleanly.
#pragma once
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "driver_headers.h"
#include "tally/protocol_generated.h"

namespace tally::client {

enum class ObjectTag : uint32_t {
  kDead = 0,
  kModule = 0x4d4f4455,    // "MODU"
  kFunction = 0x46554e43,  // "FUNC"
  kStream = 0x53545245,    // "STRE"
  kEvent = 0x45564e54,     // "EVNT"
  kGraph = 0x47524150,     // "GRAP"
  kGraphExec = 0x47455845, // "GEXE"
  kGraphNode = 0x474e4f44, // "GNOD"
  kLinkState = 0x4c494e4b, // "LINK"
  kGreenContext = 0x4752434e,  // "GRCN"
  kResourceDesc = 0x52534443,  // "RSDC"
};

// CU_FUNC_ATTRIBUTE_* values a FunctionReply carries.
constexpr int kFuncAttributeSlots = sizeof(protocol::FunctionReplyMsg::attributes) / sizeof(int32_t);
static_assert(kFuncAttributeSlots >= CU_FUNC_ATTRIBUTE_MAX, "FunctionReply has too few attribute slots");

struct ParamSlot {
  uint32_t offset;
  uint32_t size;
};

struct ModuleObject;
struct GreenContextObject;

struct FunctionObject {
  std::atomic<ObjectTag> tag{ObjectTag::kFunction};
  uint64_t id = 0;  // the server's function id
  ModuleObject* module = nullptr;
  std::string name;
  uint32_t param_total = 0;  // bytes of the parameter block
  std::vector<ParamSlot> params;
  std::atomic<int32_t> attributes[kFuncAttributeSlots] = {};
  bool compiled_cluster = false;  // its PTX fixes its cluster shape (.reqnctapercluster)
};

struct ModuleObject {
  std::atomic<ObjectTag> tag{ObjectTag::kModule};
  uint64_t id = 0;  // the server's module id
  std::mutex mutex;
  std::unordered_map<std::string, FunctionObject*> functions;
};

struct StreamObject {
  std::atomic<ObjectTag> tag{ObjectTag::kStream};
  uint64_t id = 0;  // the client-chosen id the server knows the stream by
  unsigned flags = 0;
  int priority = 0;
  CUcontext context = nullptr;  // current when it was created (nullptr: none was; the primary one serves)
  GreenContextObject* green = nullptr;  // made in a green context: its kernels keep to that context's SMs
};

struct EventObject {
  std::atomic<ObjectTag> tag{ObjectTag::kEvent};
  uint64_t id = 0;
  unsigned flags = 0;
};

// A new event handle with a fresh client-chosen id (the server learns of it from
// the caller's request).
EventObject* new_event_object(unsigned flags);

template <class Object, ObjectTag Tag, class Handle>
Object* live_object(Handle handle) {
  auto* object = reinterpret_cast<Object*>(handle);
  if (object == nullptr || object->tag.load(std::memory_order_acquire) != Tag) return nullptr;
  return object;
}

inline FunctionObject* as_function(CUfunction f) { return live_object<FunctionObject, ObjectTag::kFunction>(f); }
inline FunctionObject* as_function(CUkernel k) { return live_object<FunctionObject, ObjectTag::kFunction>(k); }
inline ModuleObject* as_module(CUmodule m) { return live_object<ModuleObject, ObjectTag::kModule>(m); }
inline ModuleObject* as_module(CUlibrary l) { return live_object<ModuleObject, ObjectTag::kModule>(l); }
inline EventObject* as_event(CUevent e) { return live_object<EventObject, ObjectTag::kEvent>(e); }
inline StreamObject* as_stream(CUstream s) { return live_object<StreamObject, ObjectTag::kStream>(s); }

}  // namespace tally::client
