// Physical memory shared between jobs of one tally-server as NCCL and PyTorch
// share it: cuMemExportToShareableHandle gives a POSIX file descriptor the job
// passes to another process (SCM_RIGHTS, pidfd_getfd), which
// cuMemImportFromShareableHandle turns into a handle it maps in its own
// reservations. The descriptor is a sealed memfd holding the server's export id
// and a random secret (tally/server/physical_shares.py checks both); the memory
// stays the owner's, charged to its quota, and lives while any job holds it.
// Also here: cuMemRetainAllocationHandle, cuMemGetAllocationPropertiesFromHandle
// and cuMemGetAccess.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "connection/connection.h"
#include "entry_points/entry_point.h"
#include "logging/log.h"
#include "memory/vmm_handles.h"

namespace tally::client {
namespace {

constexpr char kMagic[8] = {'t', 'a', 'l', 'l', 'y', 'V', 'M', 'M'};

struct SharedIdentity {     // the memfd's contents
  char magic[8];
  uint64_t export_id;
  uint64_t secret;
};

struct Known {
  CUmemAllocationProp prop;
  int references;
};

std::mutex g_mutex;
std::unordered_map<CUmemGenericAllocationHandle, Known> g_handles;

// What an imported or retained handle reports when the job did not make it.
CUmemAllocationProp shared_prop() {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  return prop;
}

}  // namespace

void remember_handle(CUmemGenericAllocationHandle handle, const CUmemAllocationProp& prop) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto [it, added] = g_handles.try_emplace(handle, Known{prop, 0});
  it->second.references += 1;
}

void forget_handle(CUmemGenericAllocationHandle handle) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_handles.find(handle);
  if (it != g_handles.end() && --it->second.references <= 0) g_handles.erase(it);
}

bool handle_props(CUmemGenericAllocationHandle handle, CUmemAllocationProp* prop) {
  std::lock_guard<std::mutex> lock(g_mutex);
  auto it = g_handles.find(handle);
  if (it == g_handles.end()) return false;
  *prop = it->second.prop;
  return true;
}

}  // namespace tally::client

using namespace tally::client;
namespace protocol = tally::protocol;

TALLY_ENTRY(cuMemExportToShareableHandle_v10020)(void* shareableHandle, CUmemGenericAllocationHandle_v1 handle,
                                                 CUmemAllocationHandleType handleType, unsigned long long flags) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (shareableHandle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    log_error("cuMemExportToShareableHandle: handle type %d: tally shares physical memory by POSIX file "
              "descriptor only (CUDA_ERROR_NOT_SUPPORTED)", static_cast<int>(handleType));
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  CUmemAllocationProp prop{};
  if (!handle_props(handle, &prop)) return CUDA_ERROR_INVALID_VALUE;
  if ((prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0) {
    log_error("cuMemExportToShareableHandle: handle %llu was not made with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR "
              "among its requested handle types (CUDA_ERROR_INVALID_VALUE)", static_cast<unsigned long long>(handle));
    return CUDA_ERROR_INVALID_VALUE;
  }
  protocol::IpcHandleReplyMsg out{};
  if (CUresult rc = request_reply(protocol::MemExportHandleMsg{handle}, protocol::MessageKind::IpcHandleReply, &out);
      rc != CUDA_SUCCESS)
    return rc;
  SharedIdentity identity{};
  std::memcpy(identity.magic, kMagic, sizeof kMagic);
  identity.export_id = out.export_id;
  identity.secret = out.secret;
  int fd = memfd_create("tally-vmm", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (pwrite(fd, &identity, sizeof identity, 0) != static_cast<ssize_t>(sizeof identity) ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    close(fd);
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  *static_cast<int*>(shareableHandle) = fd;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuMemImportFromShareableHandle_v10020)(CUmemGenericAllocationHandle_v1* handle, void* osHandle,
                                                   CUmemAllocationHandleType shHandleType) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    log_error("cuMemImportFromShareableHandle: handle type %d: tally shares physical memory by POSIX file "
              "descriptor only (CUDA_ERROR_NOT_SUPPORTED)", static_cast<int>(shHandleType));
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  // The descriptor is passed as the pointer's value, as CUDA's POSIX handles are.
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(osHandle));
  SharedIdentity identity{};
  if (pread(fd, &identity, sizeof identity, 0) != static_cast<ssize_t>(sizeof identity) ||
      std::memcmp(identity.magic, kMagic, sizeof kMagic) != 0) {
    log_error("cuMemImportFromShareableHandle: descriptor %d is not physical memory exported by a job of "
              "tally-server (CUDA_ERROR_INVALID_VALUE)", fd);
    return CUDA_ERROR_INVALID_VALUE;
  }
  protocol::MemCreateReplyMsg out{};
  if (CUresult rc = request_reply(protocol::MemImportHandleMsg{identity.export_id, identity.secret},
                                  protocol::MessageKind::MemCreateReply, &out);
      rc != CUDA_SUCCESS)
    return rc;
  remember_handle(out.handle, shared_prop());
  *handle = out.handle;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuMemRetainAllocationHandle_v11000)(CUmemGenericAllocationHandle_v1* handle, void* addr) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  protocol::MemCreateReplyMsg out{};
  if (CUresult rc = request_reply(protocol::MemRetainHandleMsg{reinterpret_cast<uint64_t>(addr)},
                                  protocol::MessageKind::MemCreateReply, &out);
      rc != CUDA_SUCCESS)
    return rc;
  CUmemAllocationProp prop{};
  if (!handle_props(out.handle, &prop)) prop = shared_prop();
  remember_handle(out.handle, prop);
  *handle = out.handle;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuMemGetAllocationPropertiesFromHandle_v10020)(CUmemAllocationProp_v1* prop,
                                                          CUmemGenericAllocationHandle_v1 handle) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return handle_props(handle, prop) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

TALLY_ENTRY(cuMemGetAccess_v10020)(unsigned long long* flags, const CUmemLocation_v1* location, CUdeviceptr_v2 ptr) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (location->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (location->id != 0) return CUDA_ERROR_INVALID_DEVICE;
  protocol::MemAccessReplyMsg out{};
  if (CUresult rc = request_reply(protocol::MemGetAccessMsg{ptr}, protocol::MessageKind::MemAccessReply, &out);
      rc != CUDA_SUCCESS)
    return rc;
  *flags = out.access ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  return CUDA_SUCCESS;
}
