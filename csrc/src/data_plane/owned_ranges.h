// The job's device allocations as the data plane sees them: a copy of the
// table tally/server/client/memory.py keeps (Allocations), updated by it on
// every allocation and free, so a memset or copy can be checked without
// Python. Only allocations: an address found nowhere here (a module global,
// mapped virtual memory, an IPC allocation the job opened) sends the request
// to Python, whose check knows them all.
#pragma once
#include <cstdint>
#include <iterator>
#include <map>

namespace tally::data_plane {

class OwnedRanges {
 public:
  void add(uint64_t base, uint64_t size) { ranges_[base] = size; }
  void remove(uint64_t base) { ranges_.erase(base); }
  void clear() { ranges_.clear(); }
  size_t size() const { return ranges_.size(); }

  // [ptr, ptr + nbytes) lies inside one allocation (the rule of Allocations.check_range:
  // the allocation containing ptr, an empty one counting as one byte long).
  bool contains(uint64_t ptr, uint64_t nbytes) const {
    auto it = ranges_.upper_bound(ptr);
    if (it == ranges_.begin()) return false;
    it = std::prev(it);
    const uint64_t base = it->first, size = it->second;
    const uint64_t span = size ? size : 1;
    if (ptr - base >= span) return false;
    return nbytes <= size && ptr - base <= size - nbytes;
  }

 private:
  std::map<uint64_t, uint64_t> ranges_;
};

}  // namespace tally::data_plane
