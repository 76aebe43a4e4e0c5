// Device-side `malloc(size)` and `free(ptr)`: the extern functions nvcc and
// numba's runtime (NRT) call, served from the launch's device heap
// (device_heap.h), which the job's context owns.
//
// Each lane's call is its own: lanes of a warp get distinct blocks, in lane
// order. malloc returns 0 when the heap has no room, as CUDA's does. Freeing
// what malloc did not return is undefined in CUDA; here it fails the launch
// with CUDA_ERROR_ILLEGAL_ADDRESS naming the pointer, rather than corrupt the heap.
//
// Operands: imm = frame offset of the call's argument (.param .b64), target =
// frame offset of malloc's result (-1: the result is not read).
#include "emulator/device_heap.h"
#include "emulator/ops_common.h"

namespace tally::emu {
namespace {

DeviceHeap& heap_of(Exec& e, LaneMask m, const char* call) {
  DeviceHeap* heap = e.launch->cfg.heap;
  if (heap == nullptr) {
    fault(kLaunchFailed, std::string("the kernel calls ") + call + " and the launch has no device heap", __builtin_ctz(m));
  }
  return *heap;
}

uint64_t frame_u64(Exec& e, uint64_t at, int lane) {
  uint64_t v;
  std::memcpy(&v, e.local(at, 8, lane), 8);
  return v;
}

EMU_HANDLER(h_malloc) {
  DeviceHeap& heap = heap_of(e, m, "malloc");
  const uint64_t frame = e.frame_local_base();
  for_lanes(m, [&](int l) {
    uint64_t ptr = heap.malloc(frame_u64(e, frame + static_cast<uint64_t>(in.imm), l));
    if (in.target >= 0) std::memcpy(e.local(frame + static_cast<uint64_t>(in.target), 8, l), &ptr, 8);
  });
}

EMU_HANDLER(h_free) {
  DeviceHeap& heap = heap_of(e, m, "free");
  const uint64_t frame = e.frame_local_base();
  for_lanes(m, [&](int l) {
    uint64_t ptr = frame_u64(e, frame + static_cast<uint64_t>(in.imm), l);
    if (!heap.free(ptr)) {
      fault(kIllegalAddress, "free(" + hex(ptr) + "): not a block that malloc returned (or freed twice)", l);
    }
  });
}

const HandlerRegistrar registrar{EMU_ENTRY("malloc", h_malloc), EMU_ENTRY("free", h_free)};

}  // namespace
}  // namespace tally::emu
