// CUDA dynamic parallelism: the driver's system calls behind `kernel<<<...>>>` in
// device code, which libcudadevrt's wrappers (__cudaCDP2GetParameterBufferV2,
// __cudaCDP2LaunchDeviceV2, cudaGetLastError) end in.
//
// A launch from device code takes two calls: the parameter buffer for a kernel and
// launch shape (the thread writes the child's parameters into it), then the launch of
// that buffer into a device-side stream. Here the buffer comes from the job's device
// heap and the launch is recorded; run_launch hands the launches back once the grid is
// done and its caller runs them (tally/backends/emulator/device_launches.py). Running
// children after their parent is one of the orders CUDA allows: a parent grid cannot
// wait for its children (CUDA 12 removed device-side cudaDeviceSynchronize), and it is
// complete only when they are.
//
// The last error is per thread, as CUDA keeps it: by block and thread.
//
// Device-side streams and events (cudaStreamCreateWithFlags, cudaEventRecord,
// cudaStreamWaitEvent, ... in device code) are handles and nothing more: the children
// run one after another, in launch order, each complete before the next starts, and
// that order keeps every ordering a stream or event of the grid can ask for.
#include <algorithm>

#include "emulator/device_heap.h"
#include "emulator/ops_common.h"

namespace tally::emu {
namespace {

// Frame offsets two to an immediate: the low and high 32 bits.
uint32_t low(int64_t v) { return static_cast<uint32_t>(static_cast<uint64_t>(v)); }
uint32_t high(int64_t v) { return static_cast<uint32_t>(static_cast<uint64_t>(v) >> 32); }

DeviceLaunches& launches_of(Exec& e) { return *e.launch->cfg.device_launches; }

uint64_t thread_key(Exec& e, int lane) {
  return e.launch->block.linear << 11 | (static_cast<uint64_t>(e.warp->index) * kWarpSize + lane);
}

// A system call's 32-bit result (a CNPerror; 0 is success) into its frame slot, when
// the call's result is used (target >= 0).
void set_result(Exec& e, uint64_t frame, const Instr& in, int lane, int32_t value = 0) {
  if (in.target >= 0) std::memcpy(e.local(frame + static_cast<uint64_t>(in.target), 4, lane), &value, 4);
}

// __cuda_syscall_cnpv2GetParameterBufferV2(kernel pointer, grid dim3, block dim3,
// dynamic shared bytes) -> parameter buffer, 0 when the heap has no room (as CUDA
// returns NULL when its launch pool is full). imm = kernel | grid << 32,
// imm2 = block | shared << 32 (frame offsets), target = the result's.
EMU_HANDLER(h_parameter_buffer) {
  DeviceHeap* heap = e.launch->cfg.heap;
  if (heap == nullptr) fault(kLaunchFailed, "a device-side launch and the launch has no device heap", __builtin_ctz(m));
  const uint64_t frame = e.frame_local_base();
  const std::vector<int32_t>& sizes = e.launch->prog.kernel_param_bytes;
  DeviceLaunches& launches = launches_of(e);
  for_lanes(m, [&](int l) {
    uint64_t kernel;
    DeviceLaunchRequest r;
    std::memcpy(&kernel, e.local(frame + low(in.imm), 8, l), 8);
    std::memcpy(r.grid, e.local(frame + high(in.imm), 12, l), 12);
    std::memcpy(r.block_dim, e.local(frame + low(in.imm2), 12, l), 12);
    std::memcpy(&r.dynamic_shared, e.local(frame + high(in.imm2), 4, l), 4);
    const uint64_t index = kernel - kCodeWindow;
    if (index >= sizes.size() || sizes[index] < 0) {
      fault(kLaunchFailed, "a device-side launch of " + hex(kernel) + ", which is not a kernel of this module", l);
    }
    r.function_index = static_cast<uint32_t>(index);
    r.block = e.launch->block.linear;
    uint64_t buffer = heap->malloc(std::max<uint64_t>(static_cast<uint64_t>(sizes[index]), 1));
    if (buffer != 0) {
      std::lock_guard<std::mutex> lock(launches.mutex);
      launches.buffers[buffer] = r;
    }
    std::memcpy(e.local(frame + static_cast<uint64_t>(in.target), 8, l), &buffer, 8);
  });
}

// __cuda_syscall_cnpv2LaunchDeviceV2(parameter buffer, stream) -> 0. imm = buffer,
// imm2 = stream (frame offsets), target = the result's.
EMU_HANDLER(h_launch_device) {
  const uint64_t frame = e.frame_local_base();
  DeviceLaunches& launches = launches_of(e);
  for_lanes(m, [&](int l) {
    uint64_t buffer, stream;
    std::memcpy(&buffer, e.local(frame + static_cast<uint64_t>(in.imm), 8, l), 8);
    std::memcpy(&stream, e.local(frame + static_cast<uint64_t>(in.imm2), 8, l), 8);
    {
      std::lock_guard<std::mutex> lock(launches.mutex);
      auto it = launches.buffers.find(buffer);
      if (it == launches.buffers.end()) {
        fault(kLaunchFailed, "a device-side launch of the parameter buffer " + hex(buffer) +
                                 ", which no cudaGetParameterBuffer of this launch handed out (or it was launched already)",
              l);
      }
      DeviceLaunchRequest r = it->second;
      launches.buffers.erase(it);
      r.params = buffer;
      r.stream = stream;
      launches.requests.push_back(r);
    }
    set_result(e, frame, in, l);
  });
}

// __cuda_syscall_cnpv2GetLastError() -> the thread's last error. target = the result's.
EMU_HANDLER(h_get_last_error) {
  const uint64_t frame = e.frame_local_base();
  DeviceLaunches& launches = launches_of(e);
  for_lanes(m, [&](int l) {
    int32_t error = 0;
    {
      std::lock_guard<std::mutex> lock(launches.mutex);
      auto it = launches.last_errors.find(thread_key(e, l));
      if (it != launches.last_errors.end()) error = it->second;
    }
    set_result(e, frame, in, l, error);
  });
}

// __cuda_syscall_cnpv2SetLastError(error) -> 0. imm = error, target = the result's.
EMU_HANDLER(h_set_last_error) {
  const uint64_t frame = e.frame_local_base();
  DeviceLaunches& launches = launches_of(e);
  for_lanes(m, [&](int l) {
    int32_t error;
    std::memcpy(&error, e.local(frame + static_cast<uint64_t>(in.imm), 4, l), 4);
    {
      std::lock_guard<std::mutex> lock(launches.mutex);
      if (error == 0) {
        launches.last_errors.erase(thread_key(e, l));
      } else {
        launches.last_errors[thread_key(e, l)] = error;
      }
    }
    set_result(e, frame, in, l);
  });
}

// __cuda_syscall_cnpv2StreamCreate / EventCreate(handle pointer, flags) -> 0: a new
// handle through the pointer (a generic address: the caller's local variable, mostly).
// imm = the pointer's frame offset, target = the result's.
EMU_HANDLER(h_create_handle) {
  const uint64_t frame = e.frame_local_base();
  DeviceLaunches& launches = launches_of(e);
  for_lanes(m, [&](int l) {
    uint64_t where, handle;
    std::memcpy(&where, e.local(frame + static_cast<uint64_t>(in.imm), 8, l), 8);
    {
      std::lock_guard<std::mutex> lock(launches.mutex);
      handle = launches.next_handle++;
    }
    std::memcpy(e.generic(where, 8, l), &handle, 8);
    set_result(e, frame, in, l);
  });
}

// __cuda_syscall_cnpv2GetDevice / GetDeviceCount(int pointer) -> 0: imm2 through the
// pointer (the job's one device: 0, and a count of 1). imm = the pointer's frame offset.
EMU_HANDLER(h_write_int) {
  const uint64_t frame = e.frame_local_base();
  for_lanes(m, [&](int l) {
    uint64_t where;
    std::memcpy(&where, e.local(frame + static_cast<uint64_t>(in.imm), 8, l), 8);
    const int32_t value = static_cast<int32_t>(in.imm2);
    std::memcpy(e.generic(where, 4, l), &value, 4);
    set_result(e, frame, in, l);
  });
}

// Stream and event destruction, event records and stream waits -> 0 (see the top).
EMU_HANDLER(h_ordered_anyway) {
  const uint64_t frame = e.frame_local_base();
  for_lanes(m, [&](int l) { set_result(e, frame, in, l); });
}

const HandlerRegistrar registrar{EMU_ENTRY("cdp.parameter_buffer", h_parameter_buffer),
                                 EMU_ENTRY("cdp.launch", h_launch_device),
                                 EMU_ENTRY("cdp.get_last_error", h_get_last_error),
                                 EMU_ENTRY("cdp.set_last_error", h_set_last_error),
                                 EMU_ENTRY("cdp.create_handle", h_create_handle),
                                 EMU_ENTRY("cdp.write_int", h_write_int),
                                 EMU_ENTRY("cdp.ordered_anyway", h_ordered_anyway)};

}  // namespace

void finish_device_launches(DeviceLaunches& launches, const LaunchConfig& config, bool failed, LaunchResult& result) {
  std::lock_guard<std::mutex> lock(launches.mutex);
  DeviceHeap* heap = config.heap;
  // Buffers handed out and never launched go back now; so do all of a failed grid's:
  // its launches do not run.
  for (auto& [buffer, request] : launches.buffers) heap->free(buffer);
  launches.buffers.clear();
  if (failed) {
    for (const DeviceLaunchRequest& r : launches.requests) heap->free(r.params);
    launches.requests.clear();
    return;
  }
  // Blocks ran on several workers at once: block order (then each block's call order)
  // is the order one worker running the blocks in turn would have launched them.
  std::stable_sort(launches.requests.begin(), launches.requests.end(),
                   [](const DeviceLaunchRequest& a, const DeviceLaunchRequest& b) { return a.block < b.block; });
  result.device_launches = std::move(launches.requests);
}

}  // namespace tally::emu
