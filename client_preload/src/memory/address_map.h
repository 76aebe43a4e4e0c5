// The client's own view of addresses, for the calls that must tell device memory
// from host memory without asking the server: unified-addressing cuMemcpy (which
// way does the copy go?), cuPointerGetAttribute(s), cuMemGetAddressRange, and
// whether a host buffer is pinned (shared with the server, copied in place).
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <shared_mutex>

namespace tally::client {

// Non-overlapping [start, start + size) ranges with a value each.
template <class Value>
class RangeMap {
 public:
  struct Found {
    uint64_t start;
    uint64_t size;
    Value value;
  };

  void add(uint64_t start, uint64_t size, const Value& value) {
    std::unique_lock lock(mutex_);
    ranges_[start] = Entry{size, value};
  }
  // Removes the range starting exactly at `start`; its entry if there was one.
  std::optional<Found> remove(uint64_t start) {
    std::unique_lock lock(mutex_);
    auto it = ranges_.find(start);
    if (it == ranges_.end()) return std::nullopt;
    Found found{start, it->second.size, it->second.value};
    ranges_.erase(it);
    return found;
  }
  // The range holding [address, address + nbytes), if one holds all of it.
  std::optional<Found> find(uint64_t address, uint64_t nbytes = 1) const {
    std::shared_lock lock(mutex_);
    auto it = ranges_.upper_bound(address);
    if (it == ranges_.begin()) return std::nullopt;
    --it;
    const uint64_t start = it->first, size = it->second.size;
    const uint64_t span = size == 0 ? 1 : size;
    if (address - start >= span || nbytes > span - (address - start)) return std::nullopt;
    return Found{start, size, it->second.value};
  }

 private:
  struct Entry {
    uint64_t size;
    Value value;
  };
  mutable std::shared_mutex mutex_;
  std::map<uint64_t, Entry> ranges_;
};

enum class DeviceRangeKind { kAllocation, kGlobal, kReservation, kImported, kManaged };

// Device memory this client allocated, whose module globals it resolved, or whose
// address range it reserved (virtual memory management), or another job's
// allocation it opened (IPC), or managed memory (also host memory at that address).
RangeMap<DeviceRangeKind>& device_ranges();

// The job's cuPointerSetAttribute(SYNC_MEMOPS, false) on the device range starting at
// `start` (pointer_attributes.cpp) goes with the range: every device_ranges().remove
// calls this, so a later allocation at the same address starts with the default.
void forget_pointer_settings(uint64_t start);

struct PinnedRegion {
  uint64_t region;     // the server's id
  unsigned flags;      // CU_MEMHOSTALLOC_* / CU_MEMHOSTREGISTER_*
  bool allocated;      // cuMemHostAlloc (we own the mapping) vs cuMemHostRegister
  uint64_t asked_address = 0;  // the range the job allocated or registered (the range
  uint64_t asked_bytes = 0;    // is whole pages around it): what cuMemGetAddressRange reports
};

// Host memory shared with the server (cuMemHostAlloc, cuMemAllocHost, cuMemHostRegister).
RangeMap<PinnedRegion>& pinned_ranges();

}  // namespace tally::client
