#include "emulator/memory.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "emulator/emu_types.h"

namespace tally::emu {

namespace {

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

}  // namespace

DeviceMemory::DeviceMemory(uint64_t capacity_bytes) : capacity_(capacity_bytes), cursor_(kGlobalBase) {}

DeviceMemory::~DeviceMemory() {
  for (auto& [base, a] : allocations_) std::free(a.host);
  for (uint8_t* p : graveyard_) std::free(p);
}

size_t DeviceMemory::allocation_count() const {
  std::shared_lock guard(lock_);
  return allocations_.size();
}

bool DeviceMemory::place(uint64_t nbytes, uint64_t alignment, uint64_t from, uint64_t limit,
                         uint64_t& out) const {
  uint64_t candidate = align_up(from, alignment);
  auto it = allocations_.upper_bound(candidate);
  if (it != allocations_.begin()) {
    auto prev = std::prev(it);
    uint64_t prev_end = prev->first + prev->second.reserved;
    if (prev_end > candidate) candidate = align_up(prev_end, alignment);
  }
  for (;;) {
    if (candidate + nbytes > limit || candidate + nbytes < candidate) return false;
    it = allocations_.lower_bound(candidate);
    if (it == allocations_.end() || it->first >= candidate + nbytes + kGuardBytes) {
      out = candidate;
      return true;
    }
    candidate = align_up(it->first + it->second.reserved, alignment);
  }
}

uint64_t DeviceMemory::allocate(uint64_t nbytes, uint64_t alignment) {
  if (nbytes == 0) throw MemoryError(kInvalidValue, "cannot allocate 0 bytes");
  if (alignment < kAlignment) alignment = kAlignment;
  if (alignment & (alignment - 1)) throw MemoryError(kInvalidValue, "alignment must be a power of two");
  uint64_t rounded = align_up(nbytes, kAlignment);
  std::unique_lock guard(lock_);
  if (used_.load() + rounded > capacity_ || rounded < nbytes) {
    throw MemoryError(kOutOfMemory, "out of device memory: " + std::to_string(nbytes) + " bytes requested, " +
                                        std::to_string(capacity_ - used_.load()) + " of " +
                                        std::to_string(capacity_) + " free");
  }
  // Next fit: addresses are reused only after the window wraps, so a stale
  // pointer to freed memory keeps faulting for a long time.
  uint64_t limit = kGlobalBase + kGlobalWindow;
  uint64_t base = 0;
  if (!place(rounded, alignment, cursor_, limit, base) && !place(rounded, alignment, kGlobalBase, limit, base)) {
    throw MemoryError(kOutOfMemory, "device address space exhausted (too fragmented for " +
                                        std::to_string(nbytes) + " bytes)");
  }
  auto* host = static_cast<uint8_t*>(std::calloc(1, rounded));
  if (host == nullptr) throw MemoryError(kOutOfMemory, "host memory exhausted backing " + std::to_string(nbytes) + " bytes");
  allocations_.emplace(base, Allocation{nbytes, rounded + kGuardBytes, host});
  used_ += rounded;
  cursor_ = base + rounded + kGuardBytes;
  return base;
}

void DeviceMemory::release(uint64_t ptr) {
  uint8_t* host = nullptr;
  {
    std::unique_lock guard(lock_);
    auto it = allocations_.find(ptr);
    if (it == allocations_.end()) {
      throw MemoryError(kInvalidValue, hex(ptr) + " is not the start of a live allocation");
    }
    host = it->second.host;
    used_ -= it->second.reserved - kGuardBytes;
    allocations_.erase(it);
  }
  std::lock_guard g(graveyard_lock_);
  if (users_.load() > 0) {
    graveyard_.push_back(host);
  } else {
    std::free(host);
  }
}

void DeviceMemory::end_use() {
  if (users_.fetch_sub(1) != 1) return;
  std::lock_guard g(graveyard_lock_);
  if (users_.load() != 0) return;
  for (uint8_t* p : graveyard_) std::free(p);
  graveyard_.clear();
}

bool DeviceMemory::find(uint64_t addr, Range& out) const {
  std::shared_lock guard(lock_);
  auto it = allocations_.upper_bound(addr);
  if (it == allocations_.begin()) return false;
  --it;
  if (addr >= it->first + it->second.size) return false;
  out.base = it->first;
  out.end = it->first + it->second.size;
  out.host = it->second.host;
  return true;
}

uint8_t* DeviceMemory::checked(uint64_t addr, uint64_t n, const char* what) const {
  Range r;
  if (!find(addr, r) || addr + n > r.end || addr + n < addr) {
    throw MemoryError(kInvalidValue, std::string(what) + ": [" + hex(addr) + ", " + hex(addr + n) +
                                         ") is not inside one live device allocation");
  }
  return r.host + (addr - r.base);
}

void DeviceMemory::write(uint64_t dst, const void* src, uint64_t n) {
  if (n == 0) return;
  std::memcpy(checked(dst, n, "host-to-device copy"), src, n);
}

void DeviceMemory::read(void* dst, uint64_t src, uint64_t n) const {
  if (n == 0) return;
  std::memcpy(dst, checked(src, n, "device-to-host copy"), n);
}

void DeviceMemory::copy(uint64_t dst, uint64_t src, uint64_t n) {
  if (n == 0) return;
  uint8_t* d = checked(dst, n, "device-to-device copy destination");
  const uint8_t* s = checked(src, n, "device-to-device copy source");
  std::memmove(d, s, n);
}

void DeviceMemory::fill(uint64_t dst, uint32_t value, unsigned element_size, uint64_t count) {
  if (element_size != 1 && element_size != 2 && element_size != 4) {
    throw MemoryError(kInvalidValue, "memset element size must be 1, 2 or 4 bytes, not " + std::to_string(element_size));
  }
  if (count == 0) return;
  uint8_t* d = checked(dst, count * element_size, "memset");
  if (element_size == 1) {
    std::memset(d, static_cast<int>(value & 0xff), count);
  } else if (element_size == 2) {
    auto v = static_cast<uint16_t>(value);
    for (uint64_t i = 0; i < count; ++i) std::memcpy(d + 2 * i, &v, 2);
  } else {
    for (uint64_t i = 0; i < count; ++i) std::memcpy(d + 4 * i, &value, 4);
  }
}

}  // namespace tally::emu
