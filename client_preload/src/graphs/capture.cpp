// Stream capture state (capture.h): which streams and events belong to which capture.
#include "graphs/capture.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "connection/connection.h"
#include "graphs/graph_nodes.h"
#include "streams/stream_ids.h"

namespace tally::client {
namespace capture_detail {
std::atomic<int> g_active{0};
}  // namespace capture_detail

namespace {

using capture_detail::g_active;

struct Capture {
  uint64_t id = 0;
  uint64_t origin = 0;  // the stream that began it; only it may end it
  bool origin_syncs_with_legacy = false;   // blocking: work on the legacy stream would wait for it
  bool invalidated = false;
  GraphObject* graph = nullptr;  // what cuStreamGetCaptureInfo names, and cuStreamEndCapture returns
  bool owns_graph = true;        // false: the job's graph (cuStreamBeginCaptureToGraph)
  // Per stream in the capture: the nodes its next operation depends on.
  std::unordered_map<uint64_t, std::vector<GraphNode*>> tips;
  // Per event recorded in it (not since re-recorded elsewhere): the tips of its stream then.
  std::unordered_map<uint64_t, std::vector<GraphNode*>> event_tips;

  // A new node on `stream`, after what the stream did before.
  GraphNode* add_node(uint64_t stream) {
    auto* node = new GraphNode();
    node->graph = graph;
    std::vector<GraphNode*>& before = tips[stream];
    node->depends_on = before;
    before.assign(1, node);
    std::lock_guard<std::mutex> lock(graph->mutex);
    graph->nodes.push_back(node);
    return node;
  }
};

// Adds the nodes of `more` that `into` lacks.
void merge_tips(std::vector<GraphNode*>* into, const std::vector<GraphNode*>& more) {
  for (GraphNode* node : more)
    if (std::find(into->begin(), into->end(), node) == into->end()) into->push_back(node);
}

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

  // The captures work on the legacy stream would depend on (implicitly, through a
  // blocking stream they capture).
  std::vector<std::shared_ptr<Capture>> behind_legacy() {
    std::vector<std::shared_ptr<Capture>> out;
    for (const auto& [stream, capture] : by_stream)
      if (capture->origin_syncs_with_legacy && std::find(out.begin(), out.end(), capture) == out.end())
        out.push_back(capture);
    return out;
  }

  // Every stream and event leaves the capture; its graph goes unless it is the job's.
  void finish(const std::shared_ptr<Capture>& capture, bool keep_graph) {
    for (const auto& [s, tips] : capture->tips) by_stream.erase(s);
    for (const auto& [e, tips] : capture->event_tips) by_event.erase(e);
    g_active.fetch_sub(1, std::memory_order_release);
    if (!keep_graph && capture->owns_graph) {
      destroy_graph(capture->graph);
    } else {
      capture->graph->capturing.store(false, std::memory_order_release);   // the job's graph stays its own
    }
  }
};

// Whether every node in `tails` is one of `heads` or something they depend on: the
// streams that forked from the origin are joined back into it.
bool all_joined(const std::vector<GraphNode*>& heads, const std::vector<GraphNode*>& tails) {
  std::unordered_set<GraphNode*> reached(heads.begin(), heads.end());
  std::vector<GraphNode*> todo(heads.begin(), heads.end());
  while (!todo.empty()) {
    GraphNode* node = todo.back();
    todo.pop_back();
    for (GraphNode* before : node->depends_on)
      if (reached.insert(before).second) todo.push_back(before);
  }
  for (GraphNode* tail : tails)
    if (reached.count(tail) == 0) return false;
  return true;
}

}  // namespace

namespace capture_detail {

bool record(uint64_t stream, bool async, const DescribeNode& describe, CUresult* rc) {
  Captures& all = Captures::instance();
  std::lock_guard<std::mutex> lock(all.mutex);
  std::shared_ptr<Capture> capture = all.of_stream(stream);
  if (capture == nullptr) {
    if (stream != kLegacyStream) return false;
    std::vector<std::shared_ptr<Capture>> behind = all.behind_legacy();
    if (behind.empty()) return false;
    for (const auto& c : behind) c->invalidated = true;   // the work would wait for a captured stream
    *rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    return true;
  }
  if (capture->invalidated) {
    *rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    return true;
  }
  if (!async) {
    capture->invalidated = true;
    *rc = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    return true;
  }
  describe(*capture->add_node(stream));
  *rc = CUDA_SUCCESS;
  return true;
}

}  // namespace capture_detail

bool refused_while_capturing(uint64_t stream, CUresult* rc) {
  return captured(stream, false, rc, [](GraphNode&) {});
}

bool captured_event_record(uint64_t stream, const EventObject* handle, unsigned flags, CUresult* rc) {
  if (g_active.load(std::memory_order_acquire) == 0) return false;  // then no event belongs to a capture
  const uint64_t event = handle->id;
  Captures& all = Captures::instance();
  std::lock_guard<std::mutex> lock(all.mutex);
  if (auto old = all.by_event.find(event); old != all.by_event.end()) {
    old->second->event_tips.erase(event);
    all.by_event.erase(old);
  }
  std::shared_ptr<Capture> capture = all.of_stream(stream);
  if (capture == nullptr) return false;
  *rc = CUDA_SUCCESS;
  if (flags & CU_EVENT_RECORD_EXTERNAL) {  // a node of its own, replayed each launch
    GraphNode* node = capture->add_node(stream);
    node->type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
    node->event = reinterpret_cast<CUevent>(const_cast<EventObject*>(handle));
    node->ops.push_back([event](uint64_t target) {
      return Connection::instance().send(protocol::EventRecordMsg{event, target});
    });
  }
  capture->event_tips[event] = capture->tips[stream];
  all.by_event[event] = capture;
  return true;
}

bool captured_stream_wait(uint64_t stream, const EventObject* handle, CUresult* rc) {
  if (g_active.load(std::memory_order_acquire) == 0) return false;
  const uint64_t event = handle->id;
  Captures& all = Captures::instance();
  std::lock_guard<std::mutex> lock(all.mutex);
  std::shared_ptr<Capture> mine = all.of_stream(stream);
  auto recorded_in = all.by_event.find(event);
  if (recorded_in != all.by_event.end()) {
    std::shared_ptr<Capture> theirs = recorded_in->second;
    *rc = CUDA_SUCCESS;
    if (mine == nullptr) {  // joins the capture
      theirs->tips[stream] = theirs->event_tips[event];
      all.by_stream[stream] = theirs;
    } else if (mine != theirs) {  // CUDA cannot merge two captures either
      mine->invalidated = theirs->invalidated = true;
      *rc = CUDA_ERROR_STREAM_CAPTURE_ISOLATION;
    } else {  // within one capture: the stream's next node also waits for the event's
      merge_tips(&mine->tips[stream], mine->event_tips[event]);
    }
    return true;
  }
  if (mine == nullptr) return false;
  GraphNode* node = mine->add_node(stream);
  node->type = CU_GRAPH_NODE_TYPE_WAIT_EVENT;
  node->event = reinterpret_cast<CUevent>(const_cast<EventObject*>(handle));
  node->ops.push_back([event](uint64_t target) {
    return Connection::instance().send(protocol::StreamWaitEventMsg{target, event});
  });
  *rc = CUDA_SUCCESS;
  return true;
}

CUresult begin_capture(uint64_t stream, CUstreamCaptureMode mode, bool syncs_with_legacy) {
  return begin_capture_to_graph(stream, nullptr, {}, mode, syncs_with_legacy);
}

CUresult begin_capture_to_graph(uint64_t stream, GraphObject* graph, const std::vector<GraphNode*>& after,
                                CUstreamCaptureMode mode, bool syncs_with_legacy) {
  if (mode != CU_STREAM_CAPTURE_MODE_GLOBAL && mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
      mode != CU_STREAM_CAPTURE_MODE_RELAXED)
    return CUDA_ERROR_INVALID_VALUE;
  if (stream == kLegacyStream) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;  // as in CUDA
  Captures& all = Captures::instance();
  std::lock_guard<std::mutex> lock(all.mutex);
  if (all.of_stream(stream) != nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  if (graph != nullptr) {
    bool idle = false;
    if (!graph->capturing.compare_exchange_strong(idle, true)) return CUDA_ERROR_ILLEGAL_STATE;  // captured already
  }
  auto capture = std::make_shared<Capture>();
  capture->id = all.next_id++;
  capture->origin = stream;
  capture->origin_syncs_with_legacy = syncs_with_legacy;
  capture->owns_graph = graph == nullptr;
  capture->graph = graph != nullptr ? graph : new GraphObject();
  capture->graph->capturing.store(true);
  capture->tips[stream] = after;
  all.by_stream[stream] = capture;
  g_active.fetch_add(1, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult end_capture(uint64_t stream, GraphObject** graph) {
  Captures& all = Captures::instance();
  std::lock_guard<std::mutex> lock(all.mutex);
  std::shared_ptr<Capture> capture = all.of_stream(stream);
  if (capture == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  if (capture->origin != stream) {
    capture->invalidated = true;    // as CUDA: the wrong stream's end spoils the capture
    return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  }
  *graph = nullptr;
  if (capture->invalidated) {
    all.finish(capture, false);
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  const std::vector<GraphNode*>& heads = capture->tips[stream];
  for (const auto& [s, tips] : capture->tips) {
    if (s != stream && !all_joined(heads, tips)) {
      all.finish(capture, false);
      return CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
    }
  }
  all.finish(capture, true);
  *graph = capture->graph;
  return CUDA_SUCCESS;
}

CUresult record_on_private_stream(const std::function<CUresult(CUstream)>& issue, GraphNode* into) {
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
  // One operation on one stream: a chain of nodes (a copy may take several), in order.
  for (GraphNode* node : graph->nodes) {
    into->ops.insert(into->ops.end(), node->ops.begin(), node->ops.end());
    if (node == graph->nodes.front()) {
      into->copy = node->copy;
      into->memset = node->memset;
    }
    delete node;  // never handed out
  }
  delete graph;
  return CUDA_SUCCESS;
}

CUresult update_capture_dependencies(uint64_t stream, const std::vector<GraphNode*>& nodes, bool replace) {
  Captures& all = Captures::instance();
  std::lock_guard<std::mutex> lock(all.mutex);
  std::shared_ptr<Capture> capture = all.of_stream(stream);
  if (capture == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  if (capture->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  for (GraphNode* node : nodes)
    if (node->graph != capture->graph) return CUDA_ERROR_INVALID_VALUE;   // not a node of the capture's graph
  std::vector<GraphNode*>& tips = capture->tips[stream];
  if (replace) tips.clear();
  merge_tips(&tips, nodes);
  return CUDA_SUCCESS;
}

CaptureInfo capture_info(uint64_t stream) {
  CaptureInfo info;
  if (g_active.load(std::memory_order_acquire) == 0) return info;
  Captures& all = Captures::instance();
  std::lock_guard<std::mutex> lock(all.mutex);
  if (stream == kLegacyStream && !all.behind_legacy().empty()) {
    info.error = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    return info;
  }
  if (std::shared_ptr<Capture> capture = all.of_stream(stream)) {
    info.status = capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    info.id = capture->id;
    info.graph = capture->graph;
    info.into_job_graph = !capture->owns_graph;
    const std::vector<GraphNode*>& tips = capture->tips[stream];
    info.dependencies = reinterpret_cast<const CUgraphNode*>(tips.data());
    info.dependency_count = tips.size();
  }
  return info;
}

}  // namespace tally::client
