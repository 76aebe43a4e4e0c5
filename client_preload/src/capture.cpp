// Stream capture state (capture.h): which streams and events belong to which capture.
#include "capture.h"

#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "connection.h"
#include "stream_ids.h"

namespace tally::client {
namespace capture_detail {
std::atomic<int> g_active{0};
}  // namespace capture_detail

namespace {

using capture_detail::g_active;

struct Capture {
  uint64_t id = 0;
  uint64_t origin = 0;  // the stream that began it; only it may end it
  bool invalidated = false;
  ReplayList ops;
  GraphObject* graph = nullptr;  // what cuStreamGetCaptureInfo names, and cuStreamEndCapture returns
  std::unordered_set<uint64_t> streams;
  std::unordered_set<uint64_t> events;  // recorded in it, not since re-recorded elsewhere
};

class Captures {
 public:
  static Captures& instance() {
    static auto* captures = new Captures();  // never destroyed (see Connection)
    return *captures;
  }

  std::mutex mutex;
  std::unordered_map<uint64_t, std::shared_ptr<Capture>> by_stream;
  std::unordered_map<uint64_t, std::shared_ptr<Capture>> by_event;
  uint64_t next_id = 1;

  std::shared_ptr<Capture> of_stream(uint64_t stream) {
    auto it = by_stream.find(stream);
    return it == by_stream.end() ? nullptr : it->second;
  }
};

}  // namespace

namespace capture_detail {

bool record(uint64_t stream, bool async, const std::function<Replay()>& make, CUresult* rc) {
  Captures& all = Captures::instance();
  std::lock_guard<std::mutex> lock(all.mutex);
  std::shared_ptr<Capture> capture = all.of_stream(stream);
  if (capture == nullptr) return false;
  if (capture->invalidated) {
    *rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    return true;
  }
  if (!async) {
    capture->invalidated = true;
    *rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return true;
  }
  capture->ops.push_back(make());
  *rc = CUDA_SUCCESS;
  return true;
}

}  // namespace capture_detail

bool refused_while_capturing(uint64_t stream, CUresult* rc) {
  return captured(stream, false, rc, [] { return Replay(); });
}

bool captured_event_record(uint64_t stream, uint64_t event, unsigned flags, CUresult* rc) {
  if (g_active.load(std::memory_order_acquire) == 0) return false;  // then no event belongs to a capture
  Captures& all = Captures::instance();
  std::lock_guard<std::mutex> lock(all.mutex);
  if (auto old = all.by_event.find(event); old != all.by_event.end()) {
    old->second->events.erase(event);
    all.by_event.erase(old);
  }
  std::shared_ptr<Capture> capture = all.of_stream(stream);
  if (capture == nullptr) return false;
  capture->events.insert(event);
  all.by_event[event] = capture;
  *rc = CUDA_SUCCESS;
  if (flags & CU_EVENT_RECORD_EXTERNAL) {
    capture->ops.push_back([event](uint64_t target) {
      return Connection::instance().send(protocol::EventRecordMsg{event, target});
    });
  }
  return true;
}

bool captured_stream_wait(uint64_t stream, uint64_t event, CUresult* rc) {
  if (g_active.load(std::memory_order_acquire) == 0) return false;
  Captures& all = Captures::instance();
  std::lock_guard<std::mutex> lock(all.mutex);
  std::shared_ptr<Capture> mine = all.of_stream(stream);
  auto recorded_in = all.by_event.find(event);
  if (recorded_in != all.by_event.end()) {
    std::shared_ptr<Capture> theirs = recorded_in->second;
    *rc = CUDA_SUCCESS;
    if (mine == nullptr) {  // joins the capture
      theirs->streams.insert(stream);
      all.by_stream[stream] = theirs;
    } else if (mine != theirs) {  // CUDA cannot merge two captures either
      mine->invalidated = theirs->invalidated = true;
      *rc = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    }
    return true;  // within one capture, the capture order already holds the dependency
  }
  if (mine == nullptr) return false;
  mine->ops.push_back([event](uint64_t target) {
    return Connection::instance().send(protocol::StreamWaitEventMsg{target, event});
  });
  *rc = CUDA_SUCCESS;
  return true;
}

CUresult begin_capture(uint64_t stream, CUstreamCaptureMode mode) {
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  if (stream == kLegacyStream) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // as in CUDA
  Captures& all = Captures::instance();
  std::lock_guard<std::mutex> lock(all.mutex);
  if (all.of_stream(stream) != nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  auto capture = std::make_shared<Capture>();
  capture->id = all.next_id++;
  capture->origin = stream;
  capture->graph = new GraphObject();
  capture->streams.insert(stream);
  all.by_stream[stream] = capture;
  g_active.fetch_add(1, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult end_capture(uint64_t stream, GraphObject** graph) {
  Captures& all = Captures::instance();
  std::lock_guard<std::mutex> lock(all.mutex);
  std::shared_ptr<Capture> capture = all.of_stream(stream);
  if (capture == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  if (capture->origin != stream) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  for (uint64_t s : capture->streams) all.by_stream.erase(s);
  for (uint64_t e : capture->events) all.by_event.erase(e);
  g_active.fetch_sub(1, std::memory_order_release);
  if (capture->invalidated) {
    capture->graph->tag.store(ObjectTag::kDead);
    *graph = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  std::atomic_store(&capture->graph->ops, std::shared_ptr<const ReplayList>(
                                              std::make_shared<const ReplayList>(std::move(capture->ops))));
  *graph = capture->graph;
  return CUDA_SUCCESS;
}

CUresult record_on_private_stream(const std::function<CUresult(CUstream)>& issue, ReplayList* out) {
  // One stream object per thread, known to no server: every operation on it is captured.
  static std::atomic<uint64_t> next{1};
  thread_local StreamObject* stream = [] {
    auto* s = new StreamObject();
    s->id = kPrivateStreamBit | next.fetch_add(1, std::memory_order_relaxed);
    return s;
  }();
  if (CUresult rc = begin_capture(stream->id, CU_STREAM_CAPTURE_MODE_RELAXED); rc != CUDA_SUCCESS) return rc;
  CUresult issued = issue(reinterpret_cast<CUstream>(stream));
  GraphObject* graph = nullptr;
  CUresult ended = end_capture(stream->id, &graph);
  if (issued != CUDA_SUCCESS) return issued;
  if (ended != CUDA_SUCCESS) return ended;
  *out = *std::atomic_load(&graph->ops);
  delete graph;  // never handed out
  return CUDA_SUCCESS;
}

CaptureInfo capture_info(uint64_t stream) {
  CaptureInfo info;
  if (g_active.load(std::memory_order_acquire) == 0) return info;
  Captures& all = Captures::instance();
  std::lock_guard<std::mutex> lock(all.mutex);
  if (std::shared_ptr<Capture> capture = all.of_stream(stream)) {
    info.status = capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    info.id = capture->id;
    info.graph = capture->graph;
  }
  return info;
}

}  // namespace tally::client
