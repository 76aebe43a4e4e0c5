// Events. As with streams, the client picks the id, so creating, recording and
// destroying are fire-and-forget; query, synchronize and elapsed time ask the
// server.
#include <atomic>
#include <cstring>

#include "graphs/capture.h"
#include "connection/connection.h"
#include "contexts/contexts.h"
#include "driver_objects.h"
#include "entry_points/entry_point.h"
#include "streams/stream_ids.h"
#include "streams/timing_events.h"

namespace tally::client {
namespace {

std::atomic<uint64_t> g_next_event{1};

constexpr unsigned kKnownFlags = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;

CUresult record(CUevent event, CUstream stream, unsigned flags, bool per_thread) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if ((flags & ~unsigned{CU_EVENT_RECORD_EXTERNAL}) != 0) return CUDA_ERROR_INVALID_VALUE;
  EventObject* e = as_event(event);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  protocol::EventRecordMsg m{e->id, 0};
  if (CUresult rc = stream_id(stream, per_thread, &m.stream); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc; captured_event_record(m.stream, e, flags, &rc)) return rc;
  return Connection::instance().send(m);
}

CUresult elapsed(float* ms, CUevent start, CUevent end) {
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  EventObject* a = as_event(start);
  EventObject* b = as_event(end);
  if (a == nullptr || b == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  protocol::ElapsedTimeReplyMsg out{};
  if (CUresult rc = request_reply(protocol::EventElapsedTimeMsg{a->id, b->id}, protocol::MessageKind::ElapsedTimeReply,
                                  &out);
      rc != CUDA_SUCCESS)
    return rc;
  *ms = static_cast<float>(out.ms);
  return CUDA_SUCCESS;
}

}  // namespace

EventObject* new_event_object(unsigned flags) {
  auto* event = new EventObject();
  event->id = g_next_event.fetch_add(1, std::memory_order_relaxed);
  event->flags = flags;
  return event;
}

uint64_t create_timing_event() {
  if (Connection::instance().usable() != CUDA_SUCCESS) return 0;
  const uint64_t id = g_next_event.fetch_add(1, std::memory_order_relaxed);
  return Connection::instance().send(protocol::EventCreateMsg{id, 0, 0}) == CUDA_SUCCESS ? id : 0;
}

CUresult record_timing_event(uint64_t event, uint64_t stream) {
  return Connection::instance().send(protocol::EventRecordMsg{event, stream});
}

CUresult synchronize_timing_event(uint64_t event) {
  return Connection::instance().request_done(protocol::EventSynchronizeMsg{event});
}

CUresult timing_event_times(uint64_t reference, const uint64_t* events, uint32_t count, double* ms) {
  if (count == 0 || count > kTimingEventsPerRequest) return CUDA_ERROR_INVALID_VALUE;
  Reply reply;
  if (CUresult rc = Connection::instance().request(protocol::EventTimesMsg{reference, count, 0}, &reply, events,
                                                   count * static_cast<uint32_t>(sizeof(uint64_t)));
      rc != CUDA_SUCCESS)
    return rc;
  const size_t want = sizeof(protocol::EventTimesReplyMsg) + count * sizeof(double);
  if (CUresult rc = Connection::expect_kind(reply, protocol::MessageKind::EventTimesReply, want); rc != CUDA_SUCCESS)
    return rc;
  std::memcpy(ms, reply.payload.data() + sizeof(protocol::EventTimesReplyMsg), count * sizeof(double));
  return CUDA_SUCCESS;
}

void destroy_timing_event(uint64_t event) { (void)Connection::instance().send(protocol::EventDestroyMsg{event}); }

}  // namespace tally::client

using namespace tally::client;
namespace protocol = tally::protocol;

TALLY_ENTRY(cuEventCreate_v2000)(CUevent* phEvent, unsigned int Flags) {
  if (phEvent == nullptr || (Flags & ~kKnownFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  // Interprocess events need timing disabled (cuda.h); other jobs open them with ipc.cpp.
  if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = check_current_context_for_new_resource(); rc != CUDA_SUCCESS) return rc;
  EventObject* event = new_event_object(Flags);
  if (CUresult rc = Connection::instance().send(protocol::EventCreateMsg{event->id, Flags, 0}); rc != CUDA_SUCCESS) {
    event->tag.store(ObjectTag::kDead);
    return rc;
  }
  *phEvent = reinterpret_cast<CUevent>(event);
  note_context_resource(ContextResource::kEvent, reinterpret_cast<uint64_t>(event));
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuEventDestroy_v4000)(CUevent hEvent) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  EventObject* e = as_event(hEvent);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  ObjectTag expected = ObjectTag::kEvent;
  if (!e->tag.compare_exchange_strong(expected, ObjectTag::kDead)) return CUDA_ERROR_INVALID_HANDLE;
  forget_context_resource(ContextResource::kEvent, reinterpret_cast<uint64_t>(e));
  return Connection::instance().send(protocol::EventDestroyMsg{e->id});
}

TALLY_ENTRY(cuEventRecord_v2000)(CUevent hEvent, CUstream hStream) { return record(hEvent, hStream, 0, false); }
TALLY_ENTRY(cuEventRecord_v7000_ptsz)(CUevent hEvent, CUstream hStream) { return record(hEvent, hStream, 0, true); }
TALLY_ENTRY(cuEventRecordWithFlags_v11010)(CUevent hEvent, CUstream hStream, unsigned int flags) {
  return record(hEvent, hStream, flags, false);
}
TALLY_ENTRY(cuEventRecordWithFlags_v11010_ptsz)(CUevent hEvent, CUstream hStream, unsigned int flags) {
  return record(hEvent, hStream, flags, true);
}

TALLY_ENTRY(cuEventQuery_v2000)(CUevent hEvent) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  EventObject* e = as_event(hEvent);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return Connection::instance().request_done(protocol::EventQueryMsg{e->id});
}

TALLY_ENTRY(cuEventSynchronize_v2000)(CUevent hEvent) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  EventObject* e = as_event(hEvent);
  if (e == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return Connection::instance().request_done(protocol::EventSynchronizeMsg{e->id});
}

TALLY_ENTRY(cuEventElapsedTime_v2000)(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  return elapsed(pMilliseconds, hStart, hEnd);
}
TALLY_ENTRY(cuEventElapsedTime_v12080)(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
  return elapsed(pMilliseconds, hStart, hEnd);
}
