// Streams. The client picks each stream's id, so cuStreamCreate is fire-and-forget
// and the questions CUDA answers from the stream itself (flags, priority, context,
// id, capture status) need no round trip. Query and synchronize go to the server,
// which applies the legacy default stream's ordering rules. A stream made in a
// green context (cuGreenCtxStreamCreate, or any stream made while one is current)
// is made with its SM count, and the NULL stream is the green context's default
// stream while one is current.
#include <atomic>

#include "graphs/capture.h"
#include "connection/connection.h"
#include "contexts/contexts.h"
#include "contexts/green_contexts.h"
#include "driver_objects.h"
#include "entry_points/entry_point.h"
#include "streams/stream_attributes.h"
#include "streams/stream_ids.h"
#include "streams/streams.h"

namespace tally::client {
namespace {

std::atomic<uint64_t> g_next_stream{1};
std::atomic<uint64_t> g_next_thread_stream{1};

// cuCtxGetStreamPriorityRange: CUDA's range on current GPUs, 0 (lowest) to -5.
constexpr int kLeastPriority = 0;
constexpr int kGreatestPriority = -5;

CUresult query(CUstream stream, bool per_thread) {
  protocol::StreamQueryMsg m{};
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = stream_id(stream, per_thread, &m.stream); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc; refused_while_capturing(m.stream, &rc)) return rc;
  return Connection::instance().request_done(m);
}

CUresult synchronize(CUstream stream, bool per_thread) {
  protocol::StreamSynchronizeMsg m{};
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = stream_id(stream, per_thread, &m.stream); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc; refused_while_capturing(m.stream, &rc)) return rc;
  return Connection::instance().request_done(m);
}

CUresult wait_event(CUstream stream, CUevent event, unsigned flags, bool per_thread) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if ((flags & ~unsigned{CU_EVENT_WAIT_EXTERNAL}) != 0) return CUDA_ERROR_INVALID_VALUE;
  EventObject* e = as_event(event);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  protocol::StreamWaitEventMsg m{0, e->id};
  if (CUresult rc = stream_id(stream, per_thread, &m.stream); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc; captured_stream_wait(m.stream, e, &rc)) return rc;
  return Connection::instance().send(m);
}

// What a default stream reports about itself.
CUresult describe(CUstream stream, bool per_thread, unsigned* flags, int* priority) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  uint64_t id = 0;
  if (CUresult rc = stream_id(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  StreamObject* s = as_stream(stream);
  if (flags != nullptr) *flags = s != nullptr ? s->flags : 0;
  if (priority != nullptr) *priority = s != nullptr ? s->priority : 0;
  return CUDA_SUCCESS;
}

CUresult stream_context(CUstream stream, bool per_thread, CUcontext* ctx) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = describe(stream, per_thread, nullptr, nullptr); rc != CUDA_SUCCESS) return rc;
  StreamObject* s = as_stream(stream);
  if (s != nullptr && s->context != nullptr) {
    *ctx = s->context;
    return CUDA_SUCCESS;
  }
  return primary_context(0, ctx);
}

// The green context a stream belongs to: its own, or for the NULL and legacy streams
// the current one (nullptr: none). CUDA: CU_STREAM_PER_THREAD is no stream of a green context.
CUresult stream_green_context(CUstream stream, bool per_thread, GreenContextObject** out) {
  if (CUresult rc = describe(stream, per_thread, nullptr, nullptr); rc != CUDA_SUCCESS) return rc;
  if (StreamObject* s = as_stream(stream); s != nullptr) {
    *out = s->green;
    return CUDA_SUCCESS;
  }
  const bool per_thread_stream = stream == CU_STREAM_PER_THREAD || (stream == nullptr && per_thread);
  *out = current_green_context();
  return per_thread_stream && *out != nullptr ? CUDA_ERROR_INVALID_HANDLE : CUDA_SUCCESS;
}

// cuStreamGetCtx_v2: a green context's stream names the primary context beside it.
CUresult stream_contexts(CUstream stream, bool per_thread, CUcontext* ctx, CUgreenCtx* green_out) {
  if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GreenContextObject* green = nullptr;
  if (CUresult rc = stream_green_context(stream, per_thread, &green); rc != CUDA_SUCCESS) return rc;
  if (green_out != nullptr) *green_out = reinterpret_cast<CUgreenCtx>(green);
  return green != nullptr ? primary_context(0, ctx) : stream_context(stream, per_thread, ctx);
}

CUresult stream_id_of(CUstream stream, bool per_thread, unsigned long long* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  uint64_t id = 0;
  if (CUresult rc = stream_id(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  *out = id;
  return CUDA_SUCCESS;
}

// Whether the stream is being captured (capture.h), and into what.
CUresult capture_status(CUstream stream, bool per_thread, CUstreamCaptureStatus* status, cuuint64_t* id_out = nullptr,
                        CUgraph* graph_out = nullptr, const CUgraphNode** dependencies_out = nullptr,
                        size_t* dependency_count_out = nullptr) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  uint64_t id = 0;
  if (CUresult rc = stream_id(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  const CaptureInfo info = capture_info(id);
  if (info.error != CUDA_SUCCESS) return info.error;
  *status = info.status;
  if (id_out != nullptr) *id_out = info.id;
  if (graph_out != nullptr) *graph_out = reinterpret_cast<CUgraph>(info.graph);
  if (dependencies_out != nullptr) *dependencies_out = info.dependencies;
  if (dependency_count_out != nullptr) *dependency_count_out = info.dependency_count;
  return CUDA_SUCCESS;
}

// The NULL stream: the legacy default stream, or the current green context's own.
CUresult default_stream_id(uint64_t* id) {
  GreenContextObject* g = current_green_context();
  if (g == nullptr) {
    *id = kLegacyStream;
    return CUDA_SUCCESS;
  }
  if (!g->context->live()) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *id = g->default_stream->id;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult create_stream(CUstream* out, unsigned flags, int priority, GreenContextObject* green) {
  if (out == nullptr || (flags & ~unsigned{CU_STREAM_NON_BLOCKING}) != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = check_current_context_for_new_resource(); rc != CUDA_SUCCESS) return rc;
  // Out-of-range priorities are clamped, as the driver does.
  priority = priority > kLeastPriority ? kLeastPriority : priority < kGreatestPriority ? kGreatestPriority : priority;
  auto* stream = new StreamObject();
  stream->id = g_next_stream.fetch_add(1, std::memory_order_relaxed);
  stream->flags = flags;
  stream->priority = priority;
  stream->green = green;
  CUresult sent;
  if (green != nullptr) {
    stream->context = reinterpret_cast<CUcontext>(green->context);
    sent = Connection::instance().send(protocol::GreenStreamCreateMsg{stream->id, flags, priority, green->sm_count, 0});
  } else {
    tally_entry_cuCtxGetCurrent_v4000(&stream->context);
    sent = Connection::instance().send(protocol::StreamCreateMsg{stream->id, flags, priority});
  }
  if (sent != CUDA_SUCCESS) {
    stream->tag.store(ObjectTag::kDead);
    return sent;
  }
  *out = reinterpret_cast<CUstream>(stream);
  if (green != nullptr) {
    note_green_stream(green, stream);
  } else {
    note_context_resource(ContextResource::kStream, reinterpret_cast<uint64_t>(stream));
  }
  return CUDA_SUCCESS;
}

uint64_t per_thread_stream_id() {
  thread_local uint64_t id = kPerThreadStreamBit | g_next_thread_stream.fetch_add(1, std::memory_order_relaxed);
  return id;
}

CUresult stream_id(CUstream stream, bool per_thread_entry, uint64_t* id) {
  if (stream == nullptr) {
    if (!per_thread_entry) return default_stream_id(id);
    *id = per_thread_stream_id();
  } else if (stream == CU_STREAM_LEGACY) {
    return default_stream_id(id);
  } else if (stream == CU_STREAM_PER_THREAD) {
    *id = per_thread_stream_id();
  } else {
    StreamObject* s = as_stream(stream);
    if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
    if (s->green != nullptr && !s->green->context->live()) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
    *id = s->id;
  }
  return CUDA_SUCCESS;
}

}  // namespace tally::client

using namespace tally::client;
namespace protocol = tally::protocol;

// A stream made while a green context is current is that green context's (CUDA:
// cuStreamGetGreenCtx).
TALLY_ENTRY(cuStreamCreate_v2000)(CUstream* phStream, unsigned int Flags) {
  return create_stream(phStream, Flags, 0, current_green_context());
}
TALLY_ENTRY(cuStreamCreateWithPriority_v5050)(CUstream* phStream, unsigned int flags, int priority) {
  return create_stream(phStream, flags, priority, current_green_context());
}

TALLY_ENTRY(cuStreamDestroy_v4000)(CUstream hStream) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  StreamObject* s = as_stream(hStream);
  if (s == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  ObjectTag expected = ObjectTag::kStream;
  if (!s->tag.compare_exchange_strong(expected, ObjectTag::kDead)) return CUDA_ERROR_INVALID_HANDLE;
  forget_context_resource(ContextResource::kStream, reinterpret_cast<uint64_t>(s));
  forget_stream_attributes(s->id);
  return Connection::instance().send(protocol::StreamDestroyMsg{s->id});
}

TALLY_ENTRY(cuStreamQuery_v2000)(CUstream hStream) { return query(hStream, false); }
TALLY_ENTRY(cuStreamQuery_v7000_ptsz)(CUstream hStream) { return query(hStream, true); }
TALLY_ENTRY(cuStreamSynchronize_v2000)(CUstream hStream) { return synchronize(hStream, false); }
TALLY_ENTRY(cuStreamSynchronize_v7000_ptsz)(CUstream hStream) { return synchronize(hStream, true); }
TALLY_ENTRY(cuStreamWaitEvent_v3020)(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  return wait_event(hStream, hEvent, Flags, false);
}
TALLY_ENTRY(cuStreamWaitEvent_v7000_ptsz)(CUstream hStream, CUevent hEvent, unsigned int Flags) {
  return wait_event(hStream, hEvent, Flags, true);
}

TALLY_ENTRY(cuStreamGetPriority_v5050)(CUstream hStream, int* priority) {
  if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return describe(hStream, false, nullptr, priority);
}
TALLY_ENTRY(cuStreamGetPriority_v7000_ptsz)(CUstream hStream, int* priority) {
  if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return describe(hStream, true, nullptr, priority);
}
TALLY_ENTRY(cuStreamGetFlags_v5050)(CUstream hStream, unsigned int* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return describe(hStream, false, flags, nullptr);
}
TALLY_ENTRY(cuStreamGetFlags_v7000_ptsz)(CUstream hStream, unsigned int* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return describe(hStream, true, flags, nullptr);
}
TALLY_ENTRY(cuStreamGetCtx_v9020)(CUstream hStream, CUcontext* pctx) { return stream_context(hStream, false, pctx); }
TALLY_ENTRY(cuStreamGetCtx_v9020_ptsz)(CUstream hStream, CUcontext* pctx) {
  return stream_context(hStream, true, pctx);
}
TALLY_ENTRY(cuStreamGetCtx_v12050)(CUstream hStream, CUcontext* pCtx, CUgreenCtx* pGreenCtx) {
  return stream_contexts(hStream, false, pCtx, pGreenCtx);
}
TALLY_ENTRY(cuStreamGetGreenCtx_v12040)(CUstream hStream, CUgreenCtx* phCtx) {
  if (phCtx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GreenContextObject* green = nullptr;
  if (CUresult rc = stream_green_context(hStream, false, &green); rc != CUDA_SUCCESS) return rc;
  *phCtx = reinterpret_cast<CUgreenCtx>(green);
  return CUDA_SUCCESS;
}
TALLY_ENTRY(cuStreamGetCtx_v12050_ptsz)(CUstream hStream, CUcontext* pCtx, CUgreenCtx* pGreenCtx) {
  return stream_contexts(hStream, true, pCtx, pGreenCtx);
}
TALLY_ENTRY(cuStreamGetId_v12000)(CUstream hStream, unsigned long long* streamId) {
  return stream_id_of(hStream, false, streamId);
}
TALLY_ENTRY(cuStreamGetId_v12000_ptsz)(CUstream hStream, unsigned long long* streamId) {
  return stream_id_of(hStream, true, streamId);
}
TALLY_ENTRY(cuStreamGetDevice_v12080)(CUstream hStream, CUdevice* device) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = describe(hStream, false, nullptr, nullptr); rc != CUDA_SUCCESS) return rc;
  *device = 0;
  return CUDA_SUCCESS;
}
TALLY_ENTRY(cuStreamGetDevice_v12080_ptsz)(CUstream hStream, CUdevice* device) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = describe(hStream, true, nullptr, nullptr); rc != CUDA_SUCCESS) return rc;
  *device = 0;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuStreamIsCapturing_v10000)(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  return capture_status(hStream, false, captureStatus);
}
TALLY_ENTRY(cuStreamIsCapturing_v10000_ptsz)(CUstream hStream, CUstreamCaptureStatus* captureStatus) {
  return capture_status(hStream, true, captureStatus);
}
TALLY_ENTRY(cuStreamGetCaptureInfo_v10010)(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                           cuuint64_t* id_out) {
  return capture_status(hStream, false, captureStatus_out, id_out);
}
TALLY_ENTRY(cuStreamGetCaptureInfo_v10010_ptsz)(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                                cuuint64_t* id_out) {
  return capture_status(hStream, true, captureStatus_out, id_out);
}
TALLY_ENTRY(cuStreamGetCaptureInfo_v11030)(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                           cuuint64_t* id_out, CUgraph* graph_out,
                                           const CUgraphNode** dependencies_out, size_t* numDependencies_out) {
  return capture_status(hStream, false, captureStatus_out, id_out, graph_out, dependencies_out, numDependencies_out);
}
TALLY_ENTRY(cuStreamGetCaptureInfo_v11030_ptsz)(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                                cuuint64_t* id_out, CUgraph* graph_out,
                                                const CUgraphNode** dependencies_out, size_t* numDependencies_out) {
  return capture_status(hStream, true, captureStatus_out, id_out, graph_out, dependencies_out, numDependencies_out);
}
TALLY_ENTRY(cuStreamGetCaptureInfo_v12030)(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                           cuuint64_t* id_out, CUgraph* graph_out,
                                           const CUgraphNode** dependencies_out, const CUgraphEdgeData** edgeData_out,
                                           size_t* numDependencies_out) {
  if (edgeData_out != nullptr) *edgeData_out = nullptr;
  return tally_entry_cuStreamGetCaptureInfo_v11030(hStream, captureStatus_out, id_out, graph_out, dependencies_out,
                                                   numDependencies_out);
}
TALLY_ENTRY(cuStreamGetCaptureInfo_v12030_ptsz)(CUstream hStream, CUstreamCaptureStatus* captureStatus_out,
                                                cuuint64_t* id_out, CUgraph* graph_out,
                                                const CUgraphNode** dependencies_out,
                                                const CUgraphEdgeData** edgeData_out, size_t* numDependencies_out) {
  if (edgeData_out != nullptr) *edgeData_out = nullptr;
  return tally_entry_cuStreamGetCaptureInfo_v11030_ptsz(hStream, captureStatus_out, id_out, graph_out,
                                                        dependencies_out, numDependencies_out);
}
TALLY_ENTRY(cuThreadExchangeStreamCaptureMode_v10010)(CUstreamCaptureMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Kept per thread; tally does not enforce what a mode forbids (capture.h).
  thread_local CUstreamCaptureMode t_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  CUstreamCaptureMode previous = t_mode;
  t_mode = *mode;
  *mode = previous;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuCtxGetStreamPriorityRange_v5050)(int* leastPriority, int* greatestPriority) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (leastPriority != nullptr) *leastPriority = kLeastPriority;
  if (greatestPriority != nullptr) *greatestPriority = kGreatestPriority;
  return CUDA_SUCCESS;
}
