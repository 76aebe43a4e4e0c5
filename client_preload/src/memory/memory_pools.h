// Memory pools of the stream-ordered allocator (memory_pools.cpp): which pool an
// allocation came from, so freeing it (cuMemFree, cuMemFreeAsync) updates the
// pool's counts and cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE)
// can name it.
#pragma once

#include "driver_headers.h"

namespace tally::client {

// The pool `dptr` (the start of an allocation) came from, or nullptr.
CUmemoryPool pool_of(CUdeviceptr dptr);

// The allocation at `dptr` was freed: its pool, if any, counts it no longer.
void pool_allocation_freed(CUdeviceptr dptr);

// If `dptr` came from a pinned host memory pool, frees it as cuMemFreeHost does (after
// `stream` reached this point, when `wait` asks for stream order), *rc the result.
bool free_if_host_pool_pointer(CUdeviceptr dptr, bool wait, CUstream stream, bool per_thread, CUresult* rc);

// If `dptr` was imported from another job's pool (cuMemPoolImportPointer), closes
// it (what cuMemFree and cuMemFreeAsync do with such a pointer), *rc the result.
bool close_if_imported_pool_pointer(CUdeviceptr dptr, CUresult* rc);

}  // namespace tally::client
