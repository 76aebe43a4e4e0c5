// Device memory of the emulator: allocations with device-like addresses, each
// backed by host memory that is zero-filled lazily by the OS (calloc), so a
// large allocation costs only what a kernel touches.
//
// Kernels, copies and memsets of several streams run at the same time on their
// own threads and hold raw pointers into allocations. A free while any of them
// is running only unmaps the address range; the backing store is released once
// no user is left (`Use`), so a racing kernel can never touch freed host memory.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace tally::emu {

// A failed memory call; `code` is the CUresult to report.
struct MemoryError : std::runtime_error {
  MemoryError(int code, const std::string& message) : std::runtime_error(message), code(code) {}
  int code;
};

class DeviceMemory {
 public:
  static constexpr uint64_t kAlignment = 256;
  // Unmapped bytes after every allocation, so small overruns hit no neighbour.
  static constexpr uint64_t kGuardBytes = 256;

  explicit DeviceMemory(uint64_t capacity_bytes);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;

  uint64_t allocate(uint64_t nbytes, uint64_t alignment = kAlignment);
  void release(uint64_t ptr);
  uint64_t used() const { return used_.load(); }
  uint64_t capacity() const { return capacity_; }
  size_t allocation_count() const;

  struct Range {
    uint64_t base = 0;
    uint64_t end = 0;
    uint8_t* host = nullptr;
  };
  // The live allocation containing `addr`; false if none.
  bool find(uint64_t addr, Range& out) const;

  // Host pointer of [addr, addr + n) if it lies inside one live allocation,
  // else MemoryError(CUDA_ERROR_INVALID_VALUE) naming `what`. Only valid while a
  // Use is held.
  uint8_t* checked(uint64_t addr, uint64_t n, const char* what) const;

  // Host-side transfers (validate, then copy); call with a Use held.
  void write(uint64_t dst, const void* src, uint64_t n);
  void read(void* dst, uint64_t src, uint64_t n) const;
  void copy(uint64_t dst, uint64_t src, uint64_t n);
  void fill(uint64_t dst, uint32_t value, unsigned element_size, uint64_t count);

  // Held by anything that dereferences host pointers of allocations.
  class Use {
   public:
    explicit Use(DeviceMemory& m) : m_(m) { m_.users_.fetch_add(1); }
    ~Use() { m_.end_use(); }
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;

   private:
    DeviceMemory& m_;
  };

 private:
  struct Allocation {
    uint64_t size;      // bytes asked for (bounds checks use this)
    uint64_t reserved;  // address space taken, guard included
    uint8_t* host;
  };
  bool place(uint64_t nbytes, uint64_t alignment, uint64_t from, uint64_t limit, uint64_t& out) const;
  void end_use();

  const uint64_t capacity_;
  std::atomic<uint64_t> used_{0};
  mutable std::shared_mutex lock_;
  std::map<uint64_t, Allocation> allocations_;
  uint64_t cursor_;
  std::atomic<int> users_{0};
  std::mutex graveyard_lock_;
  std::vector<uint8_t*> graveyard_;
};

}  // namespace tally::emu
