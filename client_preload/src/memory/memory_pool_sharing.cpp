// Sharing a memory pool's allocations with another job of the same tally-server,
// as CUDA's pool IPC does: the owner exports the pool as a POSIX file descriptor
// (cuMemPoolExportToShareableHandle), which the job passes to the other process
// (SCM_RIGHTS, pidfd_getfd) to import (cuMemPoolImportFromShareableHandle); then
// each allocation travels as 64 bytes of export data (cuMemPoolExportPointer ->
// cuMemPoolImportPointer), and the importer frees it with cuMemFree(Async).
//
// The descriptor is a sealed memfd holding the pool's identity; the export data is
// an IPC memory handle (ipc.cpp: the server's export id and secret, checked by the
// server) plus that identity, so a pointer is imported only into the pool it came
// from. An imported allocation is the owner's: it counts against the owner's quota
// (tally/server/ipc_registry.py), at the owner's address.
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <unordered_set>

#include "connection/connection.h"
#include "entry_points/entry_point.h"
#include "logging/log.h"
#include "memory/memory_pools.h"
#include "memory/pool_objects.h"

namespace tally::client {
namespace {

constexpr char kPoolMagic[8] = {'t', 'a', 'l', 'l', 'y', 'P', 'O', 'L'};

struct PoolIdentity {       // the memfd's contents
  char magic[8];
  uint64_t token;           // the exporting process's pid (high 32 bits) and pool number
};

struct PointerExport {      // CUmemPoolPtrExportData
  unsigned char ipc_handle[24];   // an IPC memory handle's meaningful bytes (ipc.cpp: magic, export id, secret)
  char magic[8];
  uint64_t pool_token;
  unsigned char unused[24];
};
static_assert(sizeof(PointerExport) == sizeof(CUmemPoolPtrExportData));

std::atomic<uint32_t> g_next_pool_number{1};
std::mutex g_imported_mutex;
std::unordered_set<CUdeviceptr> g_imported;    // pointers imported here: cuMemFree closes them

bool shares_by_fd(const MemoryPool& pool) {
  return (pool.props.handleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
}

// The pool's identity across processes, made when it is first shared.
uint64_t identity_of(MemoryPool* pool) {
  if (pool->export_id == 0)
    pool->export_id = (uint64_t{static_cast<uint32_t>(getpid())} << 32) | g_next_pool_number.fetch_add(1);
  return pool->export_id;
}

}  // namespace

bool pool_handle_types_supported(CUmemAllocationHandleType types) {
  return (types & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0;
}

bool close_if_imported_pool_pointer(CUdeviceptr dptr, CUresult* rc) {
  {
    std::lock_guard<std::mutex> lock(g_imported_mutex);
    if (g_imported.erase(dptr) == 0) return false;
  }
  *rc = tally_entry_cuIpcCloseMemHandle_v4010(dptr);
  return true;
}

}  // namespace tally::client

using namespace tally::client;

TALLY_ENTRY(cuMemPoolExportToShareableHandle_v11020)(void* handle_out, CUmemoryPool pool,
                                                      CUmemAllocationHandleType handleType, unsigned long long flags) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (handle_out == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  PoolIdentity identity{};
  {
    std::unique_lock<std::mutex> lock;
    MemoryPool* object = lock_pool(pool, "cuMemPoolExportToShareableHandle", &lock);
    if (object == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || !shares_by_fd(*object) || object->imported) {
      log_error("cuMemPoolExportToShareableHandle: the pool %s (CUDA_ERROR_INVALID_VALUE)",
                object->imported ? "was imported, and only its owner exports it"
                                 : "was not created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, the type asked for");
      return CUDA_ERROR_INVALID_VALUE;
    }
    std::memcpy(identity.magic, kPoolMagic, sizeof kPoolMagic);
    identity.token = identity_of(object);
  }
  int fd = memfd_create("tally-mempool", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (pwrite(fd, &identity, sizeof identity, 0) != static_cast<ssize_t>(sizeof identity) ||
      fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    close(fd);
    return CUDA_ERROR_OPERATING_SYSTEM;
  }
  *static_cast<int*>(handle_out) = fd;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuMemPoolImportFromShareableHandle_v11020)(CUmemoryPool* pool_out, void* handle,
                                                        CUmemAllocationHandleType handleType, unsigned long long flags) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (pool_out == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) {
    log_error("cuMemPoolImportFromShareableHandle: handle type %d: tally shares pools by POSIX file descriptor "
              "only (CUDA_ERROR_NOT_SUPPORTED)", static_cast<int>(handleType));
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  // The descriptor is passed as the pointer's value, as CUDA's POSIX handles are.
  const int fd = static_cast<int>(reinterpret_cast<intptr_t>(handle));
  PoolIdentity identity{};
  if (pread(fd, &identity, sizeof identity, 0) != static_cast<ssize_t>(sizeof identity) ||
      std::memcmp(identity.magic, kPoolMagic, sizeof kPoolMagic) != 0) {
    log_error("cuMemPoolImportFromShareableHandle: descriptor %d is not a memory pool exported by a job of "
              "tally-server (CUDA_ERROR_INVALID_VALUE)", fd);
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto* object = new MemoryPool();
  object->props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  object->imported = true;
  object->export_id = identity.token;
  *pool_out = add_pool(object);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuMemPoolExportPointer_v11020)(CUmemPoolPtrExportData_v1* shareData_out, CUdeviceptr_v2 ptr) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (shareData_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUmemoryPool pool = pool_of(ptr);
  uint64_t token = 0;
  {
    std::unique_lock<std::mutex> lock;
    MemoryPool* object = pool == nullptr ? nullptr : lock_pool(pool, "cuMemPoolExportPointer", &lock);
    if (object == nullptr || !shares_by_fd(*object) || object->imported) {
      log_error("cuMemPoolExportPointer: 0x%llx is not the start of an allocation from a pool of this process "
                "made to be shared (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) (CUDA_ERROR_INVALID_VALUE)",
                static_cast<unsigned long long>(ptr));
      return CUDA_ERROR_INVALID_VALUE;
    }
    token = identity_of(object);
  }
  CUipcMemHandle ipc{};
  if (CUresult rc = tally_entry_cuIpcGetMemHandle_v4010(&ipc, ptr); rc != CUDA_SUCCESS) return rc;
  PointerExport out{};
  std::memcpy(out.ipc_handle, &ipc, sizeof out.ipc_handle);
  std::memcpy(out.magic, kPoolMagic, sizeof kPoolMagic);
  out.pool_token = token;
  std::memcpy(shareData_out, &out, sizeof out);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuMemPoolImportPointer_v11020)(CUdeviceptr_v2* ptr_out, CUmemoryPool pool,
                                           CUmemPoolPtrExportData_v1* shareData) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (ptr_out == nullptr || shareData == nullptr) return CUDA_ERROR_INVALID_VALUE;
  PointerExport data{};
  std::memcpy(&data, shareData, sizeof data);
  {
    std::unique_lock<std::mutex> lock;
    MemoryPool* object = lock_pool(pool, "cuMemPoolImportPointer", &lock);
    if (object == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (!object->imported || std::memcmp(data.magic, kPoolMagic, sizeof kPoolMagic) != 0 ||
        data.pool_token != object->export_id) {
      log_error("cuMemPoolImportPointer: the export data is not of an allocation from this imported pool "
                "(CUDA_ERROR_INVALID_VALUE)");
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  CUipcMemHandle ipc{};
  std::memcpy(&ipc, data.ipc_handle, sizeof data.ipc_handle);
  CUdeviceptr dptr = 0;
  if (CUresult rc = tally_entry_cuIpcOpenMemHandle_v4010(&dptr, ipc, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
      rc != CUDA_SUCCESS)
    return rc;
  {
    std::lock_guard<std::mutex> lock(g_imported_mutex);
    g_imported.insert(dptr);
  }
  *ptr_out = dptr;
  return CUDA_SUCCESS;
}
