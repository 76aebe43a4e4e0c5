// Graphs built node by node: cuGraphCreate, cuGraphAdd{Kernel,Memcpy,Memset,Host,
// Empty,ChildGraph,EventRecord,EventWait}Node, cuGraphAddNode, dependencies,
// kernel-node parameters (also in an instantiated graph), destroying a node; and
// the order an instantiation runs a graph's nodes in (order_graph).
//
// A node holds the replays its stream operation would have recorded in a capture
// (capture.h: record_on_private_stream issues the operation on a stream only the
// client knows, so every check of the direct call applies and nothing is sent).
// External-semaphore nodes stay unsupported; batch-memop nodes' own entry points
// are batch_mem_op_nodes.cpp, memory nodes' memory_nodes.cpp, conditional nodes'
// conditional_nodes.cpp.
#include "graphs/graph_nodes.h"
#include "graphs/server_graphs.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <queue>

#include "graphs/capture.h"
#include "graphs/conditional_nodes.h"
#include "graphs/memory_nodes.h"
#include "connection/connection.h"
#include "contexts/contexts.h"
#include "copies/copies.h"
#include "entry_points/entry_point.h"
#include "launch/launch.h"
#include "streams/stream_ids.h"

namespace tally::client {
namespace {

// The fields every kernel-node parameter struct shares (v1, v2, v3), by value.
struct KernelNodeFields {
  CUfunction func;
  unsigned grid[3], block[3], shared;
  void** kernel_params;
  void** extra;
};

template <class Params>
KernelNodeFields kernel_fields(const Params& p, CUfunction func) {
  return {func, {p.gridDimX, p.gridDimY, p.gridDimZ}, {p.blockDimX, p.blockDimY, p.blockDimZ}, p.sharedMemBytes,
          p.kernelParams, p.extra};
}

// Copies a launch's parameter values, as CUDA does when a kernel node is made.
CUresult copy_launch(const KernelNodeFields& f, KernelNodeLaunch* out) {
  const FunctionObject* fn = as_function(f.func);
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (f.kernel_params != nullptr && f.extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  KernelNodeLaunch k;
  k.function = f.func;
  std::copy(f.grid, f.grid + 3, k.grid);
  std::copy(f.block, f.block + 3, k.block);
  k.shared_bytes = f.shared;
  k.params.assign(fn->param_total, 0);
  if (f.extra != nullptr) {
    const void* buffer = nullptr;
    size_t size = 0;
    if (CUresult rc = read_launch_extra(f.extra, &buffer, &size); rc != CUDA_SUCCESS) return rc;
    if (size != fn->param_total) return CUDA_ERROR_INVALID_VALUE;
    if (size > 0) std::memcpy(k.params.data(), buffer, size);
  } else if (!fn->params.empty()) {
    if (f.kernel_params == nullptr) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < fn->params.size(); ++i)
      std::memcpy(k.params.data() + fn->params[i].offset, f.kernel_params[i], fn->params[i].size);
  }
  *out = std::move(k);
  out->pointers.clear();
  for (const ParamSlot& slot : fn->params) out->pointers.push_back(out->params.data() + slot.offset);
  return CUDA_SUCCESS;
}

CUresult record_launch(const KernelNodeLaunch& k, ReplayList* ops) {
  GraphNode recorded;
  CUresult rc = record_on_private_stream(
      [&k](CUstream s) {
        void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, const_cast<uint8_t*>(k.params.data()),
                         CU_LAUNCH_PARAM_BUFFER_SIZE, nullptr, CU_LAUNCH_PARAM_END};
        size_t size = k.params.size();
        extra[3] = &size;
        const uint32_t flags = k.cooperative ? static_cast<uint32_t>(protocol::LaunchFlag::COOPERATIVE) : 0;
        return launch_kernel(k.function, k.grid[0], k.grid[1], k.grid[2], k.block[0], k.block[1], k.block[2],
                             k.shared_bytes, s, nullptr, extra, false, flags);
      },
      &recorded);
  *ops = std::move(recorded.ops);
  return rc;
}

CUresult check_dependencies(GraphObject* g, const CUgraphNode* deps, size_t n, std::vector<GraphNode*>* out) {
  if (n > 0 && deps == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; ++i) {
    GraphNode* d = as_graph_node(deps[i]);
    if (d == nullptr || d->graph != g) return CUDA_ERROR_INVALID_VALUE;
    if (std::find(out->begin(), out->end(), d) != out->end()) return CUDA_ERROR_INVALID_VALUE;  // listed twice
    out->push_back(d);
  }
  return CUDA_SUCCESS;
}

// Builds a node with `record` (which fills in its type-specific part) and adds it.
template <class Record>
CUresult add_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t n, CUgraphNodeType type,
                  Record&& record) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  GraphObject* g = as_graph(graph);
  if (g == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto* node = new GraphNode();
  node->graph = g;
  node->type = type;
  CUresult rc = record(node);
  std::lock_guard<std::mutex> lock(g->mutex);
  if (rc == CUDA_SUCCESS) rc = check_dependencies(g, deps, n, &node->depends_on);
  if (rc != CUDA_SUCCESS) {
    delete node;  // never handed out
    return rc;
  }
  g->nodes.push_back(node);
  *out = reinterpret_cast<CUgraphNode>(node);
  return CUDA_SUCCESS;
}

template <class Params>
CUresult add_kernel(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t n, const Params* p,
                    CUfunction func) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return add_node(out, graph, deps, n, CU_GRAPH_NODE_TYPE_KERNEL, [&](GraphNode* node) {
    if (CUresult rc = copy_launch(kernel_fields(*p, func), &node->kernel); rc != CUDA_SUCCESS) return rc;
    return record_launch(node->kernel, &node->ops);
  });
}

CUresult add_memset(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t n,
                    const CUDA_MEMSET_NODE_PARAMS& p) {
  return add_node(out, graph, deps, n, CU_GRAPH_NODE_TYPE_MEMSET,
                  [&](GraphNode* node) { return record_memset(p, node); });
}

CUresult add_memcpy(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t n, const CUDA_MEMCPY3D* copy) {
  if (copy == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return add_node(out, graph, deps, n, CU_GRAPH_NODE_TYPE_MEMCPY,
                  [&](GraphNode* node) { return record_memcpy(*copy, node); });
}

CUresult add_host(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t n, CUhostFn fn, void* data) {
  return add_node(out, graph, deps, n, CU_GRAPH_NODE_TYPE_HOST,
                  [&](GraphNode* node) { return record_host(fn, data, node); });
}

CUresult add_event(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t n, CUevent event, bool record) {
  return add_node(out, graph, deps, n, record ? CU_GRAPH_NODE_TYPE_EVENT_RECORD : CU_GRAPH_NODE_TYPE_WAIT_EVENT,
                  [&](GraphNode* node) { return record_event(event, record, node); });
}

CUresult add_child(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t n, CUgraph child) {
  GraphObject* c = as_graph(child);
  if (c == nullptr || c == as_graph(graph) || c->capturing.load(std::memory_order_acquire))
    return CUDA_ERROR_INVALID_VALUE;
  if (has_conditional_nodes(c)) return CUDA_ERROR_INVALID_VALUE;   // CUDA takes no such child
  return add_node(out, graph, deps, n, CU_GRAPH_NODE_TYPE_GRAPH, [&](GraphNode* node) {
    // The node runs a copy of the child as it is now (CUDA clones it); later changes to the child do not count.
    node->child = clone_graph(c);
    return CUDA_SUCCESS;
  });
}

CUresult add_generic(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t n, CUgraphNodeParams* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL:
      return add_kernel(out, graph, deps, n, &p->kernel,
                        p->kernel.func != nullptr ? p->kernel.func : reinterpret_cast<CUfunction>(p->kernel.kern));
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (p->memcpy.flags != 0 || p->memcpy.reserved != 0) return CUDA_ERROR_INVALID_VALUE;
      return add_memcpy(out, graph, deps, n, &p->memcpy.copyParams);
    case CU_GRAPH_NODE_TYPE_MEMSET:
      return add_memset(out, graph, deps, n,
                        CUDA_MEMSET_NODE_PARAMS{p->memset.dst, p->memset.pitch, p->memset.value, p->memset.elementSize,
                                                p->memset.width, p->memset.height});
    case CU_GRAPH_NODE_TYPE_HOST:
      return add_host(out, graph, deps, n, p->host.fn, p->host.userData);
    case CU_GRAPH_NODE_TYPE_GRAPH:
      return add_child(out, graph, deps, n, p->graph.graph);
    case CU_GRAPH_NODE_TYPE_EMPTY:
      return add_node(out, graph, deps, n, CU_GRAPH_NODE_TYPE_EMPTY, [](GraphNode*) { return CUDA_SUCCESS; });
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      return add_event(out, graph, deps, n, p->eventRecord.event, true);
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
      return add_event(out, graph, deps, n, p->eventWait.event, false);
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP:
      static_assert(sizeof(CUDA_BATCH_MEM_OP_NODE_PARAMS_v2) == sizeof(CUDA_BATCH_MEM_OP_NODE_PARAMS));
      return add_batch_mem_op_node(out, graph, deps, n, reinterpret_cast<const CUDA_BATCH_MEM_OP_NODE_PARAMS*>(&p->memOp));
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC:
    case CU_GRAPH_NODE_TYPE_MEM_FREE:
      return add_memory_node(out, graph, deps, n, p);
    case CU_GRAPH_NODE_TYPE_CONDITIONAL:
      return add_conditional_node(out, graph, deps, n, p);
    default:
      return CUDA_ERROR_NOT_SUPPORTED;  // external semaphores
  }
}

}  // namespace

CUresult add_graph_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t n, CUgraphNodeType type,
                        const std::function<CUresult(GraphNode*)>& record) {
  return add_node(out, graph, deps, n, type, record);
}

CUresult add_batch_mem_op_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t n,
                               const CUDA_BATCH_MEM_OP_NODE_PARAMS* p) {
  if (p == nullptr || (p->count > 0 && p->paramArray == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return add_node(out, graph, deps, n, CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, [&](GraphNode* node) {
    node->mem_ops.assign(p->paramArray, p->paramArray + p->count);
    node->mem_op_flags = p->flags;
    node->mem_op_context = p->ctx;
    return record_batch_mem_ops(node);
  });
}

CUresult record_memset(const CUDA_MEMSET_NODE_PARAMS& p, GraphNode* into) {
  if (p.elementSize != 1 && p.elementSize != 2 && p.elementSize != 4) return CUDA_ERROR_INVALID_VALUE;
  if (p.width == 0 || p.height == 0 || (p.height > 1 && p.pitch < p.width * p.elementSize))
    return CUDA_ERROR_INVALID_VALUE;
  return record_on_private_stream(
      [&](CUstream s) {
        uint64_t id = 0;
        if (CUresult rc = stream_id(s, false, &id); rc != CUDA_SUCCESS) return rc;
        return memset_device({p.dst, p.pitch}, p.value, p.elementSize, p.width, p.height, id, true);
      },
      into);
}

CUresult record_memcpy(const CUDA_MEMCPY3D& p, GraphNode* into) {
  if (CUresult rc = record_on_private_stream([&](CUstream s) { return tally_entry_cuMemcpy3DAsync_v3020(&p, s); },
                                             into);
      rc != CUDA_SUCCESS)
    return rc;
  into->copy.params = std::make_shared<const CUDA_MEMCPY3D>(p);
  return CUDA_SUCCESS;
}

CUresult record_host(CUhostFn fn, void* data, GraphNode* into) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  into->host_fn = fn;
  into->host_data = data;
  return record_on_private_stream([&](CUstream s) { return tally_entry_cuLaunchHostFunc_v10000(s, fn, data); },
                                  into);
}

CUresult record_event(CUevent event, bool record, GraphNode* into) {
  if (event == nullptr) return CUDA_ERROR_INVALID_VALUE;
  into->event = event;
  return record_on_private_stream(
      [&](CUstream s) {
        // A record node records each time it runs: an "external" record in capture terms.
        return record ? tally_entry_cuEventRecordWithFlags_v11010(event, s, CU_EVENT_RECORD_EXTERNAL)
                      : tally_entry_cuStreamWaitEvent_v3020(s, event, 0);
      },
      into);
}

CUresult record_batch_mem_ops(GraphNode* node) {
  node->ops.clear();
  return record_on_private_stream(
      [node](CUstream s) {
        return tally_entry_cuStreamBatchMemOp_v11070(s, static_cast<unsigned>(node->mem_ops.size()),
                                                     node->mem_ops.data(), node->mem_op_flags);
      },
      node);
}

namespace {

// Edges: `to` depends on `from`, for each pair.
CUresult change_dependencies(CUgraph graph, const CUgraphNode* from, const CUgraphNode* to, size_t n, bool add) {
  GraphObject* g = as_graph(graph);
  if (g == nullptr || (n > 0 && (from == nullptr || to == nullptr))) return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(g->mutex);
  for (size_t i = 0; i < n; ++i) {
    GraphNode *a = as_graph_node(from[i]), *b = as_graph_node(to[i]);
    if (a == nullptr || b == nullptr || a->graph != g || b->graph != g || a == b) return CUDA_ERROR_INVALID_VALUE;
    auto it = std::find(b->depends_on.begin(), b->depends_on.end(), a);
    if (add == (it != b->depends_on.end())) return CUDA_ERROR_INVALID_VALUE;  // already there / not there
    if (add) {
      b->depends_on.push_back(a);
    } else {
      b->depends_on.erase(it);
    }
  }
  return CUDA_SUCCESS;
}

template <class Params>
CUresult set_kernel_params(CUgraphNode n, const Params* p, CUfunction func) {
  GraphNode* node = as_graph_node(n);
  if (node == nullptr || p == nullptr || node->type != CU_GRAPH_NODE_TYPE_KERNEL) return CUDA_ERROR_INVALID_VALUE;
  KernelNodeLaunch k;
  if (CUresult rc = copy_launch(kernel_fields(*p, func), &k); rc != CUDA_SUCCESS) return rc;
  {
    std::lock_guard<std::mutex> lock(node->graph->mutex);
    k.cooperative = node->kernel.cooperative;
    std::copy(node->kernel.cluster, node->kernel.cluster + 3, k.cluster);
  }
  ReplayList ops;
  if (CUresult rc = record_launch(k, &ops); rc != CUDA_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(node->graph->mutex);
  node->kernel = std::move(k);
  node->ops = std::move(ops);
  return CUDA_SUCCESS;
}

// The node's new launch replaces its old one in the instantiated graph only (the
// graph it came from keeps its own).
template <class Params>
CUresult set_exec_kernel_params(CUgraphExec exec, CUgraphNode n, const Params* p, CUfunction func) {
  GraphExecObject* e = as_graph_exec(exec);
  GraphNode* node = as_graph_node(n);
  if (e == nullptr || node == nullptr || p == nullptr || node->type != CU_GRAPH_NODE_TYPE_KERNEL)
    return CUDA_ERROR_INVALID_VALUE;
  KernelNodeLaunch k;
  if (CUresult rc = copy_launch(kernel_fields(*p, func), &k); rc != CUDA_SUCCESS) return rc;
  {
    std::lock_guard<std::mutex> lock(node->graph->mutex);
    k.cooperative = node->kernel.cooperative;
    std::copy(node->kernel.cluster, node->kernel.cluster + 3, k.cluster);
  }
  ReplayList ops;
  if (CUresult rc = record_launch(k, &ops); rc != CUDA_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(e->mutex);
  auto at = e->index.find(node);
  if (at == e->index.end()) return CUDA_ERROR_INVALID_VALUE;  // not a node of the instantiated graph
  const ExecNode& entry = e->nodes[at->second];
  if (k.function != entry.function) return CUDA_ERROR_INVALID_VALUE;  // CUDA allows no change of function here
  std::shared_ptr<const ReplayList> old = std::atomic_load(&e->ops);
  if (old == nullptr || ops.size() != 1 || entry.op_count != 1) return CUDA_ERROR_INVALID_VALUE;
  auto updated = std::make_shared<ReplayList>(*old);
  (*updated)[entry.first_op] = ops.front();
  std::atomic_store(&e->ops, std::shared_ptr<const ReplayList>(std::move(updated)));
  e->nodes[at->second].kernel = std::make_shared<const KernelNodeLaunch>(k);   // what a later redefine sends
  // The server's copy takes the new launch (launches sent before keep the old one);
  // where it cannot, the client replays the updated graph from now on.
  if (!update_kernel_on_server(e->server_graph.load(), static_cast<uint32_t>(at->second), k, entry.enabled))
    forget_on_server(e->server_graph.exchange(0));
  return CUDA_SUCCESS;
}

CUfunction function_of(const CUDA_KERNEL_NODE_PARAMS_v2& p) {
  return p.func != nullptr ? p.func : reinterpret_cast<CUfunction>(p.kern);
}

}  // namespace

KernelNodeLaunch& KernelNodeLaunch::operator=(const KernelNodeLaunch& other) {
  if (this == &other) return *this;
  function = other.function;
  std::copy(other.grid, other.grid + 3, grid);
  std::copy(other.block, other.block + 3, block);
  shared_bytes = other.shared_bytes;
  cooperative = other.cooperative;
  std::copy(other.cluster, other.cluster + 3, cluster);
  params = other.params;
  pointers.clear();
  for (void* p : other.pointers)
    pointers.push_back(params.data() + (static_cast<const uint8_t*>(p) - other.params.data()));
  return *this;
}

CUresult order_graph(GraphObject* graph, ReplayList* ops, std::unordered_map<const GraphNode*, size_t>* first_op,
                     std::unordered_map<const GraphNode*, size_t>* op_counts) {
  std::lock_guard<std::mutex> lock(graph->mutex);
  const std::vector<GraphNode*>& nodes = graph->nodes;
  std::unordered_map<const GraphNode*, size_t> index;
  for (size_t i = 0; i < nodes.size(); ++i) index[nodes[i]] = i;
  std::vector<size_t> waiting(nodes.size());             // dependencies not yet placed
  std::vector<std::vector<size_t>> dependents(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    waiting[i] = nodes[i]->depends_on.size();
    for (const GraphNode* d : nodes[i]->depends_on) dependents[index.at(d)].push_back(i);
  }
  // Kahn's algorithm, always taking the earliest-added node that is ready. For a
  // captured graph (nodes added after their dependencies) that is capture order.
  std::priority_queue<size_t, std::vector<size_t>, std::greater<size_t>> ready;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (waiting[i] == 0) ready.push(i);
  ops->clear();
  first_op->clear();
  assign_condition_defaults(graph, ops);
  size_t placed = 0;
  while (!ready.empty()) {
    const size_t i = ready.top();
    ready.pop();
    ++placed;
    (*first_op)[nodes[i]] = ops->size();
    const size_t before = ops->size();
    if (GraphObject* child = nodes[i]->child) {  // runs the child as it is now
      ReplayList child_ops;
      std::unordered_map<const GraphNode*, size_t> unused;
      if (CUresult rc = order_graph(child, &child_ops, &unused); rc != CUDA_SUCCESS) return rc;
      ops->insert(ops->end(), child_ops.begin(), child_ops.end());
    } else if (nodes[i]->conditional != nullptr) {  // runs its bodies as they are now
      Replay chosen;
      if (CUresult rc = conditional_replay(nodes[i], &chosen); rc != CUDA_SUCCESS) return rc;
      ops->push_back(std::move(chosen));
    } else {
      ops->insert(ops->end(), nodes[i]->ops.begin(), nodes[i]->ops.end());
    }
    if (op_counts != nullptr) (*op_counts)[nodes[i]] = ops->size() - before;
    for (size_t j : dependents[i])
      if (--waiting[j] == 0) ready.push(j);
  }
  return placed == nodes.size() ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;  // else a cycle
}

namespace {

std::vector<ExecNode> describe_nodes(GraphObject* graph, const std::unordered_map<const GraphNode*, size_t>& first_op,
                                     const std::unordered_map<const GraphNode*, size_t>& op_counts) {
  std::lock_guard<std::mutex> lock(graph->mutex);
  std::unordered_map<const GraphNode*, size_t> index;
  for (size_t i = 0; i < graph->nodes.size(); ++i) index[graph->nodes[i]] = i;
  std::vector<ExecNode> out;
  for (const GraphNode* node : graph->nodes) {
    ExecNode e;
    e.source = node;
    e.type = node->type;
    for (const GraphNode* d : node->depends_on) e.depends_on.push_back(index.at(d));
    auto at = first_op.find(node);
    e.first_op = at == first_op.end() ? 0 : at->second;
    auto counted = op_counts.find(node);
    e.op_count = counted == op_counts.end() ? node->ops.size() : counted->second;
    e.function = node->kernel.function;
    e.copy = node->copy;
    e.memset = node->memset;
    e.allocation = node->allocation.get();
    e.host_fn = node->host_fn;
    e.host_data = node->host_data;
    e.event = node->event;
    if (node->child != nullptr)
      e.child = std::make_shared<const std::vector<ExecNode>>(describe_nodes(node->child, {}, {}));
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

CUresult instantiate_graph(GraphObject* graph, ReplayList* ops, std::vector<ExecNode>* nodes) {
  if (graph->capturing.load(std::memory_order_acquire)) return CUDA_ERROR_INVALID_VALUE;
  std::unordered_map<const GraphNode*, size_t> first_op, op_counts;
  if (CUresult rc = order_graph(graph, ops, &first_op, &op_counts); rc != CUDA_SUCCESS) return rc;
  *nodes = describe_nodes(graph, first_op, op_counts);
  return CUDA_SUCCESS;
}

}  // namespace tally::client

using namespace tally::client;

TALLY_ENTRY(cuGraphCreate_v10000)(CUgraph* phGraph, unsigned int flags) {
  if (phGraph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  auto* g = new GraphObject();
  *phGraph = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuGraphAddKernelNode_v10000)(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                         size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v1* nodeParams) {
  return add_kernel(phGraphNode, hGraph, dependencies, numDependencies, nodeParams,
                    nodeParams == nullptr ? nullptr : nodeParams->func);
}
TALLY_ENTRY(cuGraphAddKernelNode_v12000)(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                         size_t numDependencies, const CUDA_KERNEL_NODE_PARAMS_v2* nodeParams) {
  return add_kernel(phGraphNode, hGraph, dependencies, numDependencies, nodeParams,
                    nodeParams == nullptr ? nullptr : function_of(*nodeParams));
}
TALLY_ENTRY(cuGraphAddMemcpyNode_v10000)(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                         size_t numDependencies, const CUDA_MEMCPY3D_v2* copyParams, CUcontext ctx) {
  (void)ctx;  // the one context
  return add_memcpy(phGraphNode, hGraph, dependencies, numDependencies, copyParams);
}
TALLY_ENTRY(cuGraphAddMemsetNode_v10000)(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                         size_t numDependencies, const CUDA_MEMSET_NODE_PARAMS_v1* memsetParams,
                                         CUcontext ctx) {
  (void)ctx;
  if (memsetParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return add_memset(phGraphNode, hGraph, dependencies, numDependencies, *memsetParams);
}
TALLY_ENTRY(cuGraphAddHostNode_v10000)(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                       size_t numDependencies, const CUDA_HOST_NODE_PARAMS_v1* nodeParams) {
  if (nodeParams == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return add_host(phGraphNode, hGraph, dependencies, numDependencies, nodeParams->fn, nodeParams->userData);
}
TALLY_ENTRY(cuGraphAddEmptyNode_v10000)(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                        size_t numDependencies) {
  return add_node(phGraphNode, hGraph, dependencies, numDependencies, CU_GRAPH_NODE_TYPE_EMPTY,
                  [](GraphNode*) { return CUDA_SUCCESS; });
}
TALLY_ENTRY(cuGraphAddChildGraphNode_v10000)(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                             size_t numDependencies, CUgraph childGraph) {
  return add_child(phGraphNode, hGraph, dependencies, numDependencies, childGraph);
}
TALLY_ENTRY(cuGraphAddEventRecordNode_v11010)(CUgraphNode* phGraphNode, CUgraph hGraph,
                                              const CUgraphNode* dependencies, size_t numDependencies, CUevent event) {
  return add_event(phGraphNode, hGraph, dependencies, numDependencies, event, true);
}
TALLY_ENTRY(cuGraphAddEventWaitNode_v11010)(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                            size_t numDependencies, CUevent event) {
  return add_event(phGraphNode, hGraph, dependencies, numDependencies, event, false);
}
TALLY_ENTRY(cuGraphAddNode_v12020)(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                   size_t numDependencies, CUgraphNodeParams* nodeParams) {
  return add_generic(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}
TALLY_ENTRY(cuGraphAddNode_v12030)(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                   const CUgraphEdgeData* dependencyData, size_t numDependencies,
                                   CUgraphNodeParams* nodeParams) {
  (void)dependencyData;  // edge data only refines programmatic launches; every edge is a full dependency here
  return add_generic(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

TALLY_ENTRY(cuGraphAddDependencies_v10000)(CUgraph hGraph, const CUgraphNode* from, const CUgraphNode* to,
                                           size_t numDependencies) {
  return change_dependencies(hGraph, from, to, numDependencies, true);
}
TALLY_ENTRY(cuGraphAddDependencies_v12030)(CUgraph hGraph, const CUgraphNode* from, const CUgraphNode* to,
                                           const CUgraphEdgeData* edgeData, size_t numDependencies) {
  (void)edgeData;
  return change_dependencies(hGraph, from, to, numDependencies, true);
}
TALLY_ENTRY(cuGraphRemoveDependencies_v10000)(CUgraph hGraph, const CUgraphNode* from, const CUgraphNode* to,
                                              size_t numDependencies) {
  return change_dependencies(hGraph, from, to, numDependencies, false);
}
TALLY_ENTRY(cuGraphRemoveDependencies_v12030)(CUgraph hGraph, const CUgraphNode* from, const CUgraphNode* to,
                                              const CUgraphEdgeData* edgeData, size_t numDependencies) {
  (void)edgeData;
  return change_dependencies(hGraph, from, to, numDependencies, false);
}

// The node and its edges go; instantiated graphs keep what they were made from.
TALLY_ENTRY(cuGraphDestroyNode_v10000)(CUgraphNode hNode) {
  GraphNode* node = as_graph_node(hNode);
  if (node == nullptr) return CUDA_ERROR_INVALID_VALUE;
  GraphObject* g = node->graph;
  std::lock_guard<std::mutex> lock(g->mutex);
  ObjectTag expected = ObjectTag::kGraphNode;
  if (!node->tag.compare_exchange_strong(expected, ObjectTag::kDead)) return CUDA_ERROR_INVALID_VALUE;
  g->nodes.erase(std::find(g->nodes.begin(), g->nodes.end(), node));
  for (GraphNode* other : g->nodes) {
    auto& deps = other->depends_on;
    deps.erase(std::remove(deps.begin(), deps.end(), node), deps.end());
  }
  node->ops.clear();
  node->kernel = KernelNodeLaunch();
  node->allocation.reset();   // instantiations keep their own reference
  if (node->child != nullptr) destroy_graph(node->child);
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuGraphKernelNodeSetParams_v10000)(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v1* nodeParams) {
  return set_kernel_params(hNode, nodeParams, nodeParams == nullptr ? nullptr : nodeParams->func);
}
TALLY_ENTRY(cuGraphKernelNodeSetParams_v12000)(CUgraphNode hNode, const CUDA_KERNEL_NODE_PARAMS_v2* nodeParams) {
  return set_kernel_params(hNode, nodeParams, nodeParams == nullptr ? nullptr : function_of(*nodeParams));
}
TALLY_ENTRY(cuGraphExecKernelNodeSetParams_v10010)(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_KERNEL_NODE_PARAMS_v1* nodeParams) {
  return set_exec_kernel_params(hGraphExec, hNode, nodeParams, nodeParams == nullptr ? nullptr : nodeParams->func);
}
TALLY_ENTRY(cuGraphExecKernelNodeSetParams_v12000)(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_KERNEL_NODE_PARAMS_v2* nodeParams) {
  return set_exec_kernel_params(hGraphExec, hNode, nodeParams,
                                nodeParams == nullptr ? nullptr : function_of(*nodeParams));
}
