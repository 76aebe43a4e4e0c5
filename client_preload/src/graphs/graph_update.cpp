// cuGraphExecUpdate: an instantiated graph takes the node parameters of a graph of
// the same topology, as CUDA documents it. Nodes are paired by the order they were
// added (for captured graphs: the order they were captured); the update is refused
// (CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE, with the documented result and error
// nodes) when the node count, a node's dependencies or a node's type differ, when
// a memcpy node's source or destination memory type changes, or when a 2-D memset
// changes shape. A kernel node may change function (the driver allows it within a
// context, and a job has one). The updated graph runs from its next launch; a
// launch already issued keeps what it had.
//
// cuGraphNodeSetEnabled / GetEnabled: a kernel, memset or memcpy node of an
// instantiated graph is disabled (it runs as an empty node) or enabled again from
// the next launch; the client skips its operations, the server's copy is defined
// again with the node's flag. An exec update keeps each node's flag.
#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "connection/connection.h"
#include "entry_points/entry_point.h"
#include "graphs/conditional_nodes.h"
#include "graphs/graph_nodes.h"
#include "graphs/memory_nodes.h"
#include "graphs/server_graphs.h"

namespace tally::client {
namespace {

struct UpdateOutcome {
  CUgraphExecUpdateResult result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  const GraphNode* error_node = nullptr;  // from the new graph
  const GraphNode* error_from = nullptr;  // the mismatched dependency, for a changed edge
};

UpdateOutcome refused(CUgraphExecUpdateResult result, const GraphNode* node, const GraphNode* from = nullptr) {
  return UpdateOutcome{result, node, from};
}

// A 1-D memset may change its dimensions; a 2-D one only its address and value.
bool memset_shape_kept(const MemsetNodeShape& was, const MemsetNodeShape& now) {
  if (was.height <= 1) return true;
  return was.width == now.width && was.height == now.height && was.pitch == now.pitch &&
         was.element_size == now.element_size;
}

// Whether `now` (the new graph's nodes) can replace `was` (the instantiated ones).
UpdateOutcome compare(const std::vector<ExecNode>& was, const std::vector<ExecNode>& now) {
  if (was.size() != now.size()) return refused(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, nullptr);
  for (size_t i = 0; i < now.size(); ++i) {
    const std::vector<size_t>& old_deps = was[i].depends_on;
    if (now[i].depends_on.size() != old_deps.size())
      return refused(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, now[i].source);
    for (size_t d : now[i].depends_on) {
      if (std::find(old_deps.begin(), old_deps.end(), d) == old_deps.end())
        return refused(CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, now[i].source, now[d].source);
    }
  }
  for (size_t i = 0; i < now.size(); ++i) {
    const ExecNode &a = was[i], &b = now[i];
    if (a.type != b.type) return refused(CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED, b.source);
    switch (b.type) {
      case CU_GRAPH_NODE_TYPE_MEMCPY:
        if (a.copy.from != b.copy.from || a.copy.to != b.copy.to)
          return refused(CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED, b.source);
        break;
      case CU_GRAPH_NODE_TYPE_MEMSET:
        if (!memset_shape_kept(a.memset, b.memset))
          return refused(CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED, b.source);
        break;
      case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
      case CU_GRAPH_NODE_TYPE_MEM_FREE:
        if (a.allocation != b.allocation) return refused(CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED, b.source);
        break;
      case CU_GRAPH_NODE_TYPE_GRAPH: {
        UpdateOutcome inner = compare(*a.child, *b.child);
        if (inner.result != CU_GRAPH_EXEC_UPDATE_SUCCESS) {
          if (inner.error_node == nullptr) inner.error_node = b.source;  // the child's node count changed
          return inner;
        }
        break;
      }
      default:
        break;
    }
  }
  return UpdateOutcome{};
}

// The operations of disabled nodes (null: none), for the exec's current ops. Call with e->mutex held.
std::shared_ptr<const std::vector<bool>> skipped_ops(const GraphExecObject* e, size_t op_count) {
  if (std::all_of(e->nodes.begin(), e->nodes.end(), [](const ExecNode& n) { return n.enabled; })) return nullptr;
  auto skipped = std::make_shared<std::vector<bool>>(op_count, false);
  for (const ExecNode& n : e->nodes)
    for (size_t i = n.first_op; !n.enabled && i < n.first_op + n.op_count && i < op_count; ++i) (*skipped)[i] = true;
  return skipped;
}

CUresult update(CUgraphExec hGraphExec, CUgraph hGraph, UpdateOutcome* outcome) {
  outcome->result = CU_GRAPH_EXEC_UPDATE_ERROR;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  GraphExecObject* e = as_graph_exec(hGraphExec);
  GraphObject* g = as_graph(hGraph);
  if (e == nullptr || g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto ops = std::make_shared<ReplayList>();
  std::vector<ExecNode> nodes;
  if (CUresult rc = instantiate_graph(g, ops.get(), &nodes); rc != CUDA_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(e->mutex);
  *outcome = compare(e->nodes, nodes);
  if (outcome->result != CU_GRAPH_EXEC_UPDATE_SUCCESS) return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  // The server's copy becomes the new graph (read from its nodes, before the exec's
  // entries are pointed back at the nodes it was instantiated from); where it cannot
  // keep it, the client replays the updated graph from now on.
  for (size_t i = 0; i < nodes.size(); ++i) nodes[i].enabled = e->nodes[i].enabled;   // disabled stay disabled
  if (HostCalls hosts; redefine_on_server(nodes, e->server_graph.load(), &hosts)) {
    std::atomic_store(&e->server_hosts, hosts);
  } else {
    forget_on_server(e->server_graph.exchange(0));
  }
  // Node-level calls on the exec keep naming the nodes it was instantiated from.
  for (size_t i = 0; i < nodes.size(); ++i) nodes[i].source = e->nodes[i].source;
  e->nodes = std::move(nodes);
  collect_graph_memory(g, e);
  std::atomic_store(&e->skipped, skipped_ops(e, ops->size()));
  std::atomic_store(&e->ops, std::shared_ptr<const ReplayList>(std::move(ops)));
  // The exec now holds the new graph's user objects, and lets go of the old
  // graph's once the launches that ran it are done.
  auto held = std::make_shared<UserObjectRefs>();
  hold_user_objects(g, held.get());
  std::swap(held, e->user_objects);
  release_after_queued_work(std::move(held));
  return CUDA_SUCCESS;
}

CUresult set_enabled(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned isEnabled) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  GraphExecObject* e = as_graph_exec(hGraphExec);
  GraphNode* node = as_graph_node(hNode);
  if (e == nullptr || node == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(e->mutex);
  auto at = e->index.find(node);
  if (at == e->index.end()) return CUDA_ERROR_INVALID_VALUE;   // not a node of the instantiated graph
  ExecNode& entry = e->nodes[at->second];
  if (entry.type != CU_GRAPH_NODE_TYPE_KERNEL && entry.type != CU_GRAPH_NODE_TYPE_MEMSET &&
      entry.type != CU_GRAPH_NODE_TYPE_MEMCPY)
    return CUDA_ERROR_INVALID_VALUE;
  const bool enabled = isEnabled != 0;
  if (entry.enabled == enabled) return CUDA_SUCCESS;
  entry.enabled = enabled;
  std::shared_ptr<const ReplayList> ops = std::atomic_load(&e->ops);
  std::atomic_store(&e->skipped, skipped_ops(e, ops == nullptr ? 0 : ops->size()));
  if (HostCalls hosts; redefine_on_server(e->nodes, e->server_graph.load(), &hosts)) {
    std::atomic_store(&e->server_hosts, hosts);
  } else {
    forget_on_server(e->server_graph.exchange(0));
  }
  return CUDA_SUCCESS;
}

}  // namespace

namespace {

// cuGraphExecChildGraphNodeSetParams: the child-graph node runs a copy of `child`
// (of the same topology as the one it ran, as CUDA requires) from the next launch.
CUresult set_child(CUgraphExec hGraphExec, CUgraphNode hNode, CUgraph hChild) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  GraphExecObject* e = as_graph_exec(hGraphExec);
  GraphNode* node = as_graph_node(hNode);
  GraphObject* child = as_graph(hChild);
  if (e == nullptr || node == nullptr || child == nullptr || node->type != CU_GRAPH_NODE_TYPE_GRAPH ||
      child->capturing.load(std::memory_order_acquire) || has_conditional_nodes(child))
    return CUDA_ERROR_INVALID_VALUE;
  GraphObject* copy = clone_graph(child);   // what the exec runs, whatever becomes of `child`
  ReplayList ops;
  std::vector<ExecNode> nodes;
  if (CUresult rc = instantiate_graph(copy, &ops, &nodes); rc != CUDA_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(e->mutex);
  auto at = e->index.find(node);
  if (at == e->index.end()) return CUDA_ERROR_INVALID_VALUE;   // not a node of the instantiated graph
  ExecNode& entry = e->nodes[at->second];
  if (entry.child == nullptr || compare(*entry.child, nodes).result != CU_GRAPH_EXEC_UPDATE_SUCCESS)
    return CUDA_ERROR_INVALID_VALUE;
  entry.child = std::make_shared<const std::vector<ExecNode>>(std::move(nodes));
  replace_exec_node_ops(e, at->second, std::move(ops));
  return CUDA_SUCCESS;
}

}  // namespace

void replace_exec_node_ops(GraphExecObject* e, size_t index, ReplayList ops) {
  ExecNode& entry = e->nodes[index];
  std::shared_ptr<const ReplayList> old = std::atomic_load(&e->ops);
  auto updated = std::make_shared<ReplayList>();
  if (old != nullptr) {
    updated->assign(old->begin(), old->begin() + static_cast<std::ptrdiff_t>(entry.first_op));
    updated->insert(updated->end(), ops.begin(), ops.end());
    updated->insert(updated->end(), old->begin() + static_cast<std::ptrdiff_t>(entry.first_op + entry.op_count),
                    old->end());
  }
  // the nodes after it in the replay order move with the difference
  const size_t first = entry.first_op, before = entry.op_count;
  for (ExecNode& n : e->nodes)
    if (n.first_op > first) n.first_op = n.first_op - before + ops.size();
  entry.op_count = ops.size();
  std::atomic_store(&e->skipped, skipped_ops(e, updated->size()));
  std::atomic_store(&e->ops, std::shared_ptr<const ReplayList>(std::move(updated)));
  if (HostCalls hosts; redefine_on_server(e->nodes, e->server_graph.load(), &hosts)) {
    std::atomic_store(&e->server_hosts, hosts);
  } else {
    forget_on_server(e->server_graph.exchange(0));
  }
}

}  // namespace tally::client

using namespace tally::client;

TALLY_ENTRY(cuGraphNodeSetEnabled_v11060)(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int isEnabled) {
  return set_enabled(hGraphExec, hNode, isEnabled);
}
TALLY_ENTRY(cuGraphNodeGetEnabled_v11060)(CUgraphExec hGraphExec, CUgraphNode hNode, unsigned int* isEnabled) {
  GraphExecObject* e = as_graph_exec(hGraphExec);
  GraphNode* node = as_graph_node(hNode);
  if (e == nullptr || node == nullptr || isEnabled == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(e->mutex);
  auto at = e->index.find(node);
  if (at == e->index.end()) return CUDA_ERROR_INVALID_VALUE;
  *isEnabled = e->nodes[at->second].enabled ? 1 : 0;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuGraphExecChildGraphNodeSetParams_v11010)(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                       CUgraph childGraph) {
  return set_child(hGraphExec, hNode, childGraph);
}
TALLY_ENTRY(cuGraphExecUpdate_v12000)(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphExecUpdateResultInfo* resultInfo) {
  if (resultInfo == nullptr) return CUDA_ERROR_INVALID_VALUE;
  UpdateOutcome outcome;
  CUresult rc = update(hGraphExec, hGraph, &outcome);
  resultInfo->result = outcome.result;
  resultInfo->errorNode = handle_of(outcome.error_node);
  resultInfo->errorFromNode = handle_of(outcome.error_from);
  return rc;
}

TALLY_ENTRY(cuGraphExecUpdate_v10020)(CUgraphExec hGraphExec, CUgraph hGraph, CUgraphNode* hErrorNode_out,
                                      CUgraphExecUpdateResult* updateResult_out) {
  if (updateResult_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  UpdateOutcome outcome;
  CUresult rc = update(hGraphExec, hGraph, &outcome);
  *updateResult_out = outcome.result;
  if (hErrorNode_out != nullptr) *hErrorNode_out = handle_of(outcome.error_node);
  return rc;
}
