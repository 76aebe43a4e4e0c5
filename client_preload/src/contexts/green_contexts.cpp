// Green contexts (green_contexts.h): creation from a resource descriptor, their
// streams, the context they stand for, and the events that gather or hold all of
// their streams' work.
#include "contexts/green_contexts.h"

#include "connection/connection.h"
#include "contexts/contexts.h"
#include "entry_points/entry_point.h"
#include "graphs/capture.h"
#include "logging/log.h"
#include "streams/streams.h"

namespace tally::client {
namespace {

std::atomic<uint64_t> g_next_green_id{1};

// CUDA_ERROR_CONTEXT_IS_DESTROYED once cuGreenCtxDestroy ran (handles are never freed).
CUresult live_green(CUgreenCtx handle, GreenContextObject** out) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  GreenContextObject* g = live_object<GreenContextObject, ObjectTag::kGreenContext>(handle);
  if (g == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (!g->context->live()) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *out = g;
  return CUDA_SUCCESS;
}

// The green context's streams still alive; CUDA refuses to gather or hold them
// while one of them is being captured.
CUresult live_streams(GreenContextObject* g, std::vector<StreamObject*>* out) {
  for (StreamObject* s : g->streams) {
    if (s->tag.load(std::memory_order_acquire) != ObjectTag::kStream) continue;
    if (capture_info(s->id).status != CU_STREAM_CAPTURE_STATUS_NONE) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    out->push_back(s);
  }
  return CUDA_SUCCESS;
}

CUstream handle(StreamObject* s) { return reinterpret_cast<CUstream>(s); }

}  // namespace

GreenContextObject* current_green_context() {
  ContextObject* c = current_context();
  return c != nullptr ? c->green : nullptr;
}

void note_green_stream(GreenContextObject* green, StreamObject* stream) {
  std::lock_guard<std::mutex> lock(green->mutex);
  green->streams.push_back(stream);
}

}  // namespace tally::client

using namespace tally::client;

TALLY_ENTRY(cuGreenCtxCreate_v12040)(CUgreenCtx* phCtx, CUdevResourceDesc desc, CUdevice dev, unsigned int flags) {
  if (phCtx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_device(dev); rc != CUDA_SUCCESS) return rc;
  // CUDA 13.0 requires CU_GREEN_CTX_DEFAULT_STREAM; later releases take 0 too. Either
  // way the context gets its default stream here.
  if ((flags & ~unsigned{CU_GREEN_CTX_DEFAULT_STREAM}) != 0) return CUDA_ERROR_INVALID_VALUE;
  ResourceDescObject* d = as_resource_desc(desc);
  if (d == nullptr || d->device != dev) return CUDA_ERROR_INVALID_VALUE;
  auto* g = new GreenContextObject();
  g->id = g_next_green_id.fetch_add(1, std::memory_order_relaxed);
  g->device = dev;
  g->sm_count = d->sm_count;
  g->min_partition = d->min_partition;
  g->alignment = d->alignment;
  g->context = new_green_context(dev, g);
  CUstream default_stream = nullptr;
  if (CUresult rc = create_stream(&default_stream, 0, 0, g); rc != CUDA_SUCCESS) {
    g->context->state.store(ContextState::kDestroyed, std::memory_order_release);
    return rc;
  }
  g->default_stream = reinterpret_cast<StreamObject*>(default_stream);
  *phCtx = reinterpret_cast<CUgreenCtx>(g);
  return CUDA_SUCCESS;
}

// Streams the job made in the context stay its to destroy (CUDA: calls on them then
// fail with CUDA_ERROR_CONTEXT_IS_DESTROYED); the default stream goes with it.
TALLY_ENTRY(cuGreenCtxDestroy_v12040)(CUgreenCtx hCtx) {
  GreenContextObject* g = nullptr;
  if (CUresult rc = live_green(hCtx, &g); rc != CUDA_SUCCESS) return rc;
  ContextState expected = ContextState::kLive;
  if (!g->context->state.compare_exchange_strong(expected, ContextState::kDestroyed))
    return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  std::lock_guard<std::mutex> lock(g->mutex);
  CUresult first = tally_entry_cuStreamDestroy_v4000(handle(g->default_stream));
  if (g->join != nullptr) tally_entry_cuStreamDestroy_v4000(g->join);
  for (auto& [stream, fence] : g->fences) tally_entry_cuEventDestroy_v4000(fence);
  g->fences.clear();
  return first;
}

TALLY_ENTRY(cuCtxFromGreenCtx_v12040)(CUcontext* pContext, CUgreenCtx hCtx) {
  if (pContext == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GreenContextObject* g = nullptr;
  if (CUresult rc = live_green(hCtx, &g); rc != CUDA_SUCCESS) return rc;
  *pContext = reinterpret_cast<CUcontext>(g->context);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuGreenCtxGetDevResource_v12040)(CUgreenCtx hCtx, CUdevResource* resource, CUdevResourceType type) {
  GreenContextObject* g = nullptr;
  if (CUresult rc = live_green(hCtx, &g); rc != CUDA_SUCCESS) return rc;
  if (resource == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (type != CU_DEV_RESOURCE_TYPE_SM) return CUDA_ERROR_INVALID_RESOURCE_TYPE;
  fill_sm_resource(resource, g->device, g->sm_count, g->min_partition, g->alignment);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuGreenCtxGetId_v12090)(CUgreenCtx greenCtx, unsigned long long* greenCtxId) {
  if (greenCtxId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GreenContextObject* g = nullptr;
  if (greenCtx != nullptr) {
    if (CUresult rc = live_green(greenCtx, &g); rc != CUDA_SUCCESS) return rc;
  } else if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) {
    return rc;
  } else if ((g = current_green_context()) == nullptr) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  *greenCtxId = g->id;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuGreenCtxStreamCreate_v12050)(CUstream* phStream, CUgreenCtx greenCtx, unsigned int flags,
                                           int priority) {
  if (phStream == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GreenContextObject* g = nullptr;
  if (CUresult rc = live_green(greenCtx, &g); rc != CUDA_SUCCESS) return rc;
  if (flags != CU_STREAM_NON_BLOCKING) {
    log_error("cuGreenCtxStreamCreate: flags must be CU_STREAM_NON_BLOCKING (0x1), got 0x%x", flags);
    return CUDA_ERROR_INVALID_VALUE;
  }
  return create_stream(phStream, flags, priority, g);
}

// Gathers every stream of the context: each records a fence its join stream waits
// for, and the event is recorded on the join stream after them all.
TALLY_ENTRY(cuGreenCtxRecordEvent_v12040)(CUgreenCtx hCtx, CUevent hEvent) {
  GreenContextObject* g = nullptr;
  if (CUresult rc = live_green(hCtx, &g); rc != CUDA_SUCCESS) return rc;
  if (as_event(hEvent) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lock(g->mutex);
  std::vector<StreamObject*> streams;
  if (CUresult rc = live_streams(g, &streams); rc != CUDA_SUCCESS) return rc;
  if (streams.size() == 1) return tally_entry_cuEventRecord_v2000(hEvent, handle(streams[0]));
  if (g->join == nullptr) {
    // not in g->streams: it is where they gather, never one of them
    if (CUresult rc = create_stream(&g->join, CU_STREAM_NON_BLOCKING, 0, nullptr); rc != CUDA_SUCCESS) return rc;
  }
  for (StreamObject* s : streams) {
    CUevent& fence = g->fences[s];
    if (fence == nullptr) {
      if (CUresult rc = tally_entry_cuEventCreate_v2000(&fence, CU_EVENT_DISABLE_TIMING); rc != CUDA_SUCCESS) return rc;
    }
    if (CUresult rc = tally_entry_cuEventRecord_v2000(fence, handle(s)); rc != CUDA_SUCCESS) return rc;
    if (CUresult rc = tally_entry_cuStreamWaitEvent_v3020(g->join, fence, 0); rc != CUDA_SUCCESS) return rc;
  }
  return tally_entry_cuEventRecord_v2000(hEvent, g->join);
}

// Holds the work submitted later to every stream the context has now.
TALLY_ENTRY(cuGreenCtxWaitEvent_v12040)(CUgreenCtx hCtx, CUevent hEvent) {
  GreenContextObject* g = nullptr;
  if (CUresult rc = live_green(hCtx, &g); rc != CUDA_SUCCESS) return rc;
  if (as_event(hEvent) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  std::lock_guard<std::mutex> lock(g->mutex);
  std::vector<StreamObject*> streams;
  if (CUresult rc = live_streams(g, &streams); rc != CUDA_SUCCESS) return rc;
  for (StreamObject* s : streams) {
    if (CUresult rc = tally_entry_cuStreamWaitEvent_v3020(handle(s), hEvent, 0); rc != CUDA_SUCCESS) return rc;
  }
  return CUDA_SUCCESS;
}
