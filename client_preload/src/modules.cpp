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

#include "address_map.h"
#include "connection.h"
#include "driver_objects.h"
#include "entry_point.h"
#include "log.h"
#include "module_images.h"
#include "trace.h"

namespace tally::client {
namespace {

// Images up to this size ride in the request; larger ones go through the upload
// arena in chunks (staged on the server), one image at a time.
constexpr size_t kInlineImageBytes = 64 << 10;
std::mutex g_staging_mutex;

// A module with no code for the device: say why (the server's explanation names
// what the image holds and what the device is), as the driver's JIT log would.
CUresult explain_load_failure(CUresult rc, const Reply& reply) {
  if ((rc == CUDA_ERROR_NO_BINARY_FOR_GPU || rc == CUDA_ERROR_UNSUPPORTED_PTX_VERSION) &&
      reply.kind == static_cast<uint32_t>(protocol::MessageKind::Error) &&
      reply.payload.size() > sizeof(protocol::ErrorMsg)) {
    std::string why(reinterpret_cast<const char*>(reply.payload.data()) + sizeof(protocol::ErrorMsg),
                    reply.payload.size() - sizeof(protocol::ErrorMsg));
    log_error("cannot load a module (CUresult %d): %s", static_cast<int>(rc), why.c_str());
  }
  return rc;
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
  protocol::ModuleLoadMsg m{};
  m.size = found.size;
  Reply reply;
  if (found.size <= kInlineImageBytes) {
    if (CUresult rc = c.request(m, &reply, found.data, static_cast<uint32_t>(found.size)); rc != CUDA_SUCCESS)
      return explain_load_failure(rc, reply);
  } else {
    std::lock_guard<std::mutex> staging(g_staging_mutex);
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(c.upload_capacity() / 4, 16 << 20));
    for (size_t at = 0; at < found.size; at += chunk) {
      const size_t n = std::min(chunk, found.size - at);
      std::lock_guard<std::mutex> lock(c.upload_mutex());
      protocol::StageBytesMsg stage{0, n};
      uint8_t* dst = nullptr;
      if (CUresult rc = c.reserve_upload(n, &stage.arena_offset, &dst); rc != CUDA_SUCCESS) return rc;
      std::memcpy(dst, found.data + at, n);
      if (CUresult rc = c.send(stage); rc != CUDA_SUCCESS) return rc;
    }
    m.staged = 1;
    if (CUresult rc = c.request(m, &reply); rc != CUDA_SUCCESS) return explain_load_failure(rc, reply);
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

}  // namespace
}  // namespace tally::client

using namespace tally::client;
namespace protocol = tally::protocol;

TALLY_ENTRY(cuModuleLoadData_v2000)(CUmodule* module, const void* image) {
  return load(image, reinterpret_cast<ModuleObject**>(module));
}
TALLY_ENTRY(cuModuleLoadDataEx_v2010)(CUmodule* module, const void* image, unsigned int numOptions,
                                      CUjit_option* options, void** optionValues) {
  // JIT options steer the driver's compiler (log buffers, optimization level);
  // the server loads with its defaults.
  (void)numOptions, (void)options, (void)optionValues;
  return load(image, reinterpret_cast<ModuleObject**>(module));
}
TALLY_ENTRY(cuModuleLoadFatBinary_v2000)(CUmodule* module, const void* fatCubin) {
  return load(fatCubin, reinterpret_cast<ModuleObject**>(module));
}
TALLY_ENTRY(cuModuleLoad_v2000)(CUmodule* module, const char* fname) {
  return load_file(fname, reinterpret_cast<ModuleObject**>(module));
}
TALLY_ENTRY(cuModuleUnload_v2000)(CUmodule hmod) { return unload(as_module(hmod)); }

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
