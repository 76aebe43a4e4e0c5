// Kernel launches: fire-and-forget. The parameter block is laid out here, from
// the layout the server sent when the function was resolved, straight into the
// request ring (one record: LaunchKernelMsg + parameter bytes), or recorded when
// the stream is being captured (capture.h). Launch errors the server finds (bad
// grid, device faults) come back at the next synchronizing call.
#include <algorithm>
#include <climits>
#include <cstring>
#include <memory>
#include <vector>

#include "graphs/capture.h"
#include "connection/connection.h"
#include "driver_objects.h"
#include "entry_points/entry_point.h"
#include "launch/cluster_launch.h"
#include "cupti/device_work.h"
#include "launch/launch.h"
#include "logging/log.h"
#include "streams/stream_ids.h"
#include "entry_points/unsupported.h"

namespace tally::client {
namespace {

struct LaunchRecord {
  protocol::LaunchKernelMsg msg;
  const FunctionObject* fn;
  void** kernel_params;   // CUDA's form: one pointer per parameter
  const void* buffer;     // `extra` form: the parameter block itself
  uint32_t param_bytes;
};

void fill_launch(uint8_t* slot, const void* context) {
  const auto* r = static_cast<const LaunchRecord*>(context);
  std::memcpy(slot, &r->msg, sizeof r->msg);
  uint8_t* params = slot + sizeof r->msg;
  if (r->buffer != nullptr) {
    std::memcpy(params, r->buffer, r->param_bytes);
    return;
  }
  std::memset(params, 0, r->param_bytes);  // padding between parameters
  const auto& slots = r->fn->params;
  for (size_t i = 0; i < slots.size(); ++i) std::memcpy(params + slots[i].offset, r->kernel_params[i], slots[i].size);
}

// What the driver refuses at launch time (rather than at the next synchronization):
// dimensions beyond the device's limits, more threads than the function allows,
// more dynamic shared memory than it opted in to.
CUresult check_configuration(const FunctionObject* fn, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned shared) {
  if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0) return CUDA_ERROR_INVALID_VALUE;
  const int32_t* limit = Connection::instance().device().attributes;
  auto over = [](unsigned value, int32_t max) { return max > 0 && value > static_cast<unsigned>(max); };
  if (over(bx, limit[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X]) || over(by, limit[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y]) ||
      over(bz, limit[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z]) || over(gx, limit[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X]) ||
      over(gy, limit[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y]) || over(gz, limit[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z]))
    return CUDA_ERROR_INVALID_VALUE;
  const uint64_t threads = uint64_t{bx} * by * bz;
  if (over(static_cast<unsigned>(std::min<uint64_t>(threads, UINT32_MAX)),
           fn->attributes[CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK].load(std::memory_order_relaxed)))
    return CUDA_ERROR_INVALID_VALUE;
  const int32_t max_dynamic = fn->attributes[CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES].load(std::memory_order_relaxed);
  if (max_dynamic > 0 && shared > static_cast<unsigned>(max_dynamic)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

// What the graph APIs report about a captured launch (cuGraphKernelNodeGetParams...).
void describe_kernel(KernelNodeLaunch* k, const LaunchRecord& r, CUfunction f, const uint8_t* params) {
  k->function = f;
  std::copy(r.msg.grid, r.msg.grid + 3, k->grid);
  std::copy(r.msg.block, r.msg.block + 3, k->block);
  k->shared_bytes = r.msg.shared_bytes;
  k->cooperative = (r.msg.flags & static_cast<uint32_t>(protocol::LaunchFlag::COOPERATIVE)) != 0;
  std::copy(r.msg.cluster, r.msg.cluster + 3, k->cluster);
  k->params.assign(params, params + r.param_bytes);
  k->pointers.clear();
  for (const ParamSlot& slot : r.fn->params) k->pointers.push_back(k->params.data() + slot.offset);
}

// Sends the launch, or records it when its stream is being captured: the
// parameter block is laid out now (the job's parameter values at capture time,
// as CUDA keeps them) and sent again, unchanged, on each replay's stream.
CUresult submit(const LaunchRecord& r, CUfunction f) {
  CUresult rc;
  if (captured(r.msg.stream, true, &rc, [&r, f](GraphNode& node) {
        auto block = std::make_shared<std::vector<uint8_t>>(sizeof r.msg + r.param_bytes);
        fill_launch(block->data(), &r);
        node.type = CU_GRAPH_NODE_TYPE_KERNEL;
        describe_kernel(&node.kernel, r, f, block->data() + sizeof r.msg);
        node.ops.push_back([block, f](uint64_t stream) {
          const FunctionObject* fn = as_function(f);
          if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;  // its module was unloaded
          LaunchRecord again{};
          std::memcpy(&again.msg, block->data(), sizeof again.msg);
          again.msg.stream = stream;
          again.fn = fn;
          again.buffer = block->data() + sizeof again.msg;
          again.param_bytes = static_cast<uint32_t>(block->size() - sizeof again.msg);
          return submit(again, f);
        });
      }))
    return rc;
  return Connection::instance().send_async_fill(static_cast<uint32_t>(protocol::MessageKind::LaunchKernel),
                                                static_cast<uint32_t>(sizeof r.msg) + r.param_bytes, &fill_launch,
                                                &r);
}

}  // namespace

CUresult launch_kernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                       unsigned shared, CUstream stream, void** kernel_params, void** extra, bool per_thread,
                       uint32_t flags, const uint32_t cluster[3], cupti::LaunchCall call) {
  Connection& c = Connection::instance();
  if (CUresult rc = c.usable(); rc != CUDA_SUCCESS) return rc;
  const FunctionObject* fn = as_function(f);
  if (fn == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (CUresult rc = check_configuration(fn, gx, gy, gz, bx, by, bz, shared); rc != CUDA_SUCCESS) return rc;
  if (flags & static_cast<uint32_t>(protocol::LaunchFlag::COOPERATIVE)) {
    if (CUresult rc = check_cooperative_grid(f, fn, gx, gy, gz, bx * by * bz, shared); rc != CUDA_SUCCESS) return rc;
  }
  const unsigned grid[3] = {gx, gy, gz};
  LaunchRecord r{};
  if (CUresult rc = check_cluster(fn, grid, cluster, r.msg.cluster); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = stream_id(stream, per_thread, &r.msg.stream); rc != CUDA_SUCCESS) return rc;
  r.msg.function = fn->id;
  r.msg.grid[0] = gx, r.msg.grid[1] = gy, r.msg.grid[2] = gz;
  r.msg.block[0] = bx, r.msg.block[1] = by, r.msg.block[2] = bz;
  r.msg.shared_bytes = shared;
  r.msg.flags = flags;
  r.fn = fn;
  if (kernel_params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (extra != nullptr) {
    size_t size = 0;
    if (CUresult rc = read_launch_extra(extra, &r.buffer, &size); rc != CUDA_SUCCESS) return rc;
    if (size != fn->param_total) return CUDA_ERROR_INVALID_VALUE;
  } else if (kernel_params == nullptr && !fn->params.empty()) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  r.kernel_params = kernel_params;
  r.param_bytes = fn->param_total;
  cupti::DeviceWork work(r.msg.stream, call);
  const CUresult rc = submit(r, f);
  if (work.active()) {
    const bool cooperative = (flags & static_cast<uint32_t>(protocol::LaunchFlag::COOPERATIVE)) != 0;
    work.kernel(rc, cupti::KernelLaunch{fn, {gx, gy, gz}, {bx, by, bz}, shared,
                                        {r.msg.cluster[0], r.msg.cluster[1], r.msg.cluster[2]}, cooperative});
  }
  return rc;
}

namespace {

// cuLaunchKernelEx's attributes: hints are accepted (the server's scheduler
// decides priority and placement anyway); what tally cannot honour fails.
CUresult check_launch_attributes(const CUlaunchConfig* config) {
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& a = config->attrs[i];
    if (is_cluster_attribute(a.id)) continue;   // cluster_launch.cpp
    switch (a.id) {
      case CU_LAUNCH_ATTRIBUTE_IGNORE:
      case CU_LAUNCH_ATTRIBUTE_PRIORITY:
      case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
      case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
      case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
      case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
      case CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      // Full serialization behind the previous kernel is what tally does anyway.
      case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION:
        break;
      // Read by launch_flags (cooperative.cpp).
      case CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
        break;
      // A substitute for the regular cluster, which the device may always fall back
      // to; that is what tally runs.
      case CU_LAUNCH_ATTRIBUTE_PREFERRED_CLUSTER_DIMENSION:
      case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING:
        break;
      // Events the kernel triggers early (programmatic dependent launch, launch
      // completion). CUDA allows them to trigger as late as the kernel's end, which
      // is where tally records them (completion_events below); they must have
      // timing disabled, as CUDA requires.
      case CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT:
      case CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT: {
        CUevent ev = a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT ? a.value.programmaticEvent.event
                                                                   : a.value.launchCompletionEvent.event;
        const EventObject* e = as_event(ev);
        if (e == nullptr || (e->flags & CU_EVENT_DISABLE_TIMING) == 0 || (e->flags & CU_EVENT_INTERPROCESS) != 0)
          return CUDA_ERROR_INVALID_VALUE;
        break;
      }
      default:
        return CUDA_ERROR_NOT_SUPPORTED;
    }
  }
  return CUDA_SUCCESS;
}

// Records the launch's programmatic and launch-completion events behind it.
CUresult completion_events(const CUlaunchConfig* config, bool per_thread) {
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& a = config->attrs[i];
    CUevent ev = nullptr;
    if (a.id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT) ev = a.value.programmaticEvent.event;
    if (a.id == CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT) ev = a.value.launchCompletionEvent.event;
    if (ev == nullptr) continue;
    CUresult rc = per_thread ? tally_entry_cuEventRecord_v7000_ptsz(ev, config->hStream)
                             : tally_entry_cuEventRecord_v2000(ev, config->hStream);
    if (rc != CUDA_SUCCESS) return rc;
  }
  return CUDA_SUCCESS;
}

CUresult launch_ex(const CUlaunchConfig* config, CUfunction f, void** kernel_params, void** extra, bool per_thread) {
  const cupti::LaunchCall call =
      per_thread ? cupti::LaunchCall::kLaunchKernelExPtsz : cupti::LaunchCall::kLaunchKernelEx;
  if (config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_launch_attributes(config); rc != CUDA_SUCCESS) {
    static OnceFlag logged;
    if (rc == CUDA_ERROR_NOT_SUPPORTED && logged.first())
      log_error("cuLaunchKernelEx with launch attributes tally cannot honour "
                "returns CUDA_ERROR_NOT_SUPPORTED (reported once)");
    return rc;
  }
  uint32_t cluster[3];
  if (CUresult rc = read_cluster_attributes(config, cluster); rc != CUDA_SUCCESS) return rc;
  CUresult rc = launch_kernel(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                              config->blockDimY, config->blockDimZ, config->sharedMemBytes, config->hStream,
                              kernel_params, extra, per_thread, launch_flags(config), cluster, call);
  return rc == CUDA_SUCCESS ? completion_events(config, per_thread) : rc;
}

}  // namespace

// `extra`: CU_LAUNCH_PARAM_BUFFER_POINTER, ptr, CU_LAUNCH_PARAM_BUFFER_SIZE, &size, CU_LAUNCH_PARAM_END.
CUresult read_launch_extra(void** extra, const void** buffer, size_t* size) {
  const void* ptr = nullptr;
  const size_t* bytes = nullptr;
  for (size_t i = 0;; i += 2) {
    if (extra[i] == CU_LAUNCH_PARAM_END) break;
    if (extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER) {
      ptr = extra[i + 1];
    } else if (extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE) {
      bytes = static_cast<const size_t*>(extra[i + 1]);
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  // No buffer, or an empty one at no address: a launch of a kernel without parameters.
  if (ptr == nullptr && (bytes == nullptr || *bytes == 0)) {
    *buffer = nullptr;
    *size = 0;
    return CUDA_SUCCESS;
  }
  if (ptr == nullptr || bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *buffer = ptr;
  *size = *bytes;
  return CUDA_SUCCESS;
}

}  // namespace tally::client

using tally::client::launch_ex;
using tally::client::kNoCluster;
using tally::client::cupti::LaunchCall;
using tally::client::launch_kernel;

TALLY_ENTRY(cuLaunchKernel_v4000)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY, unsigned int gridDimZ,
                                  unsigned int blockDimX, unsigned int blockDimY, unsigned int blockDimZ,
                                  unsigned int sharedMemBytes, CUstream hStream, void** kernelParams, void** extra) {
  return launch_kernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                       kernelParams, extra, false, 0, kNoCluster, LaunchCall::kLaunchKernel);
}
TALLY_ENTRY(cuLaunchKernel_v7000_ptsz)(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                       unsigned int gridDimZ, unsigned int blockDimX, unsigned int blockDimY,
                                       unsigned int blockDimZ, unsigned int sharedMemBytes, CUstream hStream,
                                       void** kernelParams, void** extra) {
  return launch_kernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ, sharedMemBytes, hStream,
                       kernelParams, extra, true, 0, kNoCluster,
                       LaunchCall::kLaunchKernelPtsz);
}
TALLY_ENTRY(cuLaunchKernelEx_v11060)(const CUlaunchConfig* config, CUfunction f, void** kernelParams, void** extra) {
  return launch_ex(config, f, kernelParams, extra, false);
}
TALLY_ENTRY(cuLaunchKernelEx_v11060_ptsz)(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                          void** extra) {
  return launch_ex(config, f, kernelParams, extra, true);
}
