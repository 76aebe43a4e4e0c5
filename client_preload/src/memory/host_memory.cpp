// Pinned host memory, backed by POSIX shared memory the server maps too, so
// asynchronous copies to and from it are done in place, in stream order, with no
// staging copy (copies.cpp looks buffers up in pinned_ranges()).
//
// cuMemHostAlloc/cuMemAllocHost: a fresh shared-memory object (mode 0600,
//   /tally-pin-<pid>-<n>), mapped here and registered with the server, which
//   removes the name once it has mapped it (nothing is left in /dev/shm).
// cuMemHostRegister: the job's pages are moved into such an object: their bytes
//   are copied into it and it is mapped over them at the same addresses. Only
//   private anonymous memory (malloc, new, anonymous mmap) is moved; other memory
//   (file mappings, other shared memory) is registered for its flags only and is
//   copied through the arenas like pageable memory. A thread that writes the pages
//   while they move may lose that write: register before sharing a buffer.
// These pages are not inherited by fork()ed children (MADV_DONTFORK): sharing them
// would let a child write the parent's memory. A registered buffer that shares a
// page with other heap data takes that data along, so a forked child that touches
// it (without exec) faults; register page-aligned buffers where children fork.
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "memory/address_map.h"
#include "memory/host_memory.h"
#include "connection/connection.h"
#include "contexts/contexts.h"
#include "entry_points/entry_point.h"
#include "logging/log.h"
#include "memory/shared_objects.h"
#include "logging/trace.h"

namespace tally::client {
namespace {

constexpr unsigned kAllocFlags = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
constexpr unsigned kRegisterFlags = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                                    CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;

// Asks the server to map the object; its region id.
CUresult register_object(const std::string& name, const void* address, size_t bytes, unsigned flags,
                         uint64_t* region) {
  protocol::HostRegisterReplyMsg out{};
  protocol::HostRegisterMsg m{bytes, reinterpret_cast<uint64_t>(address), flags, 0};
  CUresult rc = request_reply(m, protocol::MessageKind::HostRegisterReply, &out,
                              name.data(), static_cast<uint32_t>(name.size()));
  if (rc != CUDA_SUCCESS) {
    shm_unlink(name.c_str());  // the server removes the name only once it opened the object
    return rc;
  }
  *region = out.region;
  return CUDA_SUCCESS;
}

CUresult host_alloc(void** pp, size_t bytes, unsigned flags) {
  if (pp == nullptr || bytes == 0 || (flags & ~kAllocFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  const size_t mapped = page_round(bytes);
  std::string name;
  void* p = map_new_shared_object(mapped, &name);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  uint64_t region = 0;
  if (CUresult rc = register_object(name, p, mapped, flags, &region); rc != CUDA_SUCCESS) {
    munmap(p, mapped);
    return rc;
  }
  pinned_ranges().add(reinterpret_cast<uint64_t>(p), mapped,
                      PinnedRegion{region, flags, true, reinterpret_cast<uint64_t>(p), bytes});
  *pp = p;
  return CUDA_SUCCESS;
}

// True when every page of [start, end) is private anonymous memory.
bool private_anonymous(uint64_t start, uint64_t end) {
  FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return false;
  char line[512];
  uint64_t covered = start;
  while (covered < end && std::fgets(line, sizeof line, maps) != nullptr) {
    unsigned long long lo = 0, hi = 0, offset = 0, inode = 0;
    char perms[8] = {}, dev[16] = {};
    int path_at = 0;
    if (std::sscanf(line, "%llx-%llx %7s %llx %15s %llu %n", &lo, &hi, perms, &offset, dev, &inode, &path_at) < 6)
      continue;
    if (hi <= covered || lo > covered) continue;
    std::string path = line + path_at;
    while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
    const bool anonymous = inode == 0 && (path.empty() || path == "[heap]");
    if (!anonymous || perms[3] != 'p' || perms[0] != 'r' || perms[1] != 'w') break;
    covered = hi;
  }
  std::fclose(maps);
  return covered >= end;
}

CUresult host_register(void* p, size_t bytes, unsigned flags) {
  if (p == nullptr || bytes == 0 || (flags & ~kRegisterFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  const uint64_t address = reinterpret_cast<uint64_t>(p);
  const uint64_t start = address & ~(page_size() - 1);
  const uint64_t end = (address + bytes + page_size() - 1) & ~(page_size() - 1);
  for (uint64_t page = start; page < end; page += page_size()) {
    if (pinned_ranges().find(page)) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  const size_t length = end - start;
  if (!private_anonymous(start, end)) {
    trace_line("cuMemHostRegister of %p: not private anonymous memory, copied through the arenas", p);
    pinned_ranges().add(start, length, PinnedRegion{0, flags, false, address, bytes});
    return CUDA_SUCCESS;
  }
  std::string name;
  int fd = create_shared_object(length, &name);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  // Fill the object with the pages' bytes, then put it where they are.
  void* staging = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (staging == MAP_FAILED) {
    close(fd);
    shm_unlink(name.c_str());
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  std::memcpy(staging, reinterpret_cast<void*>(start), length);
  void* placed = mmap(reinterpret_cast<void*>(start), length, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  munmap(staging, length);
  close(fd);
  if (placed == MAP_FAILED) {
    log_error("cannot share the pages of %p for cuMemHostRegister: %s", p, std::strerror(errno));
    shm_unlink(name.c_str());
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  madvise(placed, length, MADV_DONTFORK);
  uint64_t region = 0;
  if (CUresult rc = register_object(name, placed, length, flags, &region); rc != CUDA_SUCCESS) return rc;
  pinned_ranges().add(start, length, PinnedRegion{region, flags, false, address, bytes});
  return CUDA_SUCCESS;
}

CUresult unregister_region(uint64_t start, const PinnedRegion& region) {
  pinned_ranges().remove(start);
  if (region.region == 0) return CUDA_SUCCESS;
  return Connection::instance().request_done(protocol::HostUnregisterMsg{region.region});
}

}  // namespace
}  // namespace tally::client

using namespace tally::client;
namespace protocol = tally::protocol;

// Pinned host memory belongs to the current context (cuCtxDestroy frees it).
static CUresult host_alloc_in_context(void** pp, size_t bytesize, unsigned flags) {
  if (CUresult rc = check_current_context_for_new_resource(); rc != CUDA_SUCCESS) return rc;
  CUresult rc = host_alloc(pp, bytesize, flags);
  if (rc == CUDA_SUCCESS) note_context_resource(ContextResource::kHostMemory, reinterpret_cast<uint64_t>(*pp));
  return rc;
}

TALLY_ENTRY(cuMemHostAlloc_v2020)(void** pp, size_t bytesize, unsigned int Flags) {
  return host_alloc_in_context(pp, bytesize, Flags);
}
TALLY_ENTRY(cuMemAllocHost_v3020)(void** pp, size_t bytesize) { return host_alloc_in_context(pp, bytesize, 0); }

TALLY_ENTRY(cuMemFreeHost_v2000)(void* p) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  auto found = pinned_ranges().find(reinterpret_cast<uint64_t>(p));
  if (!found || !found->value.allocated || found->start != reinterpret_cast<uint64_t>(p))
    return CUDA_ERROR_INVALID_VALUE;
  forget_context_resource(ContextResource::kHostMemory, found->start);
  CUresult rc = unregister_region(found->start, found->value);
  munmap(p, found->size);
  return rc;
}

TALLY_ENTRY(cuMemHostRegister_v6050)(void* p, size_t bytesize, unsigned int Flags) {
  return host_register(p, bytesize, Flags);
}

TALLY_ENTRY(cuMemHostUnregister_v4000)(void* p) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  auto found = pinned_ranges().find(reinterpret_cast<uint64_t>(p));
  if (!found || found->value.allocated) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  // The pages stay shared with the (now unlinked) object: the job's bytes stay put.
  return unregister_region(found->start, found->value);
}

// Unified addressing: pinned memory has the same address on the device side. The
// server makes it reachable there where it can (backends/base.py: host_map); a
// buffer whose address the device already uses elsewhere can only be copied.
TALLY_ENTRY(cuMemHostGetDevicePointer_v3020)(CUdeviceptr_v2* pdptr, void* p, unsigned int Flags) {
  if (pdptr == nullptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (!pinned_ranges().find(reinterpret_cast<uint64_t>(p))) return CUDA_ERROR_INVALID_VALUE;
  *pdptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

namespace tally::client {

CUresult pinned_address_range(uint64_t ptr, CUdeviceptr_v2* base, size_t* size) {
  auto found = pinned_ranges().find(ptr);
  // Registered memory the server does not share cannot be reached from the device.
  if (!found || found->value.region == 0) return CUDA_ERROR_NOT_FOUND;
  const PinnedRegion& r = found->value;
  if (ptr < r.asked_address || ptr - r.asked_address >= r.asked_bytes) return CUDA_ERROR_NOT_FOUND;
  if (base != nullptr) *base = r.asked_address;
  if (size != nullptr) *size = r.asked_bytes;
  return CUDA_SUCCESS;
}

}  // namespace tally::client

TALLY_ENTRY(cuMemHostGetFlags_v2030)(unsigned int* pFlags, void* p) {
  if (pFlags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  auto found = pinned_ranges().find(reinterpret_cast<uint64_t>(p));
  if (!found) return CUDA_ERROR_INVALID_VALUE;
  *pFlags = found->value.flags;
  return CUDA_SUCCESS;
}
