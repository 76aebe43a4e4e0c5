// Graphs built node by node (cuGraphCreate, cuGraphAdd*Node, cuGraphAddNode):
// see graph_nodes.cpp.
#pragma once
#include <atomic>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "capture.h"
#include "driver_headers.h"
#include "driver_objects.h"

namespace tally::client {

// A kernel node's launch, with its parameter values copied (as CUDA copies them
// when the node is added).
struct KernelNodeLaunch {
  CUfunction function = nullptr;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared_bytes = 0;
  std::vector<uint8_t> params;  // the parameter block
  std::vector<void*> pointers;  // one per parameter, into `params` (what GetParams hands out)
};

struct GraphNode {
  std::atomic<ObjectTag> tag{ObjectTag::kGraphNode};
  GraphObject* graph = nullptr;
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  ReplayList ops;                      // what running the node issues on the launch stream
  std::vector<GraphNode*> depends_on;  // this node runs after these
  KernelNodeLaunch kernel;             // kernel nodes
  CUevent event = nullptr;             // event record and wait nodes
};

inline GraphNode* as_graph_node(CUgraphNode n) { return live_object<GraphNode, ObjectTag::kGraphNode>(n); }

// A built graph's operations in an order that respects every dependency (nodes
// that could run side by side run in the order they were added), and where
// each node's operations start in that list.
CUresult order_graph(GraphObject* graph, ReplayList* ops, std::unordered_map<const GraphNode*, size_t>* first_op);

}  // namespace tally::client
