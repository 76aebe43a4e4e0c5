// Changing a node's parameters, in a graph (cuGraph{Memset,Memcpy,Host}NodeSetParams,
// cuGraphEvent{Record,Wait}NodeSetEvent, cuGraphNodeSetParams) and in an instantiated
// graph (cuGraphExec{Memset,Memcpy,Host}NodeSetParams, cuGraphExecEvent*NodeSetEvent,
// cuGraphExecNodeSetParams), and reading a memcpy node's (cuGraphMemcpyNodeGetParams).
// Kernel nodes' own entry points are graph_nodes.cpp's.
//
// A new setting is recorded as the node's stream operation would be (graph_nodes.h:
// record_*), so it is checked as that call is, and a refused one changes nothing. In
// a graph it replaces the node's operations; in an instantiated graph the node's
// operations in the exec's replay list and its entry (what the server's copy is
// defined from again: graph_update.cpp's replace_exec_node_ops), never the graph it
// was instantiated from. As in CUDA, an exec update keeps a memcpy's direction, and
// changes no node's type.
#include <mutex>

#include "connection/connection.h"
#include "entry_points/entry_point.h"
#include "graphs/graph_nodes.h"

namespace tally::client {
namespace {

// The new setting for a node of `type`, recorded into a scratch node.
using Record = std::function<CUresult(GraphNode*)>;

CUresult set_in_graph(CUgraphNode hNode, CUgraphNodeType type, const Record& record) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  GraphNode* node = as_graph_node(hNode);
  if (node == nullptr || node->type != type) return CUDA_ERROR_INVALID_VALUE;
  GraphNode made;
  if (CUresult rc = record(&made); rc != CUDA_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(node->graph->mutex);
  node->ops = std::move(made.ops);
  node->memset = made.memset;
  node->copy = made.copy;
  node->host_fn = made.host_fn;
  node->host_data = made.host_data;
  node->event = made.event;
  return CUDA_SUCCESS;
}

CUresult set_in_exec(CUgraphExec hExec, CUgraphNode hNode, CUgraphNodeType type, const Record& record) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  GraphExecObject* e = as_graph_exec(hExec);
  GraphNode* node = as_graph_node(hNode);
  if (e == nullptr || node == nullptr || node->type != type) return CUDA_ERROR_INVALID_VALUE;
  GraphNode made;
  if (CUresult rc = record(&made); rc != CUDA_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(e->mutex);
  auto at = e->index.find(node);
  if (at == e->index.end()) return CUDA_ERROR_INVALID_VALUE;   // not a node of the instantiated graph
  ExecNode& entry = e->nodes[at->second];
  if (type == CU_GRAPH_NODE_TYPE_MEMCPY && (made.copy.from != entry.copy.from || made.copy.to != entry.copy.to))
    return CUDA_ERROR_INVALID_VALUE;   // an instantiated copy keeps its direction
  entry.memset = made.memset;
  entry.copy = made.copy;
  entry.host_fn = made.host_fn;
  entry.host_data = made.host_data;
  entry.event = made.event;
  replace_exec_node_ops(e, at->second, std::move(made.ops));
  return CUDA_SUCCESS;
}

Record memset_record(const CUDA_MEMSET_NODE_PARAMS* p) {
  return [p](GraphNode* into) { return p == nullptr ? CUDA_ERROR_INVALID_VALUE : record_memset(*p, into); };
}
Record memcpy_record(const CUDA_MEMCPY3D* p) {
  return [p](GraphNode* into) { return p == nullptr ? CUDA_ERROR_INVALID_VALUE : record_memcpy(*p, into); };
}
Record host_record(const CUDA_HOST_NODE_PARAMS* p) {
  return [p](GraphNode* into) {
    return p == nullptr ? CUDA_ERROR_INVALID_VALUE : record_host(p->fn, p->userData, into);
  };
}
Record event_record(CUevent event, bool record) {
  return [event, record](GraphNode* into) { return record_event(event, record, into); };
}

static_assert(sizeof(CUDA_KERNEL_NODE_PARAMS_v3) == sizeof(CUDA_KERNEL_NODE_PARAMS_v2),
              "cuGraph*NodeSetParams hands a kernel node's v3 parameters on as v2's");

// cuGraphNodeSetParams / cuGraphExecNodeSetParams: the node's type decides which of the
// above; kernel nodes go to their own entry points (`kernel`).
template <class Set, class Kernel>
CUresult set_generic(CUgraphNode hNode, CUgraphNodeParams* p, const Set& set, const Kernel& kernel) {
  GraphNode* node = as_graph_node(hNode);
  if (node == nullptr || p == nullptr || p->type != node->type) return CUDA_ERROR_INVALID_VALUE;
  switch (p->type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return kernel(reinterpret_cast<const CUDA_KERNEL_NODE_PARAMS_v2*>(&p->kernel));
    case CU_GRAPH_NODE_TYPE_MEMSET: {
      const CUDA_MEMSET_NODE_PARAMS m{p->memset.dst, p->memset.pitch, p->memset.value, p->memset.elementSize,
                                      p->memset.width, p->memset.height};
      return set(p->type, memset_record(&m));
    }
    case CU_GRAPH_NODE_TYPE_MEMCPY:
      if (p->memcpy.flags != 0 || p->memcpy.reserved != 0) return CUDA_ERROR_INVALID_VALUE;
      return set(p->type, memcpy_record(&p->memcpy.copyParams));
    case CU_GRAPH_NODE_TYPE_HOST: {
      const CUDA_HOST_NODE_PARAMS h{p->host.fn, p->host.userData};
      return set(p->type, host_record(&h));
    }
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return set(p->type, event_record(p->eventRecord.event, true));
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return set(p->type, event_record(p->eventWait.event, false));
    case CU_GRAPH_NODE_TYPE_EMPTY: return CUDA_SUCCESS;
    default: return CUDA_ERROR_NOT_SUPPORTED;
  }
}

// What a memcpy node copies: its parameters as given, or, for a captured copy, what the
// capture saw (memory types, extent, device addresses).
CUDA_MEMCPY3D memcpy_params_of(const CopyNodeShape& c) {
  if (c.params != nullptr) return *c.params;
  CUDA_MEMCPY3D p{};
  p.srcMemoryType = c.from;
  p.dstMemoryType = c.to;
  p.srcDevice = c.src;
  p.dstDevice = c.dst;
  p.srcPitch = c.src_pitch;
  p.dstPitch = c.dst_pitch;
  p.WidthInBytes = c.width;
  p.Height = c.height == 0 ? 1 : c.height;
  p.Depth = 1;
  return p;
}

}  // namespace
}  // namespace tally::client

using namespace tally::client;

TALLY_ENTRY(cuGraphMemsetNodeSetParams_v10000)(CUgraphNode hNode, const CUDA_MEMSET_NODE_PARAMS_v1* nodeParams) {
  return set_in_graph(hNode, CU_GRAPH_NODE_TYPE_MEMSET, memset_record(nodeParams));
}
TALLY_ENTRY(cuGraphMemcpyNodeSetParams_v10000)(CUgraphNode hNode, const CUDA_MEMCPY3D_v2* nodeParams) {
  return set_in_graph(hNode, CU_GRAPH_NODE_TYPE_MEMCPY, memcpy_record(nodeParams));
}
TALLY_ENTRY(cuGraphHostNodeSetParams_v10000)(CUgraphNode hNode, const CUDA_HOST_NODE_PARAMS_v1* nodeParams) {
  return set_in_graph(hNode, CU_GRAPH_NODE_TYPE_HOST, host_record(nodeParams));
}
TALLY_ENTRY(cuGraphEventRecordNodeSetEvent_v11010)(CUgraphNode hNode, CUevent event) {
  return set_in_graph(hNode, CU_GRAPH_NODE_TYPE_EVENT_RECORD, event_record(event, true));
}
TALLY_ENTRY(cuGraphEventWaitNodeSetEvent_v11010)(CUgraphNode hNode, CUevent event) {
  return set_in_graph(hNode, CU_GRAPH_NODE_TYPE_WAIT_EVENT, event_record(event, false));
}
TALLY_ENTRY(cuGraphNodeSetParams_v12020)(CUgraphNode hNode, CUgraphNodeParams* nodeParams) {
  return set_generic(
      hNode, nodeParams, [hNode](CUgraphNodeType type, const Record& r) { return set_in_graph(hNode, type, r); },
      [hNode](const CUDA_KERNEL_NODE_PARAMS_v2* k) { return tally_entry_cuGraphKernelNodeSetParams_v12000(hNode, k); });
}

TALLY_ENTRY(cuGraphExecMemsetNodeSetParams_v10020)(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_MEMSET_NODE_PARAMS_v1* memsetParams, CUcontext ctx) {
  (void)ctx;
  return set_in_exec(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_MEMSET, memset_record(memsetParams));
}
TALLY_ENTRY(cuGraphExecMemcpyNodeSetParams_v10020)(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                   const CUDA_MEMCPY3D_v2* copyParams, CUcontext ctx) {
  (void)ctx;
  return set_in_exec(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_MEMCPY, memcpy_record(copyParams));
}
TALLY_ENTRY(cuGraphExecHostNodeSetParams_v10020)(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                 const CUDA_HOST_NODE_PARAMS_v1* nodeParams) {
  return set_in_exec(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_HOST, host_record(nodeParams));
}
TALLY_ENTRY(cuGraphExecEventRecordNodeSetEvent_v11010)(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event) {
  return set_in_exec(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_EVENT_RECORD, event_record(event, true));
}
TALLY_ENTRY(cuGraphExecEventWaitNodeSetEvent_v11010)(CUgraphExec hGraphExec, CUgraphNode hNode, CUevent event) {
  return set_in_exec(hGraphExec, hNode, CU_GRAPH_NODE_TYPE_WAIT_EVENT, event_record(event, false));
}
TALLY_ENTRY(cuGraphExecNodeSetParams_v12020)(CUgraphExec hGraphExec, CUgraphNode hNode,
                                             CUgraphNodeParams* nodeParams) {
  return set_generic(
      hNode, nodeParams,
      [hGraphExec, hNode](CUgraphNodeType type, const Record& r) { return set_in_exec(hGraphExec, hNode, type, r); },
      [hGraphExec, hNode](const CUDA_KERNEL_NODE_PARAMS_v2* k) {
        return tally_entry_cuGraphExecKernelNodeSetParams_v12000(hGraphExec, hNode, k);
      });
}

TALLY_ENTRY(cuGraphMemcpyNodeGetParams_v10000)(CUgraphNode hNode, CUDA_MEMCPY3D_v2* nodeParams) {
  GraphNode* node = as_graph_node(hNode);
  if (node == nullptr || nodeParams == nullptr || node->type != CU_GRAPH_NODE_TYPE_MEMCPY)
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(node->graph->mutex);
  *nodeParams = memcpy_params_of(node->copy);
  return CUDA_SUCCESS;
}
