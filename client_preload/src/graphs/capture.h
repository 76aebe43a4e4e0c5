// Stream capture (cuStreamBeginCapture ... cuStreamEndCapture) and the graphs it
// makes. A stream being captured sends nothing: each operation on it becomes a
// node of the capture's graph (graph_objects.h) holding a Replay, a closure that
// performs the same operation on a given stream later. A node depends on what its
// stream did before it (the stream's "tips"); a stream that waits on an event
// recorded in the capture takes on the event's tips, so edges are those CUDA's
// capture makes. cuGraphLaunch replays the graph's nodes, in an order that
// respects every edge (for a captured graph: the order they were captured), on
// the launch stream; branches that CUDA could run concurrently run one after
// another. Operations are then scheduled by the server like any other, so a
// high-priority job's graphs keep their priority.
//
// Streams join a capture as CUDA's do: by waiting on an event recorded in it.
// Synchronous operations on a capturing stream fail with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidate the capture. As in CUDA, the
// capture must end on the stream that began it (another fails with UNMATCHED and
// invalidates it), every stream that joined must be joined back into that one by
// then (else UNJOINED, and the capture ends without a graph), and while a stream that
// synchronizes with the legacy default stream is captured, work on the legacy stream
// fails with CUDA_ERROR_STREAM_CAPTURE_IMPLICIT and invalidates the capture (asking
// whether the legacy stream is capturing fails so too, and invalidates nothing).
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "driver_headers.h"
#include "graphs/graph_objects.h"

namespace tally::client {

// Fills in a captured operation's node: its type, its replay (node.ops) and what
// the graph APIs report about it. Called only while the stream is being captured.
using DescribeNode = std::function<void(GraphNode& node)>;

namespace capture_detail {
extern std::atomic<int> g_active;  // captures in progress in the process
bool record(uint64_t stream, bool async, const DescribeNode& describe, CUresult* rc);
}  // namespace capture_detail

// If `stream` is being captured: an asynchronous operation becomes a node of the
// capture's graph (describe() fills it in), depending on what the stream did
// before, and a synchronous one invalidates the capture; either way returns true
// with the call's result in *rc. False (and nothing done) otherwise. One atomic
// load when no capture is in progress.
template <class Describe>
bool captured(uint64_t stream, bool async, CUresult* rc, Describe&& describe) {
  if (capture_detail::g_active.load(std::memory_order_acquire) == 0) return false;
  return capture_detail::record(stream, async, DescribeNode(std::forward<Describe>(describe)), rc);
}

// A synchronizing call on `stream` (query, synchronize): refused while it is captured.
bool refused_while_capturing(uint64_t stream, CUresult* rc);

// cuEventRecord: on a capturing stream the event marks a point of the capture
// (what later waits on it join) and nothing is sent, unless the record is
// external (CU_EVENT_RECORD_EXTERNAL), which is replayed. Off capture, the event
// stops belonging to any capture and false is returned.
bool captured_event_record(uint64_t stream, const EventObject* event, unsigned flags, CUresult* rc);

// cuStreamWaitEvent: waiting on an event recorded in a capture makes the stream
// join that capture (nothing to send). A capturing stream waiting on any other
// event records the wait.
bool captured_stream_wait(uint64_t stream, const EventObject* event, CUresult* rc);

// What `issue` does on a stream of its own, recorded as a capture records it and
// sent nowhere: how a node added to a graph (graph_nodes.cpp) gets the same
// replays (and copy or memset shape) as the stream operation it stands for.
CUresult record_on_private_stream(const std::function<CUresult(CUstream)>& issue, GraphNode* into);

// Capture control, for the entry points in graphs.cpp. begin_capture_to_graph
// (cuStreamBeginCaptureToGraph) adds to the job's `graph` instead of a new one,
// the first operation after the nodes `after`; end_capture then returns `graph`.
// `syncs_with_legacy`: the stream is a blocking one (or a per-thread default stream).
CUresult begin_capture(uint64_t stream, CUstreamCaptureMode mode, bool syncs_with_legacy = false);
CUresult begin_capture_to_graph(uint64_t stream, GraphObject* graph, const std::vector<GraphNode*>& after,
                                CUstreamCaptureMode mode, bool syncs_with_legacy = false);
CUresult end_capture(uint64_t stream, GraphObject** graph);
struct CaptureInfo {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  uint64_t id = 0;
  GraphObject* graph = nullptr;
  bool into_job_graph = false;   // cuStreamBeginCaptureToGraph's: the graph is the job's own
  // The nodes the stream's next operation will depend on (valid until the stream's
  // next captured operation, as CUDA documents).
  const CUgraphNode* dependencies = nullptr;
  size_t dependency_count = 0;
  // Not CUDA_SUCCESS: what asking about the stream fails with (the legacy stream's
  // CUDA_ERROR_STREAM_CAPTURE_IMPLICIT).
  CUresult error = CUDA_SUCCESS;
};
CaptureInfo capture_info(uint64_t stream);

// cuStreamUpdateCaptureDependencies: what the stream's next captured operation
// depends on becomes `nodes` (replace) or gains them.
CUresult update_capture_dependencies(uint64_t stream, const std::vector<GraphNode*>& nodes, bool replace);

}  // namespace tally::client
