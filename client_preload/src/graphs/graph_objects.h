// What CUgraph, CUgraphNode and CUgraphExec handles point at.
//
// Every graph is a list of nodes with dependency edges, however it was made: node
// by node (graph_nodes.cpp), by stream capture (capture.cpp: each captured
// operation becomes a node that depends on what its stream had done before), or
// by cuGraphClone. A node holds the replays its stream operation issues (see
// capture.h) and what the graph APIs report about it (type, kernel launch, copy
// direction, ...). Instantiation puts the nodes in an order that respects every
// edge (order_graph); a launch replays that list on the launch stream.
// Objects are never freed (see driver_objects.h): a destroyed one keeps its tag
// cleared, so a stale handle fails cleanly.
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
#include "graphs/user_objects.h"

namespace tally::client {

using Replay = std::function<CUresult(uint64_t stream)>;
using ReplayList = std::vector<Replay>;

// A kernel node's launch, with its parameter values copied (as CUDA copies them
// when the node is made).
struct KernelNodeLaunch {
  CUfunction function = nullptr;
  unsigned grid[3] = {1, 1, 1};
  unsigned block[3] = {1, 1, 1};
  unsigned shared_bytes = 0;
  std::vector<uint8_t> params;  // the parameter block
  std::vector<void*> pointers;  // one per parameter, into `params` (what GetParams hands out)
  // A captured cooperative launch: a node attribute, which new parameters keep.
  bool cooperative = false;
  // A captured launch's thread-block cluster (cudaLaunchKernelEx's attribute; all 0:
  // none asked). Graphs with one stay with the client (server_graphs.cpp).
  unsigned cluster[3] = {0, 0, 0};

  KernelNodeLaunch() = default;
  KernelNodeLaunch(const KernelNodeLaunch& other) { *this = other; }
  KernelNodeLaunch& operator=(const KernelNodeLaunch& other);  // re-points `pointers` into the copy
  KernelNodeLaunch(KernelNodeLaunch&&) = default;
  KernelNodeLaunch& operator=(KernelNodeLaunch&&) = default;
};

// Where a memcpy node's bytes come from and go to (what cuGraphExecUpdate may not
// change, and the direction cuGraphDebugDotPrint shows).
struct CopyNodeShape {
  CUmemorytype from = CU_MEMORYTYPE_DEVICE;
  CUmemorytype to = CU_MEMORYTYPE_DEVICE;
  size_t width = 0, height = 0;
  // A device-to-device copy's rectangles (what the server's copy of the graph runs).
  uint64_t dst = 0, src = 0;
  size_t dst_pitch = 0, src_pitch = 0;
  // The parameters of a node made or set with them (cuGraphMemcpyNodeGetParams; null
  // for a captured copy).
  std::shared_ptr<const CUDA_MEMCPY3D> params;
};

struct MemsetNodeShape {
  CUdeviceptr dst = 0;
  size_t pitch = 0;
  unsigned value = 0, element_size = 1;
  size_t width = 0, height = 0;
};

// A host node's function, as cuLaunchHostFunc takes it (what a launch of a graph
// the server keeps names a callback for: server_graphs.h).
struct GraphHostCall {
  CUhostFn fn;
  void* data;
};
using HostCalls = std::shared_ptr<const std::vector<GraphHostCall>>;

struct GraphObject;
struct GraphAllocation;   // memory_nodes.h
struct ConditionValue;    // conditional_nodes.h
struct ConditionalNode;

struct GraphNode {
  std::atomic<ObjectTag> tag{ObjectTag::kGraphNode};
  GraphObject* graph = nullptr;
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  ReplayList ops;                      // what running the node issues on the launch stream
  std::vector<GraphNode*> depends_on;  // this node runs after these, in the order the edges were made
  KernelNodeLaunch kernel;             // kernel nodes
  CopyNodeShape copy;                  // memcpy nodes
  MemsetNodeShape memset;              // memset nodes
  CUhostFn host_fn = nullptr;          // host nodes
  void* host_data = nullptr;
  CUevent event = nullptr;             // event record and wait nodes
  GraphObject* child = nullptr;        // child-graph nodes: the node's own copy of the graph it runs
  std::vector<CUstreamBatchMemOpParams> mem_ops;   // batch-mem-op nodes: their operations,
  unsigned mem_op_flags = 0;                       // flags
  CUcontext mem_op_context = nullptr;              // and context, as given
  // Memory-allocation nodes: the allocation they make; memory-free nodes: the one they free.
  std::shared_ptr<GraphAllocation> allocation;
  std::shared_ptr<ConditionalNode> conditional;   // conditional nodes: handle, type, bodies
  const GraphNode* original = nullptr; // in a clone: the node it was copied from
};

// A graph made by cuGraphCreate, by capture (nodes added while `capturing`) or by
// cuGraphClone. Its nodes live under `mutex`.
struct GraphObject {
  std::atomic<ObjectTag> tag{ObjectTag::kGraph};
  std::atomic<bool> capturing{false};  // a capture still adds to it: it cannot be instantiated yet
  const uint64_t id = next_id();       // what DOT output names it by
  std::mutex mutex;
  std::vector<GraphNode*> nodes;       // in the order they were added
  const GraphObject* cloned_from = nullptr;
  // The conditional handles made for it (cuGraphConditionalHandleCreate), under `mutex`.
  std::vector<std::shared_ptr<ConditionValue>> conditions;
  // cuGraphRetainUserObject's references (released when the graph is destroyed)
  const std::shared_ptr<UserObjectRefs> user_objects = std::make_shared<UserObjectRefs>();

  static uint64_t next_id() {
    static std::atomic<uint64_t> ids{1};
    return ids.fetch_add(1, std::memory_order_relaxed);
  }
};

// One node of an instantiated graph, as the instantiation saw it: what node-level
// updates check and what cuGraphExecUpdate compares a new graph against.
struct ExecNode {
  const GraphNode* source = nullptr;  // the node of the instantiated graph (what node-level exec calls name)
  CUgraphNodeType type = CU_GRAPH_NODE_TYPE_EMPTY;
  std::vector<size_t> depends_on;     // indices of its dependencies in the exec's node list, in edge order
  size_t first_op = 0;                // where its operations start in the exec's list
  size_t op_count = 0;
  CUfunction function = nullptr;      // kernel nodes: the function the exec runs now
  CopyNodeShape copy;
  MemsetNodeShape memset;
  const GraphAllocation* allocation = nullptr;   // memory nodes: what they allocate or free
  bool enabled = true;                // cuGraphNodeSetEnabled: a disabled node runs as an empty one
  std::shared_ptr<const std::vector<ExecNode>> child;  // child-graph nodes: the child's nodes
  // What exec-level updates gave the node (cuGraphExec*SetParams); as the source's until then.
  std::shared_ptr<const KernelNodeLaunch> kernel;   // kernel nodes (null: the source's launch)
  CUhostFn host_fn = nullptr;         // host nodes
  void* host_data = nullptr;
  CUevent event = nullptr;            // event record and wait nodes
};

struct GraphExecObject {
  std::atomic<ObjectTag> tag{ObjectTag::kGraphExec};
  std::shared_ptr<const ReplayList> ops;  // swapped whole by updates; a launch replays the list it loaded
  // Which of `ops` belong to disabled nodes (cuGraphNodeSetEnabled; null: none), swapped whole too.
  std::shared_ptr<const std::vector<bool>> skipped;
  // The server's copy (server_graphs.h; 0: none): launches go there until an update
  // drops it, after which the client replays `ops`.
  std::atomic<uint64_t> server_graph{0};
  // The host nodes' functions of the server's copy, in its order (server_graphs.h),
  // swapped whole by updates.
  HostCalls server_hosts;
  std::mutex mutex;                       // serializes updates
  std::vector<ExecNode> nodes;            // the graph's nodes in the order they were added
  std::unordered_map<const GraphNode*, size_t> index;  // source node -> its entry in `nodes`
  unsigned long long flags = 0;
  // The graph's memory nodes, in node order (memory_nodes.h: what a launch checks and marks).
  std::vector<std::shared_ptr<GraphAllocation>> allocates, frees;
  // Its own references to the user objects of the graph it runs (and of that graph's
  // child graphs), released once its launches are done after destroy or update.
  std::shared_ptr<UserObjectRefs> user_objects;
};

inline GraphObject* as_graph(CUgraph g) { return live_object<GraphObject, ObjectTag::kGraph>(g); }
inline GraphExecObject* as_graph_exec(CUgraphExec g) {
  return live_object<GraphExecObject, ObjectTag::kGraphExec>(g);
}
inline GraphNode* as_graph_node(CUgraphNode n) { return live_object<GraphNode, ObjectTag::kGraphNode>(n); }
inline CUgraphNode handle_of(const GraphNode* n) { return reinterpret_cast<CUgraphNode>(const_cast<GraphNode*>(n)); }
inline CUgraph handle_of(const GraphObject* g) { return reinterpret_cast<CUgraph>(const_cast<GraphObject*>(g)); }

}  // namespace tally::client
