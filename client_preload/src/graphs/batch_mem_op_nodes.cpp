// Batch-mem-op graph nodes (cuGraphAddBatchMemOpNode, cuGraphBatchMemOpNodeGetParams/
// SetParams): a node holding stream memory operations (waits and writes of values,
// streams/stream_memory_ops.cpp), replayed as cuStreamBatchMemOp on the launch
// stream. Captured wait/write calls make the same nodes. An instantiated graph's
// node takes new operations (cuGraphExecBatchMemOpNodeSetParams) that replay as
// many requests as the old ones (waits and writes; a barrier is none).
#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "connection/connection.h"
#include "entry_points/entry_point.h"
#include "graphs/graph_nodes.h"

using namespace tally::client;

TALLY_ENTRY(cuGraphAddBatchMemOpNode_v11070)(CUgraphNode* phGraphNode, CUgraph hGraph, const CUgraphNode* dependencies,
                                             size_t numDependencies, const CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams) {
  return add_batch_mem_op_node(phGraphNode, hGraph, dependencies, numDependencies, nodeParams);
}

// The operations stay the node's: paramArray points at its own copy, valid until the
// node changes or goes.
TALLY_ENTRY(cuGraphBatchMemOpNodeGetParams_v11070)(CUgraphNode hNode, CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams_out) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  GraphNode* node = as_graph_node(hNode);
  if (node == nullptr || nodeParams_out == nullptr || node->type != CU_GRAPH_NODE_TYPE_BATCH_MEM_OP)
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(node->graph->mutex);
  nodeParams_out->ctx = node->mem_op_context;
  nodeParams_out->count = static_cast<unsigned>(node->mem_ops.size());
  nodeParams_out->paramArray = node->mem_ops.data();
  nodeParams_out->flags = node->mem_op_flags;
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuGraphBatchMemOpNodeSetParams_v11070)(CUgraphNode hNode, const CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  GraphNode* node = as_graph_node(hNode);
  if (node == nullptr || nodeParams == nullptr || node->type != CU_GRAPH_NODE_TYPE_BATCH_MEM_OP ||
      (nodeParams->count > 0 && nodeParams->paramArray == nullptr))
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(node->graph->mutex);
  const std::vector<CUstreamBatchMemOpParams> old_ops = node->mem_ops;
  const unsigned old_flags = node->mem_op_flags;
  const CUcontext old_context = node->mem_op_context;
  node->mem_ops.assign(nodeParams->paramArray, nodeParams->paramArray + nodeParams->count);
  node->mem_op_flags = nodeParams->flags;
  node->mem_op_context = nodeParams->ctx;
  CUresult rc = record_batch_mem_ops(node);
  if (rc != CUDA_SUCCESS) {      // refused: the node keeps what it had
    node->mem_ops = old_ops;
    node->mem_op_flags = old_flags;
    node->mem_op_context = old_context;
    record_batch_mem_ops(node);
  }
  return rc;
}

TALLY_ENTRY(cuGraphExecBatchMemOpNodeSetParams_v11070)(CUgraphExec hGraphExec, CUgraphNode hNode,
                                                       const CUDA_BATCH_MEM_OP_NODE_PARAMS* nodeParams) {
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  GraphExecObject* exec = as_graph_exec(hGraphExec);
  GraphNode* node = as_graph_node(hNode);
  if (exec == nullptr || node == nullptr || nodeParams == nullptr || node->type != CU_GRAPH_NODE_TYPE_BATCH_MEM_OP ||
      (nodeParams->count > 0 && nodeParams->paramArray == nullptr))
    return CUDA_ERROR_INVALID_VALUE;
  GraphNode scratch;      // the new operations' replay, recorded as a node's would be
  scratch.mem_ops.assign(nodeParams->paramArray, nodeParams->paramArray + nodeParams->count);
  scratch.mem_op_flags = nodeParams->flags;
  if (CUresult rc = record_batch_mem_ops(&scratch); rc != CUDA_SUCCESS) return rc;
  std::lock_guard<std::mutex> lock(exec->mutex);
  auto at = exec->index.find(node);
  if (at == exec->index.end()) return CUDA_ERROR_INVALID_VALUE;   // not a node of the instantiated graph
  const ExecNode& entry = exec->nodes[at->second];
  std::shared_ptr<const ReplayList> old = std::atomic_load(&exec->ops);
  if (old == nullptr || scratch.ops.size() != entry.op_count) return CUDA_ERROR_INVALID_VALUE;
  auto updated = std::make_shared<ReplayList>(*old);
  std::copy(scratch.ops.begin(), scratch.ops.end(), updated->begin() + static_cast<std::ptrdiff_t>(entry.first_op));
  std::atomic_store(&exec->ops, std::shared_ptr<const ReplayList>(std::move(updated)));
  return CUDA_SUCCESS;
}
