// What the graph entry points share (graph_nodes.cpp builds graphs node by node,
// graphs.cpp instantiates and launches them, graph_clone.cpp copies them,
// graph_update.cpp updates instantiated ones, graph_dot.cpp prints them).
#pragma once
#include <functional>
#include <memory>
#include <unordered_map>
#include <vector>

#include "driver_headers.h"
#include "graphs/graph_objects.h"

namespace tally::client {

// A graph's operations in an order that respects every dependency (nodes that
// could run side by side run in the order they were added), where each node's
// operations start in that list and (when asked) how many there are (a child
// graph's all of its own). CUDA_ERROR_INVALID_VALUE for a cycle.
CUresult order_graph(GraphObject* graph, ReplayList* ops, std::unordered_map<const GraphNode*, size_t>* first_op,
                     std::unordered_map<const GraphNode*, size_t>* op_counts = nullptr);

// What instantiating `graph` makes: its operations in order (order_graph) and its
// nodes as the instantiation sees them (graph_objects.h: ExecNode), in the order
// they were added. A graph still being captured cannot be instantiated.
CUresult instantiate_graph(GraphObject* graph, ReplayList* ops, std::vector<ExecNode>* nodes);

// Adds a node of `type` to `graph` after `deps`; record() fills in its type-specific
// part (a failure leaves the graph unchanged).
CUresult add_graph_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t n, CUgraphNodeType type,
                        const std::function<CUresult(GraphNode*)>& record);

// A copy of `original` with every node's parameters (child graphs copied too);
// each copy remembers its original (cuGraphNodeFindInClone).
GraphObject* clone_graph(GraphObject* original);

// Adds to `into` a reference of its own to every user object `graph` and its child
// graphs hold (what an instantiation of the graph keeps).
void hold_user_objects(GraphObject* graph, UserObjectRefs* into);

// Marks the graph and its nodes destroyed and lets go of what they hold.
void destroy_graph(GraphObject* graph);

// cuGraphAddBatchMemOpNode (batch_mem_op_nodes.cpp): a node whose operations are
// `count` stream memory operations, checked as cuStreamBatchMemOp checks them.
CUresult add_batch_mem_op_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t n,
                               const CUDA_BATCH_MEM_OP_NODE_PARAMS* params);

// Records a batch-mem-op node's operations again from its mem_ops (their replay).
CUresult record_batch_mem_ops(GraphNode* node);

// What a memset, memcpy, host or event node runs (its ops) and reports (its shape,
// function, event), recorded into `into` from the parameters CUDA takes, checked as
// the stream call they stand for checks them.
CUresult record_memset(const CUDA_MEMSET_NODE_PARAMS& p, GraphNode* into);
CUresult record_memcpy(const CUDA_MEMCPY3D& p, GraphNode* into);
CUresult record_host(CUhostFn fn, void* data, GraphNode* into);
CUresult record_event(CUevent event, bool record, GraphNode* into);

// An exec-level update of node `index` of `e` (the caller holds e->mutex; the entry's
// own fields are already the new ones): from the next launch the node runs `ops`,
// and the server's copy of the graph is defined again, or dropped where it cannot
// keep it (graph_update.cpp).
void replace_exec_node_ops(GraphExecObject* e, size_t index, ReplayList ops);

// The name of a node type as the driver's DOT output and tally's messages write it.
const char* node_type_name(CUgraphNodeType type);

}  // namespace tally::client
