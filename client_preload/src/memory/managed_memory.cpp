// Managed memory (cuMemAllocManaged, cudaMallocManaged): one pointer that the
// job's CPU code and its kernels both use.
//
// The memory is a shared-memory object the job maps at an address the kernel
// picks; the server makes that same address device memory holding the same bytes
// (tally/server/driver/managed_memory.py). Nothing migrates: the bytes are where
// both sides see them at every moment, so the CPU may touch them while kernels
// run (as concurrentManagedAccess=1 devices allow; what a kernel writes is visible
// here once the job synchronized with it, as CUDA promises). If the address is
// already taken on the device (another job's memory, say), the server answers
// CUDA_ERROR_ALREADY_MAPPED and the job tries again at another address.
//
// Prefetching and advice change nothing where nothing migrates: they check their
// arguments, and the advice is kept so cuMemRangeGetAttribute(s) reads it back
// (per allocation: advice on part of one applies to all of it).
#include "memory/managed_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "memory/address_map.h"
#include "connection/connection.h"
#include "contexts/contexts.h"
#include "entry_points/entry_point.h"
#include "memory/shared_objects.h"
#include "streams/stream_ids.h"

namespace tally::client {
namespace {

constexpr int kAttempts = 8;  // addresses tried before giving up (a clash is rare)

struct Advice {
  bool read_mostly = false;
  int preferred = CU_DEVICE_INVALID;      // a device, CU_DEVICE_CPU or CU_DEVICE_INVALID
  bool accessed_by_device = false;
  bool accessed_by_cpu = false;
  int last_prefetch = CU_DEVICE_INVALID;
};

std::mutex g_advice_lock;
std::map<uint64_t, Advice> g_advice;  // managed allocation start -> its advice

// The managed allocation holding [ptr, ptr + count), or CUDA_ERROR_INVALID_VALUE.
CUresult managed_range(CUdeviceptr ptr, size_t count, uint64_t* start, uint64_t* size = nullptr) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  auto found = device_ranges().find(ptr, count == 0 ? 1 : count);
  if (!found || found->value != DeviceRangeKind::kManaged) return CUDA_ERROR_INVALID_VALUE;
  *start = found->start;
  if (size != nullptr) *size = found->size;
  return CUDA_SUCCESS;
}

// A device ordinal or CU_DEVICE_CPU from a location; false if it names no place here.
bool location_device(const CUmemLocation& location, int* device) {
  switch (location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      *device = location.id;
      return location.id == 0;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
      *device = CU_DEVICE_CPU;
      return true;
    default:
      return false;
  }
}

CUresult prefetch(CUdeviceptr ptr, size_t count, int device, CUstream stream, bool per_thread) {
  uint64_t start = 0, id = 0;
  if (CUresult rc = managed_range(ptr, count, &start); rc != CUDA_SUCCESS) return rc;
  if (device != 0 && device != CU_DEVICE_CPU) return CUDA_ERROR_INVALID_DEVICE;
  if (CUresult rc = stream_id(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  std::lock_guard lock(g_advice_lock);
  g_advice[start].last_prefetch = device;
  return CUDA_SUCCESS;
}

CUresult advise(CUdeviceptr ptr, size_t count, CUmem_advise advice, int device) {
  uint64_t start = 0;
  if (CUresult rc = managed_range(ptr, count, &start); rc != CUDA_SUCCESS) return rc;
  if (device != 0 && device != CU_DEVICE_CPU) return CUDA_ERROR_INVALID_DEVICE;
  std::lock_guard lock(g_advice_lock);
  Advice& a = g_advice[start];
  switch (advice) {
    case CU_MEM_ADVISE_SET_READ_MOSTLY:
    case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
      a.read_mostly = advice == CU_MEM_ADVISE_SET_READ_MOSTLY;
      return CUDA_SUCCESS;
    case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
      a.preferred = device;
      return CUDA_SUCCESS;
    case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
      a.preferred = CU_DEVICE_INVALID;
      return CUDA_SUCCESS;
    case CU_MEM_ADVISE_SET_ACCESSED_BY:
    case CU_MEM_ADVISE_UNSET_ACCESSED_BY:
      (device == CU_DEVICE_CPU ? a.accessed_by_cpu : a.accessed_by_device) = advice == CU_MEM_ADVISE_SET_ACCESSED_BY;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

int location_type(int device) {
  return device == CU_DEVICE_INVALID ? CU_MEM_LOCATION_TYPE_INVALID
         : device == CU_DEVICE_CPU   ? CU_MEM_LOCATION_TYPE_HOST
                                     : CU_MEM_LOCATION_TYPE_DEVICE;
}

CUresult range_attribute(void* data, size_t size, CUmem_range_attribute attribute, CUdeviceptr ptr, size_t count) {
  if (data == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t start = 0;
  if (CUresult rc = managed_range(ptr, count, &start); rc != CUDA_SUCCESS) return rc;
  Advice a;
  {
    std::lock_guard lock(g_advice_lock);
    a = g_advice[start];
  }
  auto put_int = [&](int value) {
    if (size != sizeof(int)) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(data, &value, sizeof value);
    return CUDA_SUCCESS;
  };
  switch (attribute) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
      return put_int(a.read_mostly ? 1 : 0);
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION:
      return put_int(a.preferred);
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION:
      return put_int(a.last_prefetch);
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
      return put_int(location_type(a.preferred));
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID:
      return put_int(a.preferred == CU_DEVICE_CPU ? 0 : a.preferred);
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE:
      return put_int(location_type(a.last_prefetch));
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID:
      return put_int(a.last_prefetch == CU_DEVICE_CPU ? 0 : a.last_prefetch);
    case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: {
      // an array of 4-byte processor ids, CU_DEVICE_INVALID where there are fewer
      if (size == 0 || size % sizeof(int) != 0) return CUDA_ERROR_INVALID_VALUE;
      std::vector<int> ids(size / sizeof(int), CU_DEVICE_INVALID);
      size_t n = 0;
      if (a.accessed_by_device && n < ids.size()) ids[n++] = 0;
      if (a.accessed_by_cpu && n < ids.size()) ids[n++] = CU_DEVICE_CPU;
      std::memcpy(data, ids.data(), size);
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// Attaching to a stream limits which stream's work may touch the memory while
// the CPU does; here both may touch it at any moment, so there is nothing to limit.
CUresult attach(CUstream stream, CUdeviceptr ptr, size_t length, unsigned flags, bool per_thread) {
  uint64_t start = 0, size = 0, id = 0;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST && flags != CU_MEM_ATTACH_SINGLE)
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = managed_range(ptr, length, &start, &size); rc != CUDA_SUCCESS) return rc;
  if (length != 0 && (ptr != start || length != size)) return CUDA_ERROR_INVALID_VALUE;  // whole allocations only
  return stream_id(stream, per_thread, &id);
}
}  // namespace

CUresult allocate_managed(CUdeviceptr* dptr, size_t bytes, unsigned flags) {
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  const size_t mapped = page_round(bytes);
  std::vector<void*> refused;  // kept mapped while trying, so the kernel picks other addresses
  CUresult rc = CUDA_ERROR_OUT_OF_MEMORY;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    std::string name;
    void* p = map_new_shared_object(mapped, &name);
    if (p == nullptr) break;
    const uint64_t address = reinterpret_cast<uint64_t>(p);
    rc = Connection::instance().request_done(protocol::MemAllocManagedMsg{address, bytes, flags, 0}, name.data(),
                                             static_cast<uint32_t>(name.size()));
    shm_unlink(name.c_str());  // gone already if the server opened it
    if (rc == CUDA_SUCCESS) {
      device_ranges().add(address, bytes, DeviceRangeKind::kManaged);
      {
        std::lock_guard lock(g_advice_lock);
        g_advice[address] = Advice{};
      }
      *dptr = address;
      break;
    }
    if (rc != CUDA_ERROR_ALREADY_MAPPED) {
      munmap(p, mapped);
      break;
    }
    refused.push_back(p);
    rc = CUDA_ERROR_OUT_OF_MEMORY;  // if no attempt is left
  }
  for (void* p : refused) munmap(p, mapped);
  return rc;
}


void forget_managed(uint64_t start, uint64_t size) {
  munmap(reinterpret_cast<void*>(start), page_round(size));
  std::lock_guard lock(g_advice_lock);
  g_advice.erase(start);
}

}  // namespace tally::client

using namespace tally::client;
namespace protocol = tally::protocol;

TALLY_ENTRY(cuMemAllocManaged_v6000)(CUdeviceptr_v2* dptr, size_t bytesize, unsigned int flags) {
  if (CUresult rc = check_current_context_for_new_resource(); rc != CUDA_SUCCESS) return rc;
  CUresult rc = allocate_managed(dptr, bytesize, flags);
  // Freed with cuMemFree, which forgets it.
  if (rc == CUDA_SUCCESS) note_context_resource(ContextResource::kDeviceMemory, *dptr);
  return rc;
}

TALLY_ENTRY(cuMemPrefetchAsync_v8000)(CUdeviceptr_v2 devPtr, size_t count, CUdevice_v1 dstDevice, CUstream hStream) {
  return prefetch(devPtr, count, dstDevice, hStream, false);
}
TALLY_ENTRY(cuMemPrefetchAsync_v8000_ptsz)(CUdeviceptr_v2 devPtr, size_t count, CUdevice_v1 dstDevice,
                                           CUstream hStream) {
  return prefetch(devPtr, count, dstDevice, hStream, true);
}
TALLY_ENTRY(cuMemPrefetchAsync_v12020)(CUdeviceptr_v2 devPtr, size_t count, CUmemLocation_v1 location,
                                       unsigned int flags, CUstream hStream) {
  int device = 0;
  if (flags != 0 || !location_device(location, &device)) return CUDA_ERROR_INVALID_VALUE;
  return prefetch(devPtr, count, device, hStream, false);
}
TALLY_ENTRY(cuMemPrefetchAsync_v12020_ptsz)(CUdeviceptr_v2 devPtr, size_t count, CUmemLocation_v1 location,
                                            unsigned int flags, CUstream hStream) {
  int device = 0;
  if (flags != 0 || !location_device(location, &device)) return CUDA_ERROR_INVALID_VALUE;
  return prefetch(devPtr, count, device, hStream, true);
}

TALLY_ENTRY(cuMemAdvise_v8000)(CUdeviceptr_v2 devPtr, size_t count, CUmem_advise advice, CUdevice_v1 device) {
  return advise(devPtr, count, advice, device);
}
TALLY_ENTRY(cuMemAdvise_v12020)(CUdeviceptr_v2 devPtr, size_t count, CUmem_advise advice, CUmemLocation_v1 location) {
  int device = 0;
  if (!location_device(location, &device)) return CUDA_ERROR_INVALID_VALUE;
  return advise(devPtr, count, advice, device);
}

TALLY_ENTRY(cuMemRangeGetAttribute_v8000)(void* data, size_t dataSize, CUmem_range_attribute attribute,
                                          CUdeviceptr_v2 devPtr, size_t count) {
  return range_attribute(data, dataSize, attribute, devPtr, count);
}
TALLY_ENTRY(cuMemRangeGetAttributes_v8000)(void** data, size_t* dataSizes, CUmem_range_attribute* attributes,
                                           size_t numAttributes, CUdeviceptr_v2 devPtr, size_t count) {
  if (data == nullptr || dataSizes == nullptr || attributes == nullptr || numAttributes == 0)
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < numAttributes; ++i) {
    if (CUresult rc = range_attribute(data[i], dataSizes[i], attributes[i], devPtr, count); rc != CUDA_SUCCESS)
      return rc;
  }
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuStreamAttachMemAsync_v6000)(CUstream hStream, CUdeviceptr_v2 dptr, size_t length, unsigned int flags) {
  return attach(hStream, dptr, length, flags, false);
}
TALLY_ENTRY(cuStreamAttachMemAsync_v7000_ptsz)(CUstream hStream, CUdeviceptr_v2 dptr, size_t length,
                                               unsigned int flags) {
  return attach(hStream, dptr, length, flags, true);
}
