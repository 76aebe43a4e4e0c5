// The device heap: what kernels' `malloc`/`free` allocate from (CUDA's
// cudaLimitMallocHeapSize heap), one per job.
//
// The heap is one ordinary allocation of DeviceMemory, so a pointer malloc
// returns passes the same bounds checks as any device memory, and the heap's
// bytes are counted (and freed) as one allocation. Which parts of it are in use
// is kept here, on the host, not in the heap itself: a kernel that overruns its
// block corrupts its own data, never the allocator.
//
// Blocks of a launch run on several workers at once and several launches may
// run at once, so every call takes the heap's lock. malloc returns 0 when no
// free range is large enough, as CUDA's does; blocks are 16-byte aligned.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace tally::emu {

class DeviceMemory;

class DeviceHeap {
 public:
  static constexpr uint64_t kAlignment = 16;

  // Allocates `nbytes` (0: an empty heap whose malloc always returns 0) from memory.
  DeviceHeap(std::shared_ptr<DeviceMemory> memory, uint64_t nbytes);
  ~DeviceHeap();
  DeviceHeap(const DeviceHeap&) = delete;
  DeviceHeap& operator=(const DeviceHeap&) = delete;

  // A device address of at least n free bytes, or 0 (none left, or n == 0).
  uint64_t malloc(uint64_t n);
  // Frees what malloc returned at `addr`; false if addr is not such a block (0 is a no-op: true).
  bool free(uint64_t addr);

  uint64_t base() const { return base_; }
  uint64_t size() const { return size_; }
  uint64_t used() const;          // bytes in live blocks (rounded to the alignment)
  size_t live_blocks() const;

 private:
  std::shared_ptr<DeviceMemory> memory_;
  uint64_t base_ = 0;
  uint64_t size_ = 0;
  mutable std::mutex lock_;
  std::map<uint64_t, uint64_t> free_;              // offset -> length, coalesced
  std::unordered_map<uint64_t, uint64_t> live_;    // offset -> length
  uint64_t used_ = 0;
};

}  // namespace tally::emu
