// Graph memory (memory_nodes.h says what tally models): allocation and free nodes,
// their capture from cuMemAllocAsync/cuMemFreeAsync, what launches check, and the
// device's graph-memory attributes.
#include "graphs/memory_nodes.h"

#include <algorithm>
#include <mutex>
#include <unordered_map>

#include "connection/connection.h"
#include "entry_points/entry_point.h"
#include "graphs/capture.h"
#include "graphs/graph_nodes.h"
#include "logging/log.h"
#include "memory/device_memory.h"

namespace tally::client {
namespace {

struct Registry {
  std::mutex mutex;
  std::unordered_map<CUdeviceptr, std::weak_ptr<GraphAllocation>> by_address;
  uint64_t reserved = 0, reserved_high = 0;   // bytes of every allocation that exists
  uint64_t used = 0, used_high = 0;           // bytes of those that have run (set_live keeps it)
};

Registry& registry() {
  static Registry* r = new Registry();   // never destroyed: allocations outlive static destruction
  return *r;
}

// Marks `a` live or freed; returns whether it was live. Its first run associates its
// memory with graphs for good (until it goes): what the device's "used" counts.
bool set_live(GraphAllocation& a, bool live) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const bool was = a.live.exchange(live);
  if (live && !a.ran.exchange(true)) {
    r.used += a.bytes;
    r.used_high = std::max(r.used_high, r.used);
  }
  return was;
}

CUresult check_params(const CUDA_MEM_ALLOC_NODE_PARAMS& p) {
  if (p.bytesize == 0 || p.poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
  if (p.poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
  if (p.poolProps.location.id != 0) return CUDA_ERROR_INVALID_DEVICE;
  if (p.poolProps.handleTypes != CU_MEM_HANDLE_TYPE_NONE) return CUDA_ERROR_INVALID_VALUE;  // no IPC of graph memory
  if (p.accessDescCount > 1 || (p.accessDescCount == 1 && p.accessDescs == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

CUresult add_alloc_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t n,
                        CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = check_params(*params); rc != CUDA_SUCCESS) return rc;
  std::shared_ptr<GraphAllocation> made;
  CUresult rc = add_graph_node(out, graph, deps, n, CU_GRAPH_NODE_TYPE_MEM_ALLOC, [&](GraphNode* node) {
    CUresult r = CUDA_SUCCESS;
    made = make_graph_allocation(*params, &r);
    node->allocation = made;
    return r;
  });
  if (rc == CUDA_SUCCESS) params->dptr = made->dptr;
  return rc;
}

CUresult add_free_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t n, CUdeviceptr dptr) {
  std::shared_ptr<GraphAllocation> freed = find_graph_allocation(dptr);
  if (freed == nullptr) {
    log_error("cuGraphAddMemFreeNode: 0x%llx is not memory a graph allocated (CUDA_ERROR_INVALID_VALUE)",
              static_cast<unsigned long long>(dptr));
    return CUDA_ERROR_INVALID_VALUE;
  }
  return add_graph_node(out, graph, deps, n, CU_GRAPH_NODE_TYPE_MEM_FREE, [&](GraphNode* node) {
    node->allocation = freed;
    return CUDA_SUCCESS;
  });
}

void collect(GraphObject* graph, GraphExecObject* exec) {
  std::lock_guard<std::mutex> lock(graph->mutex);
  for (GraphNode* node : graph->nodes) {
    if (node->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) exec->allocates.push_back(node->allocation);
    if (node->type == CU_GRAPH_NODE_TYPE_MEM_FREE) exec->frees.push_back(node->allocation);
    if (node->child != nullptr) collect(node->child, exec);
  }
}

}  // namespace

GraphAllocation::~GraphAllocation() {
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    r.by_address.erase(dptr);
    r.reserved -= bytes;
    if (ran.load()) r.used -= bytes;
  }
  if (free_device_memory(dptr) != CUDA_SUCCESS)
    log_error("graph memory at 0x%llx (%zu bytes) could not be given back", static_cast<unsigned long long>(dptr),
              bytes);
}

std::shared_ptr<GraphAllocation> make_graph_allocation(const CUDA_MEM_ALLOC_NODE_PARAMS& params, CUresult* rc) {
  CUdeviceptr dptr = 0;
  *rc = allocate_device_memory(&dptr, params.bytesize);
  if (*rc != CUDA_SUCCESS) return nullptr;
  auto made = std::make_shared<GraphAllocation>();
  made->dptr = dptr;
  made->bytes = params.bytesize;
  made->params = params;
  made->params.dptr = dptr;
  made->params.accessDescs = nullptr;   // the caller's array is not kept
  made->params.accessDescCount = 0;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.by_address[dptr] = made;
  r.reserved += made->bytes;
  r.reserved_high = std::max(r.reserved_high, r.reserved);
  return made;
}

std::shared_ptr<GraphAllocation> find_graph_allocation(CUdeviceptr dptr) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.by_address.find(dptr);
  return it == r.by_address.end() ? nullptr : it->second.lock();
}

bool free_graph_allocation(CUdeviceptr dptr, CUresult* rc) {
  std::shared_ptr<GraphAllocation> a = find_graph_allocation(dptr);
  if (a == nullptr) return false;
  if (!set_live(*a, false)) {
    log_error("free of graph memory 0x%llx that is not allocated now (freed already, or its graph has not run) "
              "(CUDA_ERROR_INVALID_VALUE)", static_cast<unsigned long long>(dptr));
    *rc = CUDA_ERROR_INVALID_VALUE;
  } else {
    *rc = CUDA_SUCCESS;
  }
  return true;
}

bool capture_graph_alloc(uint64_t stream, size_t bytes, CUmemoryPool pool, CUdeviceptr* dptr, CUresult* rc) {
  CaptureInfo info = capture_info(stream);
  if (info.status == CU_STREAM_CAPTURE_STATUS_NONE) return false;
  if (info.status == CU_STREAM_CAPTURE_STATUS_INVALIDATED) {
    *rc = CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    return true;
  }
  if (pool != nullptr) {   // explicit pools' memory is not graph memory
    log_error("cuMemAllocFromPoolAsync in a stream capture: tally captures allocations from the device's pool only "
              "(CUDA_ERROR_NOT_SUPPORTED)");
    *rc = CUDA_ERROR_NOT_SUPPORTED;
    return true;
  }
  CUDA_MEM_ALLOC_NODE_PARAMS params{};
  params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  params.poolProps.location = {CU_MEM_LOCATION_TYPE_DEVICE, 0};
  params.bytesize = bytes;
  std::shared_ptr<GraphAllocation> made = make_graph_allocation(params, rc);
  if (made == nullptr) return true;
  captured(stream, true, rc, [&](GraphNode& node) {
    node.type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
    node.allocation = made;
  });
  if (*rc == CUDA_SUCCESS) *dptr = made->dptr;
  return true;
}

bool capture_graph_free(uint64_t stream, CUdeviceptr dptr, CUresult* rc) {
  if (capture_info(stream).status == CU_STREAM_CAPTURE_STATUS_NONE) return false;
  std::shared_ptr<GraphAllocation> freed = find_graph_allocation(dptr);
  if (freed == nullptr) return false;   // not graph memory: the capture refuses the free as before
  return captured(stream, true, rc, [&](GraphNode& node) {
    node.type = CU_GRAPH_NODE_TYPE_MEM_FREE;
    node.allocation = freed;
  });
}

void collect_graph_memory(GraphObject* graph, GraphExecObject* exec) {
  exec->allocates.clear();
  exec->frees.clear();
  collect(graph, exec);
}

CUresult begin_graph_memory(GraphExecObject* exec) {
  if (exec->allocates.empty() && exec->frees.empty()) return CUDA_SUCCESS;
  const bool auto_free = exec->flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH;
  for (const auto& a : exec->allocates) {
    if (a->live.load() && !auto_free) {
      log_error("cuGraphLaunch: the graph's allocation at 0x%llx from its last launch is not freed yet (free it, or "
                "instantiate with CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) (CUDA_ERROR_INVALID_VALUE)",
                static_cast<unsigned long long>(a->dptr));
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  for (const auto& f : exec->frees) {
    const bool made_here = std::find(exec->allocates.begin(), exec->allocates.end(), f) != exec->allocates.end();
    if (!made_here && !f->live.load()) {
      log_error("cuGraphLaunch: the graph frees 0x%llx, which is not allocated now (CUDA_ERROR_INVALID_VALUE)",
                static_cast<unsigned long long>(f->dptr));
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  for (const auto& a : exec->allocates) set_live(*a, true);
  for (const auto& f : exec->frees) set_live(*f, false);
  return CUDA_SUCCESS;
}

CUresult add_memory_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t n, CUgraphNodeParams* p) {
  if (p->type == CU_GRAPH_NODE_TYPE_MEM_ALLOC) {
    static_assert(sizeof(CUDA_MEM_ALLOC_NODE_PARAMS_v2) == sizeof(CUDA_MEM_ALLOC_NODE_PARAMS));
    return add_alloc_node(out, graph, deps, n, reinterpret_cast<CUDA_MEM_ALLOC_NODE_PARAMS*>(&p->alloc));
  }
  return add_free_node(out, graph, deps, n, p->free.dptr);
}

}  // namespace tally::client

using namespace tally::client;

TALLY_ENTRY(cuGraphAddMemAllocNode_v11040)(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                           size_t numDependencies, CUDA_MEM_ALLOC_NODE_PARAMS* nodeParams) {
  return add_alloc_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}
TALLY_ENTRY(cuGraphAddMemFreeNode_v11040)(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                          size_t numDependencies, CUdeviceptr dptr) {
  return add_free_node(phGraphNode, hGraph, dependencies, numDependencies, dptr);
}
TALLY_ENTRY(cuGraphMemAllocNodeGetParams_v11040)(CUgraphNode hNode, CUDA_MEM_ALLOC_NODE_PARAMS* params_out) {
  GraphNode* node = as_graph_node(hNode);
  if (node == nullptr || params_out == nullptr || node->type != CU_GRAPH_NODE_TYPE_MEM_ALLOC) return CUDA_ERROR_INVALID_VALUE;
  *params_out = node->allocation->params;
  return CUDA_SUCCESS;
}
TALLY_ENTRY(cuGraphMemFreeNodeGetParams_v11040)(CUgraphNode hNode, CUdeviceptr* dptr_out) {
  GraphNode* node = as_graph_node(hNode);
  if (node == nullptr || dptr_out == nullptr || node->type != CU_GRAPH_NODE_TYPE_MEM_FREE) return CUDA_ERROR_INVALID_VALUE;
  *dptr_out = node->allocation->dptr;
  return CUDA_SUCCESS;
}

// Used: bytes of the graph allocations that have run (CUDA keeps an allocation's
// memory associated with graphs after its free node runs, for the next launch: a graph
// that allocates and frees reads as using it; cuda-bindings' test_cuda.py checks that);
// reserved: of every graph allocation that exists (tally backs each for its whole life).
TALLY_ENTRY(cuDeviceGetGraphMemAttribute_v11040)(CUdevice device, CUgraphMem_attribute attr, void* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (device != 0) return CUDA_ERROR_INVALID_DEVICE;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto* out = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT: *out = r.used; return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH: *out = std::max(r.used_high, r.used); return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT: *out = r.reserved; return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH: *out = r.reserved_high; return CUDA_SUCCESS;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
}
TALLY_ENTRY(cuDeviceSetGraphMemAttribute_v11040)(CUdevice device, CUgraphMem_attribute attr, void* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (device != 0) return CUDA_ERROR_INVALID_DEVICE;
  // Only the high-water marks can be set, and only reset to 0 (as in CUDA).
  if (*static_cast<const cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (attr == CU_GRAPH_MEM_ATTR_USED_MEM_HIGH) {
    r.used_high = 0;
  } else if (attr == CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH) {
    r.reserved_high = 0;
  } else {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}
// Nothing to trim: no memory is held beyond the allocations that exist.
TALLY_ENTRY(cuDeviceGraphMemTrim_v11040)(CUdevice device) {
  return device == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}
