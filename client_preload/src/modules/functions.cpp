// Questions about a resolved function or kernel, answered from what the server
// sent when it was resolved (attributes, parameter layout, name). Settable
// attributes are kept per function: the launch they steer runs on the server's
// terms either way (dynamic shared memory is sent with each launch).
#include "connection/connection.h"
#include "driver_objects.h"
#include "entry_points/entry_point.h"

namespace tally::client {
namespace {

CUresult get_attribute(int* pi, CUfunction_attribute attrib, FunctionObject* fn) {
  if (pi == nullptr || attrib < 0 || attrib >= CU_FUNC_ATTRIBUTE_MAX) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *pi = fn->attributes[attrib].load(std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

CUresult set_attribute(FunctionObject* fn, CUfunction_attribute attrib, int value) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  const auto& device = Connection::instance().device();
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: {
      // Opt-in limit: static plus dynamic shared memory must fit the device's opt-in maximum.
      const int optin = device.attributes[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN];
      const int static_bytes = fn->attributes[CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES].load();
      if (value < 0 || (optin > 0 && value + static_bytes > optin)) return CUDA_ERROR_INVALID_VALUE;
      break;
    }
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      if (value < -1 || value > 100) return CUDA_ERROR_INVALID_VALUE;
      break;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
      // A shape the kernel was compiled with (.reqnctapercluster) is not the job's to change.
      if (fn->compiled_cluster) return CUDA_ERROR_NOT_PERMITTED;
      if (value < 0) return CUDA_ERROR_INVALID_VALUE;
      break;   // the shape is checked at launch, as the driver documents (launch/cluster_launch.cpp)
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
      if (value != 0 && value != 1) return CUDA_ERROR_INVALID_VALUE;
      break;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:   // a placement hint
      if (value < CU_CLUSTER_SCHEDULING_POLICY_DEFAULT || value > CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING)
        return CUDA_ERROR_INVALID_VALUE;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;  // read-only attributes
  }
  fn->attributes[attrib].store(value, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

CUresult param_info(FunctionObject* fn, size_t index, size_t* offset, size_t* size) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (index >= fn->params.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset != nullptr) *offset = fn->params[index].offset;
  if (size != nullptr) *size = fn->params[index].size;
  return CUDA_SUCCESS;
}

CUresult name_of(FunctionObject* fn, const char** name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *name = fn->name.c_str();
  return CUDA_SUCCESS;
}

// Cache and shared-memory bank preferences are hints the driver may ignore.
CUresult accept_hint(FunctionObject* fn) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  return fn == nullptr ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}

CUresult check_device(CUdevice dev) { return dev == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE; }

}  // namespace
}  // namespace tally::client

using namespace tally::client;
namespace protocol = tally::protocol;

TALLY_ENTRY(cuFuncGetAttribute_v2020)(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  return get_attribute(pi, attrib, as_function(hfunc));
}
TALLY_ENTRY(cuKernelGetAttribute_v12000)(int* pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev) {
  if (CUresult rc = check_device(dev); rc != CUDA_SUCCESS) return rc;
  return get_attribute(pi, attrib, as_function(kernel));
}
TALLY_ENTRY(cuFuncSetAttribute_v9000)(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  return set_attribute(as_function(hfunc), attrib, value);
}
TALLY_ENTRY(cuKernelSetAttribute_v12000)(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev) {
  if (CUresult rc = check_device(dev); rc != CUDA_SUCCESS) return rc;
  return set_attribute(as_function(kernel), attrib, val);
}
TALLY_ENTRY(cuFuncGetParamInfo_v12040)(CUfunction func, size_t paramIndex, size_t* paramOffset, size_t* paramSize) {
  return param_info(as_function(func), paramIndex, paramOffset, paramSize);
}
TALLY_ENTRY(cuKernelGetParamInfo_v12040)(CUkernel kernel, size_t paramIndex, size_t* paramOffset,
                                         size_t* paramSize) {
  return param_info(as_function(kernel), paramIndex, paramOffset, paramSize);
}
// A null handle is CUDA_ERROR_INVALID_VALUE, as the driver answers (cuda-bindings' test_cuda.py
// checks it); an unknown non-null one stays CUDA_ERROR_INVALID_HANDLE.
TALLY_ENTRY(cuFuncGetName_v12030)(const char** name, CUfunction hfunc) {
  return hfunc == nullptr ? CUDA_ERROR_INVALID_VALUE : name_of(as_function(hfunc), name);
}
TALLY_ENTRY(cuKernelGetName_v12030)(const char** name, CUkernel hfunc) {
  return hfunc == nullptr ? CUDA_ERROR_INVALID_VALUE : name_of(as_function(hfunc), name);
}
TALLY_ENTRY(cuFuncSetCacheConfig_v3000)(CUfunction hfunc, CUfunc_cache config) {
  (void)config;
  return accept_hint(as_function(hfunc));
}
TALLY_ENTRY(cuKernelSetCacheConfig_v12000)(CUkernel kernel, CUfunc_cache config, CUdevice dev) {
  (void)config;
  if (CUresult rc = check_device(dev); rc != CUDA_SUCCESS) return rc;
  return accept_hint(as_function(kernel));
}
TALLY_ENTRY(cuFuncSetSharedMemConfig_v4020)(CUfunction hfunc, CUsharedconfig config) {
  (void)config;
  return accept_hint(as_function(hfunc));
}
// The server loads a module's functions when it loads the module.
TALLY_ENTRY(cuFuncIsLoaded_v12040)(CUfunctionLoadingState* state, CUfunction hfunc) {
  if (state == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = accept_hint(as_function(hfunc)); rc != CUDA_SUCCESS) return rc;
  *state = CU_FUNCTION_LOADING_STATE_LOADED;
  return CUDA_SUCCESS;
}
TALLY_ENTRY(cuFuncLoad_v12040)(CUfunction hfunc) { return accept_hint(as_function(hfunc)); }
