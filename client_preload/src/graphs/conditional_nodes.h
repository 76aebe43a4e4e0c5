// Conditional nodes (CUDA 12.3+): IF (with an optional else body), WHILE and
// SWITCH nodes, their bodies and their handles, in conditional_nodes.cpp.
//
// A handle (cuGraphConditionalHandleCreate) is the device address of a 32-bit
// condition value: 4 bytes of ordinary device memory, charged to the job's quota,
// held until the graph that made it and every instantiation running it are gone.
// Kernels set it with cudaGraphSetConditional, which the server defines as a store
// to that address (ptx_passes/passes/graph_conditions.py). When a replay reaches a
// conditional node the client reads the value in stream order (a device-to-host
// copy on the launch stream) and replays the chosen body on that stream: WHILE
// reads again after each run of its body. A handle made with
// CU_GRAPH_COND_ASSIGN_DEFAULT gets its default at the start of each execution of
// the graph it was made for (each launch of a top-level graph, each run of a body).
//
// A graph with conditional nodes is replayed by the client, one message per
// operation and a round trip per condition, never kept by the server as one unit.
#pragma once
#include <memory>
#include <vector>

#include "driver_headers.h"
#include "graphs/graph_objects.h"

namespace tally::client {

struct ConditionValue {
  CUdeviceptr dptr = 0;         // the handle
  unsigned default_value = 0;
  bool assign_default = false;  // CU_GRAPH_COND_ASSIGN_DEFAULT
  ~ConditionValue();            // gives the 4 bytes back to the server
};

// A conditional node: its handle's value, its type and its bodies (graphs of its
// own, which phGraph_out hands out).
struct ConditionalNode {
  std::shared_ptr<ConditionValue> condition;
  CUgraphConditionalNodeType type = CU_GRAPH_COND_TYPE_IF;
  std::vector<GraphObject*> bodies;
  std::vector<CUgraph> body_handles;  // what phGraph_out points at, valid while the node lives
};

// cuGraphAddNode of a CU_GRAPH_NODE_TYPE_CONDITIONAL node: checks the handle (made
// for `graph`), type and size, makes the bodies and points p->conditional.phGraph_out at them.
CUresult add_conditional_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t n,
                              CUgraphNodeParams* p);

// What a replay of `node` runs: its bodies as they are now, chosen by the condition.
CUresult conditional_replay(const GraphNode* node, Replay* out);

// The operations that start each execution of `graph`: its handles' defaults
// (the caller holds graph->mutex).
void assign_condition_defaults(const GraphObject* graph, ReplayList* ops);

// Whether `graph` has conditional nodes (CUDA refuses such a graph as a child graph
// and refuses to clone it).
bool has_conditional_nodes(GraphObject* graph);

}  // namespace tally::client
