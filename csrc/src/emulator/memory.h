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
#include <functional>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <utility>
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
  // An allocation at exactly `addr` (a suspended job's memory coming back where its
  // pointers point): kAlreadyMapped if [addr, addr + nbytes) or its guard is taken,
  // kOutOfMemory if the capacity is used up. Lazily zeroed, like allocate().
  void allocate_at(uint64_t addr, uint64_t nbytes);
  void release(uint64_t ptr);
  uint64_t used() const { return used_.load(); }
  uint64_t capacity() const { return capacity_; }
  size_t allocation_count() const;

  struct Range {
    uint64_t base = 0;
    uint64_t end = 0;
    uint8_t* host = nullptr;
  };
  // The live allocation containing `addr`; false if none. With `whole_granules` (a
  // kernel's access) an allocation's range runs to the end of its last 256-byte granule.
  bool find(uint64_t addr, Range& out, bool whole_granules = false) const;

  // Host pointer of [addr, addr + n) if it lies inside one live allocation,
  // else MemoryError(CUDA_ERROR_INVALID_VALUE) naming `what`. Only valid while a
  // Use is held.
  uint8_t* checked(uint64_t addr, uint64_t n, const char* what) const;

  // Host-side transfers (validate, then copy); call with a Use held.
  void write(uint64_t dst, const void* src, uint64_t n);
  void read(void* dst, uint64_t src, uint64_t n) const;
  void copy(uint64_t dst, uint64_t src, uint64_t n);
  void fill(uint64_t dst, uint32_t value, unsigned element_size, uint64_t count);

  // Virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap, ...).
  // A reservation is a range of device addresses backed by host address space
  // reserved without access; physical memory (a memfd, counted against capacity)
  // is mapped into it, and becomes usable once set_access enables it. Only
  // accessible mapped bytes are device memory to find/checked and to kernels.
  // At `hint` when that range is free, aligned and in the window (CUDA's address hint), else anywhere.
  uint64_t reserve(uint64_t nbytes, uint64_t alignment, uint64_t hint = 0);
  // A reservation at exactly `addr` (a migrated job's, whose pointers name it):
  // kAlreadyMapped if [addr, addr + nbytes) or its guard is taken.
  void reserve_at(uint64_t addr, uint64_t nbytes);
  void unreserve(uint64_t base);  // what is still mapped is unmapped
  uint64_t create_physical(uint64_t nbytes);
  void release_physical(uint64_t handle);  // its memory lives on while mapped
  // The bytes of physical memory, mapped or not (suspending a job saves them).
  void read_physical(uint64_t handle, uint64_t offset, void* dst, uint64_t n) const;
  void write_physical(uint64_t handle, uint64_t offset, const void* src, uint64_t n);
  void map(uint64_t addr, uint64_t nbytes, uint64_t offset, uint64_t handle);
  void unmap(uint64_t addr, uint64_t nbytes);  // whole mappings only
  void set_access(uint64_t addr, uint64_t nbytes, bool accessible);

  // Managed memory (cuMemAllocManaged): the job maps a shared-memory object `fd` at
  // host address `addr` in its own process, and the device sees the same bytes at
  // the same address, so one pointer serves the job's CPU code and its kernels. The
  // bytes count against capacity unless `charge` is false (pinned host memory a kernel
  // may read at its host address). kAlreadyMapped if [addr, addr + nbytes) is taken
  // by another allocation or lies in a window of the generic address space (the job
  // then maps the object elsewhere and asks again). release() unmaps it.
  void adopt_shared(uint64_t addr, uint64_t nbytes, int fd, bool charge = true);

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
  struct Mapping {
    uint64_t size;
    bool accessible;
  };
  struct Allocation {
    uint64_t size = 0;      // bytes asked for (bounds checks use this)
    uint64_t reserved = 0;  // address space taken, guard included (shared ones have none)
    uint8_t* host = nullptr;
    bool reservation = false;              // VMM: host is an mmap, usable only where mapped
    bool shared = false;                   // managed: host is an mmap of the job's object
    bool charged = true;                   // counted in used_
    std::map<uint64_t, Mapping> mappings;  // reservation offset -> mapping
  };
  struct Physical {
    int fd;
    uint64_t size;
  };
  bool place(uint64_t nbytes, uint64_t alignment, uint64_t from, uint64_t limit, uint64_t& out) const;
  void check_free_at(uint64_t addr, uint64_t reserved) const;
  uint64_t take_address(uint64_t nbytes, uint64_t alignment);
  // Host address space for a reservation of nbytes, then, under the lock, its device
  // address from `address_of` (which may throw: the host space goes back), recorded.
  uint64_t reserve_placed(uint64_t nbytes, const std::function<uint64_t()>& address_of);
  Allocation& reservation_of(uint64_t addr, uint64_t nbytes, uint64_t* base);
  static std::pair<std::map<uint64_t, Mapping>::iterator, std::map<uint64_t, Mapping>::iterator> whole_mappings(
      Allocation& a, uint64_t at, uint64_t nbytes, uint64_t addr);
  void retire_mapping(uint8_t* host, uint64_t nbytes);
  void dispose(uint8_t* host, uint64_t nbytes, bool mapped);
  void end_use();

  const uint64_t capacity_;
  std::atomic<uint64_t> used_{0};
  mutable std::shared_mutex lock_;
  std::map<uint64_t, Allocation> allocations_;
  uint64_t cursor_;
  std::atomic<int> users_{0};
  std::mutex graveyard_lock_;
  std::vector<uint8_t*> graveyard_;
  std::vector<std::pair<uint8_t*, uint64_t>> graveyard_maps_;  // reservations to munmap
  std::map<uint64_t, Physical> physical_;
  uint64_t next_physical_ = 1;
};

}  // namespace tally::emu
