#include "emulator/device_heap.h"

#include <iterator>

#include "emulator/memory.h"

namespace tally::emu {

namespace {
uint64_t round_up(uint64_t n) { return (n + DeviceHeap::kAlignment - 1) / DeviceHeap::kAlignment * DeviceHeap::kAlignment; }
}  // namespace

DeviceHeap::DeviceHeap(std::shared_ptr<DeviceMemory> memory, uint64_t nbytes)
    : memory_(std::move(memory)), size_(nbytes / kAlignment * kAlignment) {
  if (size_ == 0) return;
  base_ = memory_->allocate(size_);
  free_.emplace(0, size_);
}

DeviceHeap::~DeviceHeap() {
  if (base_ != 0) memory_->release(base_);
}

// First fit in address order: the lowest free range that holds the block, so
// blocks freed together coalesce back into one range.
uint64_t DeviceHeap::malloc(uint64_t n) {
  if (n == 0 || n > size_) return 0;
  const uint64_t want = round_up(n);
  std::lock_guard<std::mutex> guard(lock_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < want) continue;
    const uint64_t offset = it->first, length = it->second;
    free_.erase(it);
    if (length > want) free_.emplace(offset + want, length - want);
    live_.emplace(offset, want);
    used_ += want;
    return base_ + offset;
  }
  return 0;
}

bool DeviceHeap::free(uint64_t addr) {
  if (addr == 0) return true;
  if (addr < base_ || addr >= base_ + size_) return false;
  std::lock_guard<std::mutex> guard(lock_);
  auto live = live_.find(addr - base_);
  if (live == live_.end()) return false;
  uint64_t offset = live->first, length = live->second;
  live_.erase(live);
  used_ -= length;
  auto next = free_.lower_bound(offset);
  if (next != free_.end() && offset + length == next->first) {
    length += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == offset) {
      prev->second += length;
      return true;
    }
  }
  free_.emplace(offset, length);
  return true;
}

uint64_t DeviceHeap::used() const {
  std::lock_guard<std::mutex> guard(lock_);
  return used_;
}

size_t DeviceHeap::live_blocks() const {
  std::lock_guard<std::mutex> guard(lock_);
  return live_.size();
}

}  // namespace tally::emu
