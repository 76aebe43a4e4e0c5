// Contexts as the job sees them. The server runs every job in one session of its
// own, so a job's contexts are the client's bookkeeping over that one session: the
// primary context of the device and the contexts the job creates (cuCtxCreate)
// share the job's quota, priority and streams on the server. Each thread keeps a
// stack of current contexts.
//
// What a created context owns: CUDA's cuCtxDestroy releases the modules, streams,
// events, link states and memory (cuMemAlloc, cuMemAllocPitch, cuMemAllocHost,
// cuMemAllocManaged) made while it was current, so those are recorded against the
// current context as they are made (note_context_resource) and released through
// their own destroy/free entry points when it is destroyed. Libraries (cuLibrary*)
// and stream-ordered or virtual memory belong to no context, as in CUDA.
//
// A green context (green_contexts.h) has a context of its own, what
// cuCtxFromGreenCtx returns: it can be made current like any other, and what is
// made while it is current belongs to the primary context, as CUDA's green
// contexts share the primary context's modules and memory.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <utility>

#include "driver_headers.h"

namespace tally::client {

struct GreenContextObject;

// cuCtxGetLimit's answers: CUDA's defaults until the job sets them.
struct ContextLimits {
  std::atomic<size_t> stack_size{1024};
  std::atomic<size_t> printf_fifo_size{1 << 20};
  std::atomic<size_t> malloc_heap_size{8 << 20};
  std::atomic<size_t> dev_runtime_sync_depth{2};
  std::atomic<size_t> dev_runtime_pending_launch_count{2048};
  std::atomic<size_t> max_l2_fetch_granularity{64};
  std::atomic<size_t> persisting_l2_cache_size{0};
  std::atomic<size_t> shmem_size{0};
  std::atomic<size_t> cig_enabled{0};
  std::atomic<size_t> cig_shmem_fallback_enabled{0};

  std::atomic<size_t>* slot(CUlimit limit);  // nullptr for a limit CUDA does not have
};

enum class ContextResource : int { kModule, kStream, kEvent, kDeviceMemory, kHostMemory, kLinkState };

enum class ContextState : uint32_t { kLive = 0x43545854 /* "CTXT" */, kDestroyed = 0 };

// What a CUcontext points at.
struct ContextObject {
  std::atomic<ContextState> state{ContextState::kLive};
  const bool primary;
  const uint64_t id;                 // cuCtxGetId: 1 for the primary context
  CUdevice device = 0;
  std::atomic<unsigned> flags{0};
  unsigned sm_count_affinity = 0;    // CU_EXEC_AFFINITY_TYPE_SM_COUNT asked at creation; 0: none
  GreenContextObject* green = nullptr;  // the green context this context stands for (cuCtxFromGreenCtx)
  ContextLimits limits;
  std::atomic<int> cache_config{CU_FUNC_CACHE_PREFER_NONE};
  std::atomic<int> retains{0};       // the primary context's cuDevicePrimaryCtxRetain count
  std::atomic<bool> active{false};   // the primary context: retained or handed to cudart

  std::mutex mutex;
  std::set<std::pair<ContextResource, uint64_t>> resources;  // created contexts only

  ContextObject(bool is_primary, uint64_t context_id) : primary(is_primary), id(context_id) {}
  bool live() const { return state.load(std::memory_order_acquire) == ContextState::kLive; }
};

// CUDA's context flags, with at most one scheduling policy.
bool valid_context_flags(unsigned flags);

// CUDA_SUCCESS when connected and `dev` is the server's device.
CUresult check_device(CUdevice dev);

// The calling thread's current context (it may have been destroyed since); nullptr: none.
ContextObject* current_context();

// The context a new green context stands for, made known to every context call.
ContextObject* new_green_context(CUdevice dev, GreenContextObject* green);

// The primary context of `dev`, marked active (cudart obtains it this way, through
// the runtime-interface export table, instead of cuDevicePrimaryCtxRetain).
CUresult primary_context(CUdevice dev, CUcontext* out);

// primary_context for cudart (the runtime interface table): from then on a thread that
// never chose a context gets the primary one bound at its first call that needs one.
CUresult runtime_primary_context(CUdevice dev, CUcontext* out);

// The primary context when cudart or the job has it (active or retained); nullptr before.
CUcontext active_primary_context();

// The context `ctx` names, or the calling thread's current one for nullptr:
// CUDA_ERROR_INVALID_CONTEXT when there is none or `ctx` is not a live context,
// CUDA_ERROR_CONTEXT_IS_DESTROYED when the current one was destroyed by another thread.
CUresult context_object(CUcontext ctx, ContextObject** out);

// The device of `ctx` (nullptr: the calling thread's current context).
CUresult context_device(CUcontext ctx, CUdevice* out);

// Before making a resource: CUDA_ERROR_CONTEXT_IS_DESTROYED if the thread's current
// context was destroyed (no current context is fine: tally then serves the primary one).
CUresult check_current_context_for_new_resource();

// A resource made / released while the calling thread's current context is a created one.
void note_context_resource(ContextResource kind, uint64_t handle);
void forget_context_resource(ContextResource kind, uint64_t handle);

// The context that owns a resource: the created one it was made in, else the primary one.
CUcontext resource_context(ContextResource kind, uint64_t handle);

}  // namespace tally::client
