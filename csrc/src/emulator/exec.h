// Execution state of one launch (warps, the running block, caches) and the
// `Exec` view a handler gets: operand rows of the current call frame and
// bounds-checked access to every state space.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "emulator/emu_types.h"
#include "emulator/memory.h"
#include "emulator/program.h"

namespace tally::emu {

class DeviceHeap;

// A kernel's launch of a kernel (CUDA dynamic parallelism, `kernel<<<...>>>` in device
// code): what the launch hands back for its caller to run once the launching grid is
// done (tally/backends/emulator/device_launches.py).
struct DeviceLaunchRequest {
  uint64_t block = 0;           // the launching block: requests run in block order, then call order
  uint32_t function_index = 0;  // the kernel's index in its module (its pointer minus kCodeWindow)
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block_dim[3] = {1, 1, 1};
  uint32_t dynamic_shared = 0;
  uint64_t params = 0;          // its parameter buffer, from the device heap; the caller frees it
  uint64_t stream = 0;          // the device-side stream handle it named
};

// What one launch's workers share of the device launches: the parameter buffers handed
// out and not launched yet, and the launches made.
struct DeviceLaunches {
  std::mutex mutex;
  std::unordered_map<uint64_t, DeviceLaunchRequest> buffers;
  std::vector<DeviceLaunchRequest> requests;
  std::unordered_map<uint64_t, int32_t> last_errors;   // by block and thread: cudaGetLastError's
  uint64_t next_handle = 0x10000;   // device-side streams and events: past the special streams (0..4)
};

struct LaunchConfig {
  uint32_t grid[3] = {1, 1, 1};
  uint32_t block[3] = {1, 1, 1};
  uint32_t cluster[3] = {1, 1, 1};     // blocks per cluster; the grid is a multiple of it
  bool explicit_cluster = false;       // launched with cluster dimensions (what %is_explicit_cluster reads)
  uint32_t dynamic_shared = 0;
  uint32_t sm_count = 8;               // the device's SMs: at most this many workers run a launch
  uint32_t sm_cap = 0;                 // at most this many (0: sm_count), e.g. a job's SM share
  uint64_t max_warp_steps = 0;         // 0: unlimited
  double timeout_seconds = 0;          // 0: unlimited
  const std::atomic<bool>* cancel = nullptr;
  DeviceHeap* heap = nullptr;          // what malloc/free use (the job's); the caller keeps it alive
  bool cooperative = false;            // all blocks resident at once (cooperative.cpp)
  uint64_t grid_workspace = 0;         // a cooperative launch's, set by run_launch: what %envreg1:2 read
  DeviceLaunches* device_launches = nullptr;  // set by run_launch
};

struct LaunchResult {
  int code = kSuccess;
  std::string message;
  std::string printf_output;
  std::string assert_output;   // what failed device asserts print (a GPU writes it to stderr)
  uint64_t warp_steps = 0;
  uint64_t thread_instructions = 0;
  uint32_t sms_used = 0;       // workers (SMs) that ran at least one block
  uint32_t max_concurrent = 0; // most blocks that ran at the same moment
  std::vector<DeviceLaunchRequest> device_launches;  // in block order, then call order
};

LaunchResult run_launch(const Program& program, DeviceMemory& memory, const std::string& params,
                        const LaunchConfig& config);

// At the end of run_launch (device_launch.cpp): frees the parameter buffers no launch
// took (all of them when the grid failed) and hands the launches made to `result`.
void finish_device_launches(DeviceLaunches& launches, const LaunchConfig& config, bool failed, LaunchResult& result);

struct Warp {
  uint32_t index = 0;
  LaneMask exists = 0;       // lanes that are threads of the block
  LaneMask live = 0;         // not exited
  LaneMask runnable = 0;     // live and not waiting
  LaneMask at_barrier = 0;   // waiting at a block barrier
  LaneMask at_warpsync = 0;  // waiting for other lanes at a warp-synchronous instruction
  // barrier.cluster: lanes that arrived in the cluster's current phase, lanes whose
  // arrival's phase completed (their next wait goes on), lanes waiting for it.
  LaneMask cluster_arrived = 0;
  LaneMask cluster_done = 0;
  LaneMask at_cluster_wait = 0;
  int32_t pc[kWarpSize] = {};
  uint16_t depth[kWarpSize] = {};
  uint8_t barrier_id[kWarpSize] = {};
  uint32_t depth_capacity = 0;     // call frames allocated below
  std::vector<uint64_t> regs;      // [depth][slot][lane]
  std::vector<uint64_t> fixed;     // [slot][lane]
  std::vector<uint8_t> local;      // [lane][local_stride]
  uint64_t local_stride = 0;
  std::vector<int32_t> return_pc;  // [depth][lane]: where a lane in frame depth+1 returns to
  // The group of lanes executing together (same depth and pc).
  LaneMask group = 0;
  int32_t gpc = 0;
  uint32_t gdepth = 0;
  uint64_t other_min = ~0ull;      // lowest key among runnable lanes outside the group
};

struct Barrier {
  uint32_t arrived = 0;
  uint32_t expected = 0;   // thread count of bar with operand b; 0: every live thread
  uint32_t popc = 0;       // bar.red accumulators
  bool all = true;
  bool any = false;
};

struct Block {
  uint32_t ctaid[3] = {0, 0, 0};
  uint32_t cluster_id[3] = {0, 0, 0};     // the block's cluster in the grid
  uint32_t cluster_ctaid[3] = {0, 0, 0};  // the block in its cluster
  uint32_t cluster_rank = 0;
  uint64_t linear = 0;
  std::vector<uint8_t> shared;
  uint32_t live_threads = 0;
  Barrier barriers[16];
};

// One worker's view of a launch: each worker (one of the emulator's SMs) runs
// whole blocks with its own warps, block state and caches.
struct Launch {
  Launch(const Program& p, DeviceMemory& m, const std::string& params, const LaunchConfig& c, uint32_t sm = 0)
      : prog(p), mem(m), params(params), cfg(c), smid(sm) {}
  const Program& prog;
  DeviceMemory& mem;
  const std::string& params;
  const LaunchConfig& cfg;
  uint32_t smid;               // the worker running it: what %smid reads
  std::vector<Warp> warps;
  Block block;
  uint32_t threads_per_block = 0;
  // Shared memory of each block of the running cluster, by rank (distributed
  // shared memory); empty outside cluster launches.
  struct RankShared {
    uint8_t* data;
    size_t size;
  };
  std::vector<RankShared> cluster_shared;
  // Last allocation a global access hit: most accesses of a kernel go to few buffers.
  uint64_t cache_base = 1;
  uint64_t cache_end = 0;
  uint8_t* cache_host = nullptr;
  std::string printf_output;
  std::string assert_output;
  uint64_t warp_steps = 0;
  uint64_t thread_instructions = 0;
  // Where the reserved shared-memory region starts in the block's shared memory.
  uint32_t reserved_shared_begin() const {
    uint32_t used = prog.static_shared_bytes + cfg.dynamic_shared;
    return (used + kReservedSharedAlign - 1) / kReservedSharedAlign * kReservedSharedAlign;
  }
  static constexpr uint32_t kReservedSharedAlign = 128;
};

[[noreturn]] void fault(int code, const std::string& message, int lane);
std::string hex(uint64_t v);

struct Exec {
  uint64_t* bank[3] = {nullptr, nullptr, nullptr};
  Warp* warp = nullptr;
  Launch* launch = nullptr;
  uint32_t depth = 0;
  bool yield = false;  // a Control::kWait handler found nothing to do yet: let the other warps run

  uint64_t* lanes(uint32_t slot) const {
    return bank[slot >> kBankShift] + static_cast<size_t>(slot & kIndexMask) * kWarpSize;
  }

  // Host pointer of an n-byte access; faults with the CUresult a GPU reports.
  uint8_t* global(uint64_t addr, uint32_t n, int lane) {
    check_alignment(addr, n, lane);
    Launch& L = *launch;
    if (addr >= L.cache_base && addr + n <= L.cache_end) return L.cache_host + (addr - L.cache_base);
    return global_slow(addr, n, lane);
  }
  uint8_t* shared(uint64_t addr, uint32_t n, int lane) {
    check_alignment(addr, n, lane);
    if (addr >> kClusterRankShift) return cluster_shared(addr, n, lane);
    auto& s = launch->block.shared;
    if (addr + n > s.size() || addr + n < addr) space_fault("shared", addr, n, s.size(), lane);
    return s.data() + addr;
  }
  uint8_t* local(uint64_t addr, uint32_t n, int lane) {
    check_alignment(addr, n, lane);
    if (addr + n > warp->local_stride || addr + n < addr) space_fault("local", addr, n, warp->local_stride, lane);
    return warp->local.data() + static_cast<size_t>(lane) * warp->local_stride + addr;
  }
  uint8_t* param(uint64_t addr, uint32_t n, int lane) {
    check_alignment(addr, n, lane);
    const std::string& p = launch->params;
    if (addr + n > p.size() || addr + n < addr) space_fault("kernel parameter", addr, n, p.size(), lane);
    return reinterpret_cast<uint8_t*>(const_cast<char*>(p.data())) + addr;
  }
  uint8_t* generic(uint64_t addr, uint32_t n, int lane) {
    if (addr - kSharedWindow < kWindowSize) return shared(addr - kSharedWindow, n, lane);
    if (addr - kLocalWindow < kWindowSize) return local(addr - kLocalWindow, n, lane);
    if (addr - kParamWindow < kWindowSize) return param(addr - kParamWindow, n, lane);
    return global(addr, n, lane);
  }
  // Local memory of this thread's current frame starts here (frame-relative symbols).
  uint64_t frame_local_base() const { return static_cast<uint64_t>(depth) * launch->prog.local_frame_bytes; }

  uint8_t* global_slow(uint64_t addr, uint32_t n, int lane);
  // A .shared::cluster address of some block of the cluster (emu_types.h, kClusterRankShift).
  uint8_t* cluster_shared(uint64_t addr, uint32_t n, int lane);
  [[noreturn]] void space_fault(const char* space, uint64_t addr, uint32_t n, uint64_t size, int lane);
  void check_alignment(uint64_t addr, uint32_t n, int lane) {
    if ((n & (n - 1)) == 0 && (addr & (n - 1)) != 0) misaligned(addr, n, lane);
  }
  [[noreturn]] void misaligned(uint64_t addr, uint32_t n, int lane);
};

// ---------------------------------------------------------------- lane loops

template <class F>
inline void for_lanes(LaneMask m, F&& f) {
  if (m == kFullMask) {
    for (int l = 0; l < kWarpSize; ++l) f(l);
  } else {
    while (m) {
      int l = __builtin_ctz(m);
      m &= m - 1;
      f(l);
    }
  }
}

inline LaneMask predicate_mask(const uint64_t* p) {
  LaneMask r = 0;
  for (int l = 0; l < kWarpSize; ++l) r |= static_cast<LaneMask>(p[l] != 0) << l;
  return r;
}

// ---------------------------------------------------------------- typed register access

template <class T>
inline T get(uint64_t raw) {
  if constexpr (std::is_same_v<T, float>) {
    float f;
    uint32_t b = static_cast<uint32_t>(raw);
    std::memcpy(&f, &b, 4);
    return f;
  } else if constexpr (std::is_same_v<T, double>) {
    double d;
    std::memcpy(&d, &raw, 8);
    return d;
  } else {
    return static_cast<T>(raw);
  }
}

template <class T>
inline uint64_t put(T v) {
  if constexpr (std::is_same_v<T, float>) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    return b;
  } else if constexpr (std::is_same_v<T, double>) {
    uint64_t b;
    std::memcpy(&b, &v, 8);
    return b;
  } else if constexpr (std::is_same_v<T, bool>) {
    return v ? 1 : 0;
  } else if constexpr (std::is_signed_v<T>) {
    return static_cast<uint64_t>(static_cast<int64_t>(v));
  } else {
    return static_cast<uint64_t>(v);
  }
}

// Value of `raw` as an element of `bytes` bytes, sign- or zero-extended to 64 bits.
inline uint64_t extend(uint64_t raw, unsigned bytes, bool sign) {
  if (bytes >= 8) return raw;
  unsigned shift = 64 - 8 * bytes;
  return sign ? static_cast<uint64_t>(static_cast<int64_t>(raw << shift) >> shift) : (raw << shift) >> shift;
}

}  // namespace tally::emu
