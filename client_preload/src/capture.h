// Stream capture (cuStreamBeginCapture ... cuStreamEndCapture) and the graphs it
// makes. A stream being captured sends nothing: each operation on it becomes a
// Replay, a closure that performs the same operation on a given stream later.
// cuGraphLaunch replays a graph's operations, in the order they were captured, on
// the launch stream. That order is a valid execution order of the captured graph
// (an operation can only depend on operations captured before it), so results
// are those of the graph; branches that CUDA could run concurrently run one after
// another. Operations are then scheduled by the server like any other, so a
// high-priority job's graphs keep their priority.
//
// Streams join a capture as CUDA's do: by waiting on an event recorded in it.
// Synchronous operations on a capturing stream fail with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate the capture.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "driver_headers.h"
#include "driver_objects.h"

namespace tally::client {

using Replay = std::function<CUresult(uint64_t stream)>;
using ReplayList = std::vector<Replay>;

struct GraphNode;  // graph_nodes.h

// A graph made by capture (`ops`, set when the capture ends) or built node by node
// (cuGraphCreate: `built`, its nodes under `mutex`).
struct GraphObject {
  std::atomic<ObjectTag> tag{ObjectTag::kGraph};
  std::shared_ptr<const ReplayList> ops;
  bool built = false;
  std::mutex mutex;
  std::vector<GraphNode*> nodes;  // in the order they were added; never freed (see driver_objects.h)
};

struct GraphExecObject {
  std::atomic<ObjectTag> tag{ObjectTag::kGraphExec};
  std::shared_ptr<const ReplayList> ops;
  std::mutex mutex;                                        // serializes node updates
  std::unordered_map<const GraphNode*, size_t> first_op;  // built graphs: where each node's ops start
};

inline GraphObject* as_graph(CUgraph g) { return live_object<GraphObject, ObjectTag::kGraph>(g); }
inline GraphExecObject* as_graph_exec(CUgraphExec g) {
  return live_object<GraphExecObject, ObjectTag::kGraphExec>(g);
}

namespace capture_detail {
extern std::atomic<int> g_active;  // captures in progress in the process
bool record(uint64_t stream, bool async, const std::function<Replay()>& make, CUresult* rc);
}  // namespace capture_detail

// If `stream` is being captured: an asynchronous operation is recorded (make()
// builds its Replay) and a synchronous one invalidates the capture; either way
// returns true with the call's result in *rc. False (and nothing done) otherwise.
// One atomic load when no capture is in progress.
template <class MakeReplay>
bool captured(uint64_t stream, bool async, CUresult* rc, MakeReplay&& make) {
  if (capture_detail::g_active.load(std::memory_order_acquire) == 0) return false;
  return capture_detail::record(stream, async, std::function<Replay()>(std::forward<MakeReplay>(make)), rc);
}

// A synchronizing call on `stream` (query, synchronize): refused while it is captured.
bool refused_while_capturing(uint64_t stream, CUresult* rc);

// cuEventRecord: on a capturing stream the event marks a point of the capture
// (what later waits on it join) and nothing is sent, unless the record is
// external (CU_EVENT_RECORD_EXTERNAL), which is replayed. Off capture, the event
// stops belonging to any capture and false is returned.
bool captured_event_record(uint64_t stream, uint64_t event, unsigned flags, CUresult* rc);

// cuStreamWaitEvent: waiting on an event recorded in a capture makes the stream
// join that capture (nothing to send). A capturing stream waiting on any other
// event records the wait.
bool captured_stream_wait(uint64_t stream, uint64_t event, CUresult* rc);

// What `issue` does on a stream of its own, recorded as a capture records it and
// sent nowhere: how a node added to a graph (graph_nodes.cpp) gets the same
// replays as the stream operation it stands for.
CUresult record_on_private_stream(const std::function<CUresult(CUstream)>& issue, ReplayList* out);

// Capture control, for the entry points in graphs.cpp.
CUresult begin_capture(uint64_t stream, CUstreamCaptureMode mode);
CUresult end_capture(uint64_t stream, GraphObject** graph);
struct CaptureInfo {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  uint64_t id = 0;
  GraphObject* graph = nullptr;
};
CaptureInfo capture_info(uint64_t stream);

}  // namespace tally::client
