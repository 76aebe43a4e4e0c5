// What a graph says about itself: its nodes, roots and edges, a node's type,
// dependencies and dependents, and the parameters each kind of node was made with.
// Graphs made by capture answer the same as graphs built node by node.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <utility>
#include <vector>

#include "contexts/contexts.h"
#include "entry_points/entry_point.h"
#include "graphs/graph_nodes.h"

namespace tally::client {
namespace {

// Writes up to *count handles (all of them when `out` is NULL: just the count).
CUresult list_nodes(const std::vector<GraphNode*>& nodes, CUgraphNode* out, CUgraphEdgeData* edges, size_t* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (out == nullptr) {
    *count = nodes.size();
    return CUDA_SUCCESS;
  }
  const size_t room = *count;
  for (size_t i = 0; i < room; ++i) {
    out[i] = i < nodes.size() ? handle_of(nodes[i]) : nullptr;
    if (edges != nullptr) edges[i] = CUgraphEdgeData{};  // default edges only
  }
  *count = std::min(room, nodes.size());
  return CUDA_SUCCESS;
}

std::vector<GraphNode*> dependents_of(const GraphNode* node) {
  std::vector<GraphNode*> found;
  for (GraphNode* other : node->graph->nodes) {
    if (std::find(other->depends_on.begin(), other->depends_on.end(), node) != other->depends_on.end())
      found.push_back(other);
  }
  return found;
}

CUresult list_edges(CUgraph hGraph, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edge_data, size_t* count) {
  GraphObject* g = as_graph(hGraph);
  if (g == nullptr || count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g->mutex);
  std::vector<std::pair<GraphNode*, GraphNode*>> edges;
  for (GraphNode* node : g->nodes)
    for (GraphNode* d : node->depends_on) edges.emplace_back(d, node);
  if (from == nullptr || to == nullptr) {
    *count = edges.size();
    return (from == nullptr) == (to == nullptr) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
  }
  const size_t room = *count;
  for (size_t i = 0; i < room; ++i) {
    from[i] = i < edges.size() ? handle_of(edges[i].first) : nullptr;
    to[i] = i < edges.size() ? handle_of(edges[i].second) : nullptr;
    if (edge_data != nullptr) edge_data[i] = CUgraphEdgeData{};
  }
  *count = std::min(room, edges.size());
  return CUDA_SUCCESS;
}

void name_function(CUDA_KERNEL_NODE_PARAMS_v1* p, const KernelNodeLaunch& k) { p->func = k.function; }
// A CUfunction and a CUkernel are one object here; cudart finds its kernel again
// by the CUkernel (with the function alone it answers cudaErrorInvalidDeviceFunction).
void name_function(CUDA_KERNEL_NODE_PARAMS_v2* p, const KernelNodeLaunch& k) {
  primary_context(0, &p->ctx);
  p->func = k.function;
  p->kern = reinterpret_cast<CUkernel>(k.function);
}

template <class Params>
CUresult get_kernel_params(CUgraphNode n, Params* p) {
  GraphNode* node = as_graph_node(n);
  if (node == nullptr || p == nullptr || node->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(node->graph->mutex);
  const KernelNodeLaunch& k = node->kernel;
  std::memset(p, 0, sizeof *p);
  name_function(p, k);
  p->gridDimX = k.grid[0], p->gridDimY = k.grid[1], p->gridDimZ = k.grid[2];
  p->blockDimX = k.block[0], p->blockDimY = k.block[1], p->blockDimZ = k.block[2];
  p->sharedMemBytes = k.shared_bytes;
  p->kernelParams = const_cast<void**>(k.pointers.data());  // valid while the node lives, as in CUDA
  return CUDA_SUCCESS;
}

// A node of `type`, or nullptr.
GraphNode* node_of_type(CUgraphNode n, CUgraphNodeType type) {
  GraphNode* node = as_graph_node(n);
  return node != nullptr && node->type == type ? node : nullptr;
}

}  // namespace
}  // namespace tally::client

using namespace tally::client;

TALLY_ENTRY(cuGraphGetNodes_v10000)(CUgraph hGraph, CUgraphNode* nodes, size_t* numNodes) {
  GraphObject* g = as_graph(hGraph);
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g->mutex);
  return list_nodes(g->nodes, nodes, nullptr, numNodes);
}

TALLY_ENTRY(cuGraphGetRootNodes_v10000)(CUgraph hGraph, CUgraphNode* rootNodes, size_t* numRootNodes) {
  GraphObject* g = as_graph(hGraph);
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g->mutex);
  std::vector<GraphNode*> roots;
  for (GraphNode* node : g->nodes)
    if (node->depends_on.empty()) roots.push_back(node);
  return list_nodes(roots, rootNodes, nullptr, numRootNodes);
}

TALLY_ENTRY(cuGraphGetEdges_v10000)(CUgraph hGraph, CUgraphNode* from, CUgraphNode* to, size_t* numEdges) {
  return list_edges(hGraph, from, to, nullptr, numEdges);
}
TALLY_ENTRY(cuGraphGetEdges_v12030)(CUgraph hGraph, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edgeData,
                                    size_t* numEdges) {
  return list_edges(hGraph, from, to, edgeData, numEdges);
}

TALLY_ENTRY(cuGraphNodeGetType_v10000)(CUgraphNode hNode, CUgraphNodeType* type) {
  GraphNode* node = as_graph_node(hNode);
  if (node == nullptr || type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *type = node->type;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuGraphNodeGetDependencies_v10000)(CUgraphNode hNode, CUgraphNode* dependencies, size_t* numDependencies) {
  GraphNode* node = as_graph_node(hNode);
  if (node == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(node->graph->mutex);
  return list_nodes(node->depends_on, dependencies, nullptr, numDependencies);
}
TALLY_ENTRY(cuGraphNodeGetDependencies_v12030)(CUgraphNode hNode, CUgraphNode* dependencies, CUgraphEdgeData* edgeData,
                                               size_t* numDependencies) {
  GraphNode* node = as_graph_node(hNode);
  if (node == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(node->graph->mutex);
  return list_nodes(node->depends_on, dependencies, edgeData, numDependencies);
}
TALLY_ENTRY(cuGraphNodeGetDependentNodes_v10000)(CUgraphNode hNode, CUgraphNode* dependentNodes,
                                                 size_t* numDependentNodes) {
  GraphNode* node = as_graph_node(hNode);
  if (node == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(node->graph->mutex);
  return list_nodes(dependents_of(node), dependentNodes, nullptr, numDependentNodes);
}
TALLY_ENTRY(cuGraphNodeGetDependentNodes_v12030)(CUgraphNode hNode, CUgraphNode* dependentNodes,
                                                 CUgraphEdgeData* edgeData, size_t* numDependentNodes) {
  GraphNode* node = as_graph_node(hNode);
  if (node == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(node->graph->mutex);
  return list_nodes(dependents_of(node), dependentNodes, edgeData, numDependentNodes);
}

TALLY_ENTRY(cuGraphKernelNodeGetParams_v10000)(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v1* nodeParams) {
  return get_kernel_params(hNode, nodeParams);
}
TALLY_ENTRY(cuGraphKernelNodeGetParams_v12000)(CUgraphNode hNode, CUDA_KERNEL_NODE_PARAMS_v2* nodeParams) {
  return get_kernel_params(hNode, nodeParams);
}

TALLY_ENTRY(cuGraphMemsetNodeGetParams_v10000)(CUgraphNode hNode, CUDA_MEMSET_NODE_PARAMS_v1* nodeParams) {
  GraphNode* node = node_of_type(hNode, CU_GRAPH_NODE_TYPE_MEMSET);
  if (node == nullptr || nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const MemsetNodeShape& m = node->memset;
  *nodeParams = CUDA_MEMSET_NODE_PARAMS_v1{m.dst, m.pitch, m.value, m.element_size, m.width, m.height};
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuGraphHostNodeGetParams_v10000)(CUgraphNode hNode, CUDA_HOST_NODE_PARAMS_v1* nodeParams) {
  GraphNode* node = node_of_type(hNode, CU_GRAPH_NODE_TYPE_HOST);
  if (node == nullptr || nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  nodeParams->fn = node->host_fn;
  nodeParams->userData = node->host_data;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuGraphEventRecordNodeGetEvent_v11010)(CUgraphNode hNode, CUevent* event_out) {
  GraphNode* node = node_of_type(hNode, CU_GRAPH_NODE_TYPE_EVENT_RECORD);
  if (node == nullptr || event_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *event_out = node->event;
  return CUDA_SUCCESS;
}
TALLY_ENTRY(cuGraphEventWaitNodeGetEvent_v11010)(CUgraphNode hNode, CUevent* event_out) {
  GraphNode* node = node_of_type(hNode, CU_GRAPH_NODE_TYPE_WAIT_EVENT);
  if (node == nullptr || event_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *event_out = node->event;
  return CUDA_SUCCESS;
}

// The node's own copy of the graph it runs: changing it changes the node (as CUDA documents).
TALLY_ENTRY(cuGraphChildGraphNodeGetGraph_v10000)(CUgraphNode hNode, CUgraph* phGraph) {
  GraphNode* node = node_of_type(hNode, CU_GRAPH_NODE_TYPE_GRAPH);
  if (node == nullptr || phGraph == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *phGraph = handle_of(node->child);
  return CUDA_SUCCESS;
}
