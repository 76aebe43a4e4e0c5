// Modules and libraries (one object serves both: a CUlibrary is a module here).
// Images go to the server, which loads them on the device; a function or kernel
// is resolved once per module and name (one round trip), and its parameter layout
// and attributes are kept in the FunctionObject for launches and attribute queries.
#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <string>
#include <vector>

#include "memory/address_map.h"
#include "connection/connection.h"
#include "contexts/contexts.h"
#include "driver_objects.h"
#include "entry_points/entry_point.h"
#include "logging/log.h"
#include "jit_capture/jit_records.h"
#include "modules/linker.h"
#include "modules/module_images.h"
#include "connection/staged_bytes.h"
#include "logging/trace.h"

namespace tally::client {
namespace {

// The server's explanation of a failed request, when it sent one.
std::string server_explanation(const Reply& reply) {
  if (reply.kind != static_cast<uint32_t>(protocol::MessageKind::Error) ||
      reply.payload.size() <= sizeof(protocol::ErrorMsg))
    return {};
  return std::string(reinterpret_cast<const char*>(reply.payload.data()) + sizeof(protocol::ErrorMsg),
                     reply.payload.size() - sizeof(protocol::ErrorMsg));
}

// A module with no code for the device: say why (the server's explanation names
// what the image holds and what the device is), as the driver's JIT log would.
CUresult explain_load_failure(CUresult rc, const std::string& why) {
  if ((rc == CUDA_ERROR_NO_BINARY_FOR_GPU || rc == CUDA_ERROR_UNSUPPORTED_PTX_VERSION) && !why.empty())
    log_error("cannot load a module (CUresult %d): %s", static_cast<int>(rc), why.c_str());
  return rc;
}

CUresult load_image(const uint8_t* data, size_t size, ModuleObject** out, std::string* why) {
  Connection& c = Connection::instance();
  protocol::ModuleLoadMsg m{};
  m.size = size;
  // A bare cubin a JIT compiler of the job made may have its PTX recorded
  // (tally/jit/): it travels after the image, and the server decides whether to use it.
  const std::vector<uint8_t> with_record = image_with_jit_record(data, size, &m.record_size);
  if (!with_record.empty()) {
    data = with_record.data();
    size = with_record.size();
  }
  Reply reply;
  if (size <= kInlineRequestBytes) {
    if (CUresult rc = c.request(m, &reply, data, static_cast<uint32_t>(size)); rc != CUDA_SUCCESS) {
      *why = server_explanation(reply);
      return rc;
    }
  } else {
    std::lock_guard<std::mutex> staging(staging_mutex());
    if (CUresult rc = stage_bytes(data, size); rc != CUDA_SUCCESS) return rc;
    m.staged = 1;
    if (CUresult rc = c.request(m, &reply); rc != CUDA_SUCCESS) {
      *why = server_explanation(reply);
      return rc;
    }
  }
  if (CUresult rc = Connection::expect_kind(reply, protocol::MessageKind::ModuleLoadReply,
                                            sizeof(protocol::ModuleLoadReplyMsg));
      rc != CUDA_SUCCESS)
    return rc;
  protocol::ModuleLoadReplyMsg loaded{};
  std::memcpy(&loaded, reply.payload.data(), sizeof loaded);
  auto* module = new ModuleObject();
  module->id = loaded.module;
  *out = module;
  return CUDA_SUCCESS;
}

CUresult load(const void* image, ModuleObject** out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  Connection& c = Connection::instance();
  if (CUresult rc = c.usable(); rc != CUDA_SUCCESS) return rc;
  ModuleImage found = find_module_image(image);
  if (found.data == nullptr) {
    trace_line("module image not understood: %s", found.error);
    return image == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_INVALID_IMAGE;
  }
  // nvlink's image of a PTX-only -rdc build is a bare header: nothing to try loading.
  constexpr size_t kFatbinHeaderBytes = 16;
  const bool nothing_linked = found.prelinked != nullptr && found.size <= kFatbinHeaderBytes;
  std::string why;
  CUresult rc = nothing_linked ? CUDA_ERROR_NO_BINARY_FOR_GPU : load_image(found.data, found.size, out, &why);
  if ((rc == CUDA_ERROR_NO_BINARY_FOR_GPU || rc == CUDA_ERROR_INVALID_IMAGE) && found.prelinked != nullptr) {
    // An -rdc program: nvlink's device-linked image has nothing this device runs (it
    // holds cubins for the build's architectures, or nothing when built for PTX only),
    // so its relocatable device code is linked from PTX now, as the driver does.
    std::vector<uint8_t> linked;
    if (CUresult link_rc = link_relocatable_fatbins(found.prelinked, &linked); link_rc != CUDA_SUCCESS) return link_rc;
    why.clear();
    rc = load_image(linked.data(), linked.size(), out, &why);
  }
  return explain_load_failure(rc, why);
}

CUresult load_file(const char* path, ModuleObject** out) {
  if (path == nullptr || out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::ifstream file(path, std::ios::binary);
  if (!file) return CUDA_ERROR_FILE_NOT_FOUND;
  std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  bytes.push_back('\0');  // a PTX file has no NUL of its own
  return load(bytes.data(), out);
}

CUresult unload(ModuleObject* module) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  ObjectTag expected = ObjectTag::kModule;
  if (!module->tag.compare_exchange_strong(expected, ObjectTag::kDead)) return CUDA_ERROR_INVALID_HANDLE;
  {
    std::lock_guard<std::mutex> lock(module->mutex);
    for (auto& [name, fn] : module->functions) fn->tag.store(ObjectTag::kDead);
  }
  return Connection::instance().request_done(protocol::ModuleUnloadMsg{module->id});
}

CUresult resolve(ModuleObject* module, const char* name, FunctionObject** out) {
  if (out == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lock(module->mutex);  // one round trip per name, however many threads ask
  auto cached = module->functions.find(name);
  if (cached != module->functions.end()) {
    *out = cached->second;
    return CUDA_SUCCESS;
  }
  Reply reply;
  protocol::GetFunctionMsg m{module->id};
  if (CUresult rc = Connection::instance().request(m, &reply, name, static_cast<uint32_t>(std::strlen(name)));
      rc != CUDA_SUCCESS)
    return rc;
  if (CUresult rc = Connection::expect_kind(reply, protocol::MessageKind::FunctionReply,
                                            sizeof(protocol::FunctionReplyMsg));
      rc != CUDA_SUCCESS)
    return rc;
  protocol::FunctionReplyMsg got{};
  std::memcpy(&got, reply.payload.data(), sizeof got);
  if (reply.payload.size() != sizeof got + got.param_count * sizeof(ParamSlot))
    return Connection::expect_kind(Reply{}, protocol::MessageKind::FunctionReply, 0);
  auto* fn = new FunctionObject();
  fn->id = got.function;
  fn->module = module;
  fn->name = name;
  fn->param_total = got.param_total;
  fn->params.resize(got.param_count);
  std::memcpy(fn->params.data(), reply.payload.data() + sizeof got, got.param_count * sizeof(ParamSlot));
  for (int i = 0; i < kFuncAttributeSlots; ++i) fn->attributes[i].store(got.attributes[i]);
  fn->compiled_cluster = got.attributes[CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH] != 0;
  module->functions.emplace(name, fn);
  *out = fn;
  return CUDA_SUCCESS;
}

CUresult global(ModuleObject* module, const char* name, CUdeviceptr* dptr, size_t* bytes) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (module == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  protocol::GlobalReplyMsg got{};
  if (CUresult rc = request_reply(protocol::GetGlobalMsg{module->id}, protocol::MessageKind::GlobalReply, &got, name,
                                  static_cast<uint32_t>(std::strlen(name)));
      rc != CUDA_SUCCESS)
    return rc;
  device_ranges().add(got.dptr, got.size, DeviceRangeKind::kGlobal);
  if (dptr != nullptr) *dptr = got.dptr;
  if (bytes != nullptr) *bytes = got.size;
  return CUDA_SUCCESS;
}

CUmodule module_handle(ModuleObject* m) { return reinterpret_cast<CUmodule>(m); }

// cuModuleLoad*: a module belongs to the context current when it is loaded (libraries
// belong to none, as in CUDA).
CUresult load_module(ModuleObject** out, CUresult (*how)(const void*, ModuleObject**), const void* what) {
  if (CUresult rc = check_current_context_for_new_resource(); rc != CUDA_SUCCESS) return rc;
  CUresult rc = how(what, out);
  if (rc == CUDA_SUCCESS) note_context_resource(ContextResource::kModule, reinterpret_cast<uint64_t>(*out));
  return rc;
}

CUresult load_module_file(const void* path, ModuleObject** out) { return load_file(static_cast<const char*>(path), out); }

}  // namespace
}  // namespace tally::client

using namespace tally::client;
namespace protocol = tally::protocol;

TALLY_ENTRY(cuModuleLoadData_v2000)(CUmodule* module, const void* image) {
  return load_module(reinterpret_cast<ModuleObject**>(module), load, image);
}
TALLY_ENTRY(cuModuleLoadDataEx_v2010)(CUmodule* module, const void* image, unsigned int numOptions,
                                      CUjit_option* options, void** optionValues) {
  // JIT options steer the driver's compiler (log buffers, optimization level);
  // the server loads with its defaults.
  (void)numOptions, (void)options, (void)optionValues;
  return load_module(reinterpret_cast<ModuleObject**>(module), load, image);
}
TALLY_ENTRY(cuModuleLoadFatBinary_v2000)(CUmodule* module, const void* fatCubin) {
  return load_module(reinterpret_cast<ModuleObject**>(module), load, fatCubin);
}
TALLY_ENTRY(cuModuleLoad_v2000)(CUmodule* module, const char* fname) {
  return load_module(reinterpret_cast<ModuleObject**>(module), load_module_file, fname);
}
TALLY_ENTRY(cuModuleUnload_v2000)(CUmodule hmod) {
  CUresult rc = unload(as_module(hmod));
  if (rc == CUDA_SUCCESS) forget_context_resource(ContextResource::kModule, reinterpret_cast<uint64_t>(hmod));
  return rc;
}

TALLY_ENTRY(cuLibraryLoadData_v12000)(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                                      void** jitOptionsValues, unsigned int numJitOptions,
                                      CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                      unsigned int numLibraryOptions) {
  (void)jitOptions, (void)jitOptionsValues, (void)numJitOptions;
  (void)libraryOptions, (void)libraryOptionValues, (void)numLibraryOptions;
  return load(code, reinterpret_cast<ModuleObject**>(library));
}
TALLY_ENTRY(cuLibraryLoadFromFile_v12000)(CUlibrary* library, const char* fileName, CUjit_option* jitOptions,
                                          void** jitOptionsValues, unsigned int numJitOptions,
                                          CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                          unsigned int numLibraryOptions) {
  (void)jitOptions, (void)jitOptionsValues, (void)numJitOptions;
  (void)libraryOptions, (void)libraryOptionValues, (void)numLibraryOptions;
  return load_file(fileName, reinterpret_cast<ModuleObject**>(library));
}
TALLY_ENTRY(cuLibraryUnload_v12000)(CUlibrary library) { return unload(as_module(library)); }

TALLY_ENTRY(cuModuleGetFunction_v2000)(CUfunction* hfunc, CUmodule hmod, const char* name) {
  return resolve(as_module(hmod), name, reinterpret_cast<FunctionObject**>(hfunc));
}
TALLY_ENTRY(cuLibraryGetKernel_v12000)(CUkernel* pKernel, CUlibrary library, const char* name) {
  return resolve(as_module(library), name, reinterpret_cast<FunctionObject**>(pKernel));
}
TALLY_ENTRY(cuLibraryGetModule_v12000)(CUmodule* pMod, CUlibrary library) {
  if (pMod == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ModuleObject* m = as_module(library);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *pMod = module_handle(m);
  return CUDA_SUCCESS;
}
TALLY_ENTRY(cuKernelGetFunction_v12000)(CUfunction* pFunc, CUkernel kernel) {
  if (pFunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FunctionObject* fn = as_function(kernel);
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *pFunc = reinterpret_cast<CUfunction>(fn);
  return CUDA_SUCCESS;
}
TALLY_ENTRY(cuKernelGetLibrary_v12050)(CUlibrary* pLib, CUkernel kernel) {
  if (pLib == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FunctionObject* fn = as_function(kernel);
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *pLib = reinterpret_cast<CUlibrary>(fn->module);
  return CUDA_SUCCESS;
}
TALLY_ENTRY(cuFuncGetModule_v11000)(CUmodule* hmod, CUfunction hfunc) {
  if (hmod == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FunctionObject* fn = as_function(hfunc);
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *hmod = module_handle(fn->module);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuModuleGetGlobal_v3020)(CUdeviceptr_v2* dptr, size_t* bytes, CUmodule hmod, const char* name) {
  return global(as_module(hmod), name, dptr, bytes);
}
TALLY_ENTRY(cuLibraryGetGlobal_v12000)(CUdeviceptr* dptr, size_t* bytes, CUlibrary library, const char* name) {
  return global(as_module(library), name, dptr, bytes);
}
