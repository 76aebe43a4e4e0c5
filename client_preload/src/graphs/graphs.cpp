// Graphs made by stream capture (capture.h): begin and end capture; instantiation,
// launch and destruction of any graph (graph_nodes.cpp builds graphs node by node,
// graph_update.cpp updates instantiated ones).
#include <memory>

#include "graphs/capture.h"
#include "connection/connection.h"
#include "graphs/graph_nodes.h"
#include "graphs/memory_nodes.h"
#include "graphs/server_graphs.h"
#include "entry_points/entry_point.h"
#include "streams/stream_ids.h"

namespace tally::client {
namespace {

// A blocking stream, or a per-thread default stream: work on the legacy stream waits for it.
bool syncs_with_legacy(CUstream stream, uint64_t id) {
  if (id & kPerThreadStreamBit) return true;
  StreamObject* s = id == kLegacyStream ? nullptr : as_stream(stream);
  return s != nullptr && !(s->flags & CU_STREAM_NON_BLOCKING);
}

CUresult begin(CUstream stream, CUstreamCaptureMode mode, bool per_thread) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  uint64_t id = 0;
  if (CUresult rc = stream_id(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  return begin_capture(id, mode, syncs_with_legacy(stream, id));
}

CUresult begin_to_graph(CUstream stream, CUgraph graph, const CUgraphNode* deps, size_t n,
                        CUstreamCaptureMode mode, bool per_thread) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  GraphObject* g = as_graph(graph);
  if (g == nullptr || (n > 0 && deps == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<GraphNode*> after;
  {
    std::lock_guard<std::mutex> lock(g->mutex);
    for (size_t i = 0; i < n; ++i) {
      GraphNode* d = as_graph_node(deps[i]);
      if (d == nullptr || d->graph != g) return CUDA_ERROR_INVALID_VALUE;
      after.push_back(d);
    }
  }
  uint64_t id = 0;
  if (CUresult rc = stream_id(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  return begin_capture_to_graph(id, g, after, mode, syncs_with_legacy(stream, id));
}

CUresult update_dependencies(CUstream stream, CUgraphNode* deps, size_t n, unsigned flags, bool per_thread) {
  if ((n > 0 && deps == nullptr) ||
      (flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES && flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES))
    return CUDA_ERROR_INVALID_VALUE;
  std::vector<GraphNode*> nodes;
  for (size_t i = 0; i < n; ++i) {
    GraphNode* node = as_graph_node(deps[i]);
    if (node == nullptr) return CUDA_ERROR_INVALID_VALUE;
    nodes.push_back(node);
  }
  uint64_t id = 0;
  if (CUresult rc = stream_id(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  return update_capture_dependencies(id, nodes, flags == CU_STREAM_SET_CAPTURE_DEPENDENCIES);
}

CUresult end(CUstream stream, CUgraph* graph, bool per_thread) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  uint64_t id = 0;
  if (CUresult rc = stream_id(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  // A capture into the job's own graph may be ended without asking for it back.
  if (graph == nullptr && !capture_info(id).into_job_graph) return CUDA_ERROR_INVALID_VALUE;
  GraphObject* made = nullptr;
  CUresult rc = end_capture(id, &made);
  if (graph != nullptr) *graph = reinterpret_cast<CUgraph>(made);
  return rc;
}

CUresult instantiate(CUgraphExec* exec, CUgraph graph, unsigned long long flags) {
  if (exec == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GraphObject* g = as_graph(graph);
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Auto-free acts on memory nodes (memory_nodes.h); node priorities have nothing
  // to act on; upload is a no-op (nothing lives on the device).
  constexpr unsigned long long kKnown = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                        CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
                                        CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) return CUDA_ERROR_NOT_SUPPORTED;
  if (flags & ~kKnown) return CUDA_ERROR_INVALID_VALUE;
  auto ops = std::make_shared<ReplayList>();
  std::vector<ExecNode> nodes;
  if (CUresult rc = instantiate_graph(g, ops.get(), &nodes); rc != CUDA_SUCCESS) return rc;
  uint64_t server_graph = 0;
  HostCalls hosts;
  if (CUresult rc = define_on_server(nodes, &server_graph, &hosts); rc != CUDA_SUCCESS) return rc;
  auto* made = new GraphExecObject();
  made->server_graph = server_graph;
  made->server_hosts = std::move(hosts);
  made->ops = std::move(ops);
  made->nodes = std::move(nodes);
  for (size_t i = 0; i < made->nodes.size(); ++i) made->index[made->nodes[i].source] = i;
  made->flags = flags;
  collect_graph_memory(g, made);
  made->user_objects = std::make_shared<UserObjectRefs>();
  hold_user_objects(g, made->user_objects.get());
  *exec = reinterpret_cast<CUgraphExec>(made);
  return CUDA_SUCCESS;
}

CUresult launch(CUgraphExec exec, CUstream stream, bool per_thread) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  GraphExecObject* e = as_graph_exec(exec);
  if (e == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t id = 0;
  if (CUresult rc = stream_id(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = begin_graph_memory(e); rc != CUDA_SUCCESS) return rc;
  if (uint64_t kept = e->server_graph.load(); kept != 0)   // one message
    return launch_on_server(kept, id, std::atomic_load(&e->server_hosts));
  std::shared_ptr<const ReplayList> ops = std::atomic_load(&e->ops);
  std::shared_ptr<const std::vector<bool>> skipped = std::atomic_load(&e->skipped);
  if (ops == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < ops->size(); ++i) {
    if (skipped != nullptr && i < skipped->size() && (*skipped)[i]) continue;   // a disabled node's
    if (CUresult rc = (*ops)[i](id); rc != CUDA_SUCCESS) return rc;
  }
  return CUDA_SUCCESS;
}

CUresult upload(CUgraphExec exec, CUstream stream, bool per_thread) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  if (as_graph_exec(exec) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uint64_t id = 0;
  return stream_id(stream, per_thread, &id);
}

}  // namespace
}  // namespace tally::client

using namespace tally::client;

TALLY_ENTRY(cuStreamBeginCapture_v10000)(CUstream hStream) {
  return begin(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}
TALLY_ENTRY(cuStreamBeginCapture_v10000_ptsz)(CUstream hStream) {
  return begin(hStream, CU_STREAM_CAPTURE_MODE_GLOBAL, true);
}
TALLY_ENTRY(cuStreamBeginCapture_v10010)(CUstream hStream, CUstreamCaptureMode mode) {
  return begin(hStream, mode, false);
}
TALLY_ENTRY(cuStreamBeginCapture_v10010_ptsz)(CUstream hStream, CUstreamCaptureMode mode) {
  return begin(hStream, mode, true);
}
// Edge data only refines programmatic launches: every edge is a full dependency here.
TALLY_ENTRY(cuStreamBeginCaptureToGraph_v12030)(CUstream hStream, CUgraph hGraph, const CUgraphNode* dependencies,
                                                const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                                CUstreamCaptureMode mode) {
  (void)dependencyData;
  return begin_to_graph(hStream, hGraph, dependencies, numDependencies, mode, false);
}
TALLY_ENTRY(cuStreamBeginCaptureToGraph_v12030_ptsz)(CUstream hStream, CUgraph hGraph,
                                                     const CUgraphNode* dependencies,
                                                     const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                                     CUstreamCaptureMode mode) {
  (void)dependencyData;
  return begin_to_graph(hStream, hGraph, dependencies, numDependencies, mode, true);
}
TALLY_ENTRY(cuStreamUpdateCaptureDependencies_v11030)(CUstream hStream, CUgraphNode* dependencies,
                                                     size_t numDependencies, unsigned int flags) {
  return update_dependencies(hStream, dependencies, numDependencies, flags, false);
}
TALLY_ENTRY(cuStreamUpdateCaptureDependencies_v11030_ptsz)(CUstream hStream, CUgraphNode* dependencies,
                                                          size_t numDependencies, unsigned int flags) {
  return update_dependencies(hStream, dependencies, numDependencies, flags, true);
}
TALLY_ENTRY(cuStreamUpdateCaptureDependencies_v12030)(CUstream hStream, CUgraphNode* dependencies,
                                                     const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                                     unsigned int flags) {
  (void)dependencyData;
  return update_dependencies(hStream, dependencies, numDependencies, flags, false);
}
TALLY_ENTRY(cuStreamUpdateCaptureDependencies_v12030_ptsz)(CUstream hStream, CUgraphNode* dependencies,
                                                          const CUgraphEdgeData* dependencyData,
                                                          size_t numDependencies, unsigned int flags) {
  (void)dependencyData;
  return update_dependencies(hStream, dependencies, numDependencies, flags, true);
}
TALLY_ENTRY(cuStreamEndCapture_v10000)(CUstream hStream, CUgraph* phGraph) { return end(hStream, phGraph, false); }
TALLY_ENTRY(cuStreamEndCapture_v10000_ptsz)(CUstream hStream, CUgraph* phGraph) {
  return end(hStream, phGraph, true);
}

TALLY_ENTRY(cuGraphInstantiateWithFlags_v11040)(CUgraphExec* phGraphExec, CUgraph hGraph, unsigned long long flags) {
  return instantiate(phGraphExec, hGraph, flags);
}
TALLY_ENTRY(cuGraphInstantiate_v10000)(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode,
                                       char* logBuffer, size_t bufferSize) {
  if (phErrorNode != nullptr) *phErrorNode = nullptr;
  if (logBuffer != nullptr && bufferSize > 0) logBuffer[0] = '\0';
  return instantiate(phGraphExec, hGraph, 0);
}
TALLY_ENTRY(cuGraphInstantiate_v11000)(CUgraphExec* phGraphExec, CUgraph hGraph, CUgraphNode* phErrorNode,
                                       char* logBuffer, size_t bufferSize) {
  return tally_entry_cuGraphInstantiate_v10000(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
}
TALLY_ENTRY(cuGraphInstantiateWithParams_v12000)(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                 CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  params->hErrNode_out = nullptr;
  CUresult rc = instantiate(phGraphExec, hGraph, params->flags);
  params->result_out = rc == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  return rc;
}
TALLY_ENTRY(cuGraphInstantiateWithParams_v12000_ptsz)(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                      CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return tally_entry_cuGraphInstantiateWithParams_v12000(phGraphExec, hGraph, params);
}

TALLY_ENTRY(cuGraphLaunch_v10000)(CUgraphExec hGraph, CUstream hStream) { return launch(hGraph, hStream, false); }
TALLY_ENTRY(cuGraphLaunch_v10000_ptsz)(CUgraphExec hGraph, CUstream hStream) {
  return launch(hGraph, hStream, true);
}
TALLY_ENTRY(cuGraphUpload_v11010)(CUgraphExec hGraph, CUstream hStream) { return upload(hGraph, hStream, false); }
TALLY_ENTRY(cuGraphUpload_v11010_ptsz)(CUgraphExec hGraphExec, CUstream hStream) {
  return upload(hGraphExec, hStream, true);
}

// Destroying frees the captured operations; the handle stays invalid afterwards.
TALLY_ENTRY(cuGraphExecDestroy_v10000)(CUgraphExec hGraphExec) {
  GraphExecObject* e = as_graph_exec(hGraphExec);
  if (e == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ObjectTag expected = ObjectTag::kGraphExec;
  if (!e->tag.compare_exchange_strong(expected, ObjectTag::kDead)) return CUDA_ERROR_INVALID_VALUE;
  std::atomic_store(&e->ops, std::shared_ptr<const ReplayList>());
  forget_on_server(e->server_graph.exchange(0));
  std::lock_guard<std::mutex> lock(e->mutex);
  release_after_queued_work(std::move(e->user_objects));
  // Its graph memory goes back once its launches are done (if no graph still names it).
  if (!e->allocates.empty() || !e->frees.empty()) {
    auto held = std::make_shared<std::vector<std::shared_ptr<GraphAllocation>>>(std::move(e->allocates));
    held->insert(held->end(), e->frees.begin(), e->frees.end());
    e->frees.clear();
    after_queued_work([held] { held->clear(); });
  }
  return CUDA_SUCCESS;
}
TALLY_ENTRY(cuGraphDestroy_v10000)(CUgraph hGraph) {
  GraphObject* g = as_graph(hGraph);
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ObjectTag expected = ObjectTag::kGraph;
  if (!g->tag.compare_exchange_strong(expected, ObjectTag::kDead)) return CUDA_ERROR_INVALID_VALUE;
  destroy_graph(g);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuGraphExecGetFlags_v12000)(CUgraphExec hGraphExec, cuuint64_t* flags) {
  GraphExecObject* e = as_graph_exec(hGraphExec);
  if (e == nullptr || flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *flags = e->flags;
  return CUDA_SUCCESS;
}
