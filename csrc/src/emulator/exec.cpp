// Slow paths of state-space access: allocation lookup and fault messages.
#include "emulator/exec.h"

#include <cstdio>

namespace tally::emu {

void fault(int code, const std::string& message, int lane) { throw Fault{code, message, lane}; }

std::string hex(uint64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

uint8_t* Exec::global_slow(uint64_t addr, uint32_t n, int lane) {
  DeviceMemory::Range r;
  if (!launch->mem.find(addr, r, true)) {
    std::string where = "no live allocation there";
    if (addr - kSharedWindow < 3 * kWindowSize) where = "a generic shared/local/param window address used as global";
    fault(kIllegalAddress, "illegal address " + hex(addr) + " (" + std::to_string(n) + "-byte global access: " +
                               where + ")", lane);
  }
  if (addr + n > r.end) {
    fault(kIllegalAddress, "illegal address " + hex(addr) + " (" + std::to_string(n) +
                               "-byte global access runs past the end of the allocation [" + hex(r.base) + ", " +
                               hex(r.end) + "))", lane);
  }
  launch->cache_base = r.base;
  launch->cache_end = r.end;
  launch->cache_host = r.host;
  return r.host + (addr - r.base);
}

void Exec::space_fault(const char* space, uint64_t addr, uint32_t n, uint64_t size, int lane) {
  fault(kIllegalAddress, std::string("illegal address ") + hex(addr) + " in the " + space + " space (" +
                             std::to_string(n) + "-byte access; the space holds " + std::to_string(size) + " bytes)",
        lane);
}

void Exec::misaligned(uint64_t addr, uint32_t n, int lane) {
  fault(kMisalignedAddress, "misaligned address " + hex(addr) + " for a " + std::to_string(n) + "-byte access", lane);
}

}  // namespace tally::emu
