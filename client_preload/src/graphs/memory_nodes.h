// Graph memory: memory-allocation and memory-free nodes (cuGraphAddMemAllocNode,
// cuGraphAddMemFreeNode, and the nodes stream capture makes from cuMemAllocAsync
// and cuMemFreeAsync), in memory_nodes.cpp.
//
// CUDA fixes an allocation node's address when the node is made and keeps it for
// every instantiation and launch; the memory is usable from the node's run until a
// free node of the same graph runs or, for an allocation the graph does not free,
// until the job frees it (cuMemFreeAsync, cuMemFree, a free node of another graph,
// or a relaunch of an exec instantiated with AUTO_FREE_ON_LAUNCH). tally backs the
// address with an ordinary device allocation (charged to the job's quota like any
// other, carried by suspension and migration) from the node's creation until the
// last graph and exec that name it are destroyed; launches only move each
// allocation between "live" and "freed", so the errors CUDA gives (relaunching a
// graph whose allocation is still live, freeing one twice) are given here too.
// Unlike CUDA's graph memory pool, physical memory is not shared between graphs:
// a job holds the sum of its allocation nodes' sizes.
#pragma once
#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

#include "driver_headers.h"
#include "graphs/graph_objects.h"

namespace tally::client {

struct GraphAllocation {
  CUdeviceptr dptr = 0;
  size_t bytes = 0;
  CUDA_MEM_ALLOC_NODE_PARAMS params{};   // as given (dptr filled in), for GetParams
  std::atomic<bool> live{false};         // allocated in stream order and not freed since
  std::atomic<bool> ran{false};          // has been allocated by a run at least once
  ~GraphAllocation();                    // gives the memory back to the server
};

// A new allocation of `bytes` for an allocation node (nullptr with *rc on failure).
std::shared_ptr<GraphAllocation> make_graph_allocation(const CUDA_MEM_ALLOC_NODE_PARAMS& params, CUresult* rc);

// The graph allocation at `dptr`, or nullptr.
std::shared_ptr<GraphAllocation> find_graph_allocation(CUdeviceptr dptr);

// cuMemFree / cuMemFreeAsync outside a graph: true when `dptr` is a graph allocation
// (*rc: success if it was live, CUDA_ERROR_INVALID_VALUE if already freed).
bool free_graph_allocation(CUdeviceptr dptr, CUresult* rc);

// Capture: true when `stream` is being captured; then an allocation node (or a free
// node of a graph allocation) joins the capture and *rc is the call's result.
bool capture_graph_alloc(uint64_t stream, size_t bytes, CUmemoryPool pool, CUdeviceptr* dptr, CUresult* rc);
bool capture_graph_free(uint64_t stream, CUdeviceptr dptr, CUresult* rc);

// Instantiation: the allocations the graph (and its child graphs) makes and frees.
void collect_graph_memory(GraphObject* graph, GraphExecObject* exec);

// cuGraphAddNode of a CU_GRAPH_NODE_TYPE_MEM_ALLOC or _MEM_FREE node.
CUresult add_memory_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t n, CUgraphNodeParams* p);

// A launch of `exec`: CUDA_ERROR_INVALID_VALUE when an allocation it makes is still
// live (and the exec does not free on launch) or one it frees is not; otherwise
// marks them live and freed.
CUresult begin_graph_memory(GraphExecObject* exec);

}  // namespace tally::client
