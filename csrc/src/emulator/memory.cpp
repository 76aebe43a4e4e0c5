#include "emulator/memory.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <sys/mman.h>
#include <unistd.h>

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
  for (auto& [base, a] : allocations_) {
    if (a.reservation) {
      munmap(a.host, a.size);
    } else if (a.shared) {
      munmap(a.host, a.reserved);
    } else {
      std::free(a.host);
    }
  }
  for (uint8_t* p : graveyard_) std::free(p);
  for (auto& [p, n] : graveyard_maps_) munmap(p, n);
  for (auto& [handle, physical] : physical_) close(physical.fd);
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
  uint64_t base = take_address(rounded, alignment);
  auto* host = static_cast<uint8_t*>(std::calloc(1, rounded));
  if (host == nullptr) throw MemoryError(kOutOfMemory, "host memory exhausted backing " + std::to_string(nbytes) + " bytes");
  Allocation a;
  a.size = nbytes, a.reserved = rounded + kGuardBytes, a.host = host;
  allocations_.emplace(base, std::move(a));
  used_ += rounded;
  return base;
}

void DeviceMemory::allocate_at(uint64_t addr, uint64_t nbytes) {
  if (nbytes == 0) throw MemoryError(kInvalidValue, "cannot allocate 0 bytes");
  const uint64_t rounded = align_up(nbytes, kAlignment);
  if (addr % kAlignment != 0 || addr < kGlobalBase || addr + rounded + kGuardBytes > kGlobalBase + kGlobalWindow) {
    throw MemoryError(kInvalidValue, hex(addr) + " is not an address the emulator allocates at");
  }
  std::unique_lock guard(lock_);
  if (used_.load() + rounded > capacity_) {
    throw MemoryError(kOutOfMemory, "out of device memory: " + std::to_string(nbytes) + " bytes requested, " +
                                        std::to_string(capacity_ - used_.load()) + " of " +
                                        std::to_string(capacity_) + " free");
  }
  check_free_at(addr, rounded + kGuardBytes);
  auto* host = static_cast<uint8_t*>(std::calloc(1, rounded));
  if (host == nullptr) throw MemoryError(kOutOfMemory, "host memory exhausted backing " + std::to_string(nbytes) + " bytes");
  Allocation a;
  a.size = nbytes, a.reserved = rounded + kGuardBytes, a.host = host;
  allocations_.emplace(addr, std::move(a));
  used_ += rounded;
}

// Call with lock_ held.
void DeviceMemory::check_free_at(uint64_t addr, uint64_t reserved) const {
  auto next = allocations_.lower_bound(addr);
  bool taken = next != allocations_.end() && next->first < addr + reserved;
  if (next != allocations_.begin()) taken |= std::prev(next)->first + std::prev(next)->second.reserved > addr;
  if (taken) {
    throw MemoryError(kAlreadyMapped, "device addresses [" + hex(addr) + ", " + hex(addr + reserved) + ") are taken");
  }
}

// Next fit: addresses are reused only after the window wraps, so a stale pointer
// to freed memory keeps faulting for a long time. Call with lock_ held.
uint64_t DeviceMemory::take_address(uint64_t nbytes, uint64_t alignment) {
  uint64_t limit = kGlobalBase + kGlobalWindow;
  uint64_t base = 0;
  if (!place(nbytes, alignment, cursor_, limit, base) && !place(nbytes, alignment, kGlobalBase, limit, base)) {
    throw MemoryError(kOutOfMemory, "device address space exhausted (too fragmented for " +
                                        std::to_string(nbytes) + " bytes)");
  }
  cursor_ = base + nbytes + kGuardBytes;
  return base;
}

void DeviceMemory::release(uint64_t ptr) {
  uint8_t* host = nullptr;
  uint64_t bytes = 0;
  bool mapped = false;
  {
    std::unique_lock guard(lock_);
    auto it = allocations_.find(ptr);
    if (it == allocations_.end() || it->second.reservation) {
      throw MemoryError(kInvalidValue, hex(ptr) + " is not the start of a live allocation");
    }
    host = it->second.host;
    mapped = it->second.shared;
    bytes = it->second.reserved - (mapped ? 0 : kGuardBytes);
    if (it->second.charged) used_ -= bytes;
    allocations_.erase(it);
  }
  dispose(host, bytes, mapped);
}

// Frees an allocation's host memory now, or once no kernel or copy may still use it.
void DeviceMemory::dispose(uint8_t* host, uint64_t nbytes, bool mapped) {
  std::lock_guard g(graveyard_lock_);
  if (users_.load() > 0) {
    if (mapped) {
      graveyard_maps_.emplace_back(host, nbytes);
    } else {
      graveyard_.push_back(host);
    }
  } else if (mapped) {
    munmap(host, nbytes);
  } else {
    std::free(host);
  }
}

void DeviceMemory::adopt_shared(uint64_t addr, uint64_t nbytes, int fd, bool charge) {
  if (nbytes == 0) throw MemoryError(kInvalidValue, "cannot allocate 0 bytes of managed memory");
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  const uint64_t mapped = align_up(nbytes, page);
  if (addr == 0 || addr % page != 0 || mapped < nbytes || addr + mapped < addr) {
    throw MemoryError(kInvalidValue, "managed memory at " + hex(addr) + " (" + std::to_string(nbytes) +
                                         " bytes) is not a page-aligned range of the address space");
  }
  const uint64_t windows_end = kCodeWindow + kWindowSize;  // shared, local, param and code windows
  if (addr < windows_end && addr + mapped > kSharedWindow) {
    throw MemoryError(kAlreadyMapped, "[" + hex(addr) + ", " + hex(addr + mapped) +
                                          ") overlaps the generic address windows of shared, local and parameter memory");
  }
  std::unique_lock guard(lock_);
  if (charge && used_.load() + mapped > capacity_) {
    throw MemoryError(kOutOfMemory, "out of device memory: " + std::to_string(nbytes) + " bytes requested, " +
                                        std::to_string(capacity_ - used_.load()) + " of " +
                                        std::to_string(capacity_) + " free");
  }
  // No guard bytes after it: the job chose the address, and its mappings often abut.
  auto next = allocations_.lower_bound(addr);
  bool taken = next != allocations_.end() && next->first < addr + mapped;
  if (next != allocations_.begin()) taken |= std::prev(next)->first + std::prev(next)->second.reserved > addr;
  if (taken) throw MemoryError(kAlreadyMapped, "device addresses [" + hex(addr) + ", " + hex(addr + mapped) + ") are taken");
  void* host = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (host == MAP_FAILED) {
    throw MemoryError(kOutOfMemory, "cannot map " + std::to_string(mapped) + " bytes of managed memory: " +
                                        std::strerror(errno));
  }
  Allocation a;
  a.size = nbytes, a.reserved = mapped, a.host = static_cast<uint8_t*>(host), a.shared = true;
  a.charged = charge;
  allocations_.emplace(addr, std::move(a));
  if (charge) used_ += mapped;
}

void DeviceMemory::end_use() {
  if (users_.fetch_sub(1) != 1) return;
  std::lock_guard g(graveyard_lock_);
  if (users_.load() != 0) return;
  for (uint8_t* p : graveyard_) std::free(p);
  graveyard_.clear();
  for (auto& [p, n] : graveyard_maps_) munmap(p, n);
  graveyard_maps_.clear();
}

bool DeviceMemory::find(uint64_t addr, Range& out, bool whole_granules) const {
  std::shared_lock guard(lock_);
  auto it = allocations_.upper_bound(addr);
  if (it == allocations_.begin()) return false;
  --it;
  const Allocation& a = it->second;
  // A kernel may touch the rest of an allocation's 256-byte granule (backed, and never
  // another allocation's), as a GPU lets it: programs that read a few elements past
  // the end of a small array run there without a fault. Past the granule it faults;
  // copies and memsets the job asks for keep to the size it allocated.
  const bool granule = whole_granules && !a.reservation && !a.shared;
  const uint64_t granule_end = it->first + (granule ? align_up(a.size, kAlignment) : a.size);
  if (addr >= granule_end) return false;
  if (!a.reservation) {
    out.base = it->first;
    out.end = granule_end;
    out.host = a.host;
    return true;
  }
  // A reservation: the accessible mapping holding addr, joined with the accessible
  // mappings right after it (a copy may span several).
  const uint64_t offset = addr - it->first;
  auto m = a.mappings.upper_bound(offset);
  if (m == a.mappings.begin()) return false;
  --m;
  if (offset >= m->first + m->second.size || !m->second.accessible) return false;
  uint64_t end = m->first + m->second.size;
  for (auto next = std::next(m); next != a.mappings.end() && next->first == end && next->second.accessible; ++next)
    end += next->second.size;
  out.base = it->first + m->first;
  out.end = it->first + end;
  out.host = a.host + m->first;
  return true;
}

uint64_t DeviceMemory::reserve(uint64_t nbytes, uint64_t alignment, uint64_t hint) {
  if (nbytes == 0) throw MemoryError(kInvalidValue, "cannot reserve 0 bytes");
  if (alignment < kAlignment) alignment = kAlignment;
  if (alignment & (alignment - 1)) throw MemoryError(kInvalidValue, "alignment must be a power of two");
  return reserve_placed(nbytes, [&] {
    uint64_t base = 0;
    if (hint != 0 && hint % alignment == 0 && hint >= kGlobalBase &&
        place(nbytes, alignment, hint, kGlobalBase + kGlobalWindow, base) && base == hint)
      return base;
    return take_address(nbytes, alignment);
  });
}

void DeviceMemory::reserve_at(uint64_t addr, uint64_t nbytes) {
  if (nbytes == 0) throw MemoryError(kInvalidValue, "cannot reserve 0 bytes");
  if (addr % kAlignment != 0 || addr < kGlobalBase || addr + nbytes + kGuardBytes > kGlobalBase + kGlobalWindow) {
    throw MemoryError(kInvalidValue, hex(addr) + " is not an address the emulator reserves at");
  }
  reserve_placed(nbytes, [&] {
    check_free_at(addr, nbytes + kGuardBytes);
    return addr;
  });
}

uint64_t DeviceMemory::reserve_placed(uint64_t nbytes, const std::function<uint64_t()>& address_of) {
  void* host = mmap(nullptr, nbytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (host == MAP_FAILED) throw MemoryError(kOutOfMemory, "no host address space for a reservation of " + std::to_string(nbytes) + " bytes");
  std::unique_lock guard(lock_);
  uint64_t base = 0;
  try {
    base = address_of();
  } catch (...) {
    munmap(host, nbytes);
    throw;
  }
  Allocation a;
  a.size = nbytes, a.reserved = nbytes + kGuardBytes, a.host = static_cast<uint8_t*>(host), a.reservation = true;
  allocations_.emplace(base, std::move(a));
  return base;
}

void DeviceMemory::unreserve(uint64_t base) {
  std::pair<uint8_t*, uint64_t> region;
  {
    std::unique_lock guard(lock_);
    auto it = allocations_.find(base);
    if (it == allocations_.end() || !it->second.reservation) {
      throw MemoryError(kInvalidValue, hex(base) + " is not the start of a reserved address range");
    }
    region = {it->second.host, it->second.size};
    allocations_.erase(it);
  }
  dispose(region.first, region.second, true);
}

uint64_t DeviceMemory::create_physical(uint64_t nbytes) {
  if (nbytes == 0) throw MemoryError(kInvalidValue, "cannot create 0 bytes of physical memory");
  std::unique_lock guard(lock_);
  if (used_.load() + nbytes > capacity_) {
    throw MemoryError(kOutOfMemory, "out of device memory: " + std::to_string(nbytes) + " bytes requested, " +
                                        std::to_string(capacity_ - used_.load()) + " of " +
                                        std::to_string(capacity_) + " free");
  }
  int fd = memfd_create("tally-emulator-physical", MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(nbytes)) != 0) {
    if (fd >= 0) close(fd);
    throw MemoryError(kOutOfMemory, "host memory exhausted backing " + std::to_string(nbytes) + " bytes");
  }
  const uint64_t handle = next_physical_++;
  physical_.emplace(handle, Physical{fd, nbytes});
  used_ += nbytes;
  return handle;
}

void DeviceMemory::release_physical(uint64_t handle) {
  std::unique_lock guard(lock_);
  auto it = physical_.find(handle);
  if (it == physical_.end()) throw MemoryError(kInvalidValue, "unknown physical memory handle " + std::to_string(handle));
  close(it->second.fd);  // its pages live on in the mappings that still use them
  used_ -= it->second.size;
  physical_.erase(it);
}

void DeviceMemory::read_physical(uint64_t handle, uint64_t offset, void* dst, uint64_t n) const {
  std::shared_lock guard(lock_);
  auto it = physical_.find(handle);
  if (it == physical_.end()) throw MemoryError(kInvalidValue, "unknown physical memory handle " + std::to_string(handle));
  if (offset + n > it->second.size || offset + n < offset) {
    throw MemoryError(kInvalidValue, "bytes " + std::to_string(offset) + "+" + std::to_string(n) +
                                         " lie outside physical memory of " + std::to_string(it->second.size) + " bytes");
  }
  auto* out = static_cast<uint8_t*>(dst);
  for (uint64_t done = 0; done < n;) {
    ssize_t got = pread(it->second.fd, out + done, n - done, static_cast<off_t>(offset + done));
    if (got <= 0) throw MemoryError(kInvalidValue, std::string("reading physical memory failed: ") + std::strerror(errno));
    done += static_cast<uint64_t>(got);
  }
}

void DeviceMemory::write_physical(uint64_t handle, uint64_t offset, const void* src, uint64_t n) {
  std::shared_lock guard(lock_);
  auto it = physical_.find(handle);
  if (it == physical_.end()) throw MemoryError(kInvalidValue, "unknown physical memory handle " + std::to_string(handle));
  if (offset + n > it->second.size || offset + n < offset) {
    throw MemoryError(kInvalidValue, "bytes " + std::to_string(offset) + "+" + std::to_string(n) +
                                         " lie outside physical memory of " + std::to_string(it->second.size) + " bytes");
  }
  const auto* in = static_cast<const uint8_t*>(src);
  for (uint64_t done = 0; done < n;) {
    ssize_t put = pwrite(it->second.fd, in + done, n - done, static_cast<off_t>(offset + done));
    if (put <= 0) throw MemoryError(kInvalidValue, std::string("writing physical memory failed: ") + std::strerror(errno));
    done += static_cast<uint64_t>(put);
  }
}

DeviceMemory::Allocation& DeviceMemory::reservation_of(uint64_t addr, uint64_t nbytes, uint64_t* base) {
  auto it = allocations_.upper_bound(addr);
  if (it != allocations_.begin()) {
    --it;
    if (it->second.reservation && addr + nbytes >= addr && addr + nbytes <= it->first + it->second.size) {
      *base = it->first;
      return it->second;
    }
  }
  throw MemoryError(kInvalidValue, "[" + hex(addr) + ", " + hex(addr + nbytes) + ") is not inside one reserved address range");
}

// The mappings that exactly cover [at, at + nbytes) of a reservation.
std::pair<std::map<uint64_t, DeviceMemory::Mapping>::iterator, std::map<uint64_t, DeviceMemory::Mapping>::iterator>
DeviceMemory::whole_mappings(Allocation& a, uint64_t at, uint64_t nbytes, uint64_t addr) {
  auto first = a.mappings.find(at);
  uint64_t covered = at;
  auto last = first;
  while (last != a.mappings.end() && last->first == covered && covered < at + nbytes) covered += (last++)->second.size;
  if (first == a.mappings.end() || covered != at + nbytes) {
    throw MemoryError(kInvalidValue, "[" + hex(addr) + ", " + hex(addr + nbytes) + ") is not a run of whole mappings");
  }
  return {first, last};
}

void DeviceMemory::map(uint64_t addr, uint64_t nbytes, uint64_t offset, uint64_t handle) {
  if (nbytes == 0) throw MemoryError(kInvalidValue, "cannot map 0 bytes");
  std::unique_lock guard(lock_);
  uint64_t base = 0;
  Allocation& a = reservation_of(addr, nbytes, &base);
  auto ph = physical_.find(handle);
  if (ph == physical_.end()) throw MemoryError(kInvalidValue, "unknown physical memory handle " + std::to_string(handle));
  if (offset + nbytes > ph->second.size || offset + nbytes < offset) {
    throw MemoryError(kInvalidValue, "mapping " + std::to_string(nbytes) + " bytes at offset " + std::to_string(offset) +
                                         " of a physical allocation of " + std::to_string(ph->second.size));
  }
  const uint64_t at = addr - base;
  auto next = a.mappings.lower_bound(at);
  bool overlaps = next != a.mappings.end() && next->first < at + nbytes;
  if (next != a.mappings.begin()) overlaps |= std::prev(next)->first + std::prev(next)->second.size > at;
  if (overlaps) throw MemoryError(kInvalidValue, "[" + hex(addr) + ", " + hex(addr + nbytes) + ") is already mapped");
  if (mmap(a.host + at, nbytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, ph->second.fd,
           static_cast<off_t>(offset)) == MAP_FAILED) {
    throw MemoryError(kInvalidValue, "cannot map " + std::to_string(nbytes) + " bytes at offset " + std::to_string(offset) +
                                         " (page-aligned sizes and offsets only)");
  }
  a.mappings.emplace(at, Mapping{nbytes, false});
}

// Unmapped host pages become fresh private zero pages, not inaccessible ones: a
// kernel still running with a pointer into them must not crash the server. The
// device no longer sees them (find), and the reservation's munmap frees them.
void DeviceMemory::retire_mapping(uint8_t* host, uint64_t nbytes) {
  mmap(host, nbytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
}

void DeviceMemory::unmap(uint64_t addr, uint64_t nbytes) {
  std::unique_lock guard(lock_);
  uint64_t base = 0;
  Allocation& a = reservation_of(addr, nbytes, &base);
  const uint64_t at = addr - base;
  auto [first, last] = whole_mappings(a, at, nbytes, addr);
  retire_mapping(a.host + at, nbytes);
  a.mappings.erase(first, last);
}

void DeviceMemory::set_access(uint64_t addr, uint64_t nbytes, bool accessible) {
  std::unique_lock guard(lock_);
  uint64_t base = 0;
  Allocation& a = reservation_of(addr, nbytes, &base);
  const uint64_t at = addr - base;
  auto [first, last] = whole_mappings(a, at, nbytes, addr);
  for (auto m = first; m != last; ++m) m->second.accessible = accessible;
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
