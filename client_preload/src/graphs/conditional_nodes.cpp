// Conditional nodes and their handles (conditional_nodes.h says how they work).
#include "graphs/conditional_nodes.h"

#include <algorithm>
#include <mutex>

#include "connection/connection.h"
#include "copies/copies.h"
#include "entry_points/entry_point.h"
#include "graphs/graph_nodes.h"
#include "logging/log.h"
#include "memory/device_memory.h"
#include "streams/stream_ids.h"

namespace tally::client {
namespace {

// How many bodies a node of `type` may have (CUDA_CONDITIONAL_NODE_PARAMS.size).
bool size_allowed(CUgraphConditionalNodeType type, unsigned size) {
  switch (type) {
    case CU_GRAPH_COND_TYPE_IF: return size == 1 || size == 2;
    case CU_GRAPH_COND_TYPE_WHILE: return size == 1;
    case CU_GRAPH_COND_TYPE_SWITCH: return size >= 1;
    default: return false;
  }
}

// The body a condition `value` selects, or nullptr for none.
const ReplayList* chosen_body(CUgraphConditionalNodeType type, uint32_t value,
                              const std::vector<std::shared_ptr<const ReplayList>>& bodies) {
  switch (type) {
    case CU_GRAPH_COND_TYPE_IF:
      if (value != 0) return bodies[0].get();
      return bodies.size() > 1 ? bodies[1].get() : nullptr;
    case CU_GRAPH_COND_TYPE_WHILE: return value != 0 ? bodies[0].get() : nullptr;
    case CU_GRAPH_COND_TYPE_SWITCH: return value < bodies.size() ? bodies[value].get() : nullptr;
    default: return nullptr;
  }
}

CUresult set_value(CUdeviceptr dptr, unsigned value, uint64_t stream, bool async) {
  return memset_device({dptr, 4}, value, 4, 1, 1, stream, async);
}

}  // namespace

ConditionValue::~ConditionValue() {
  if (dptr != 0 && free_device_memory(dptr) != CUDA_SUCCESS)
    log_error("a conditional handle's value at 0x%llx could not be given back", static_cast<unsigned long long>(dptr));
}

CUresult add_conditional_node(CUgraphNode* out, CUgraph graph, const CUgraphNode* deps, size_t n,
                              CUgraphNodeParams* p) {
  CUDA_CONDITIONAL_NODE_PARAMS& c = p->conditional;
  GraphObject* g = as_graph(graph);
  if (g == nullptr || !size_allowed(c.type, c.size)) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<ConditionValue> condition;
  {
    std::lock_guard<std::mutex> lock(g->mutex);
    for (const auto& made : g->conditions)
      if (made->dptr == c.handle) condition = made;
  }
  if (condition == nullptr) return CUDA_ERROR_INVALID_VALUE;   // not a handle made for this graph
  auto node_state = std::make_shared<ConditionalNode>();
  node_state->condition = condition;
  node_state->type = c.type;
  CUresult rc = add_graph_node(out, graph, deps, n, CU_GRAPH_NODE_TYPE_CONDITIONAL, [&](GraphNode* node) {
    for (unsigned i = 0; i < c.size; ++i) {
      auto* body = new GraphObject();
      node_state->bodies.push_back(body);
      node_state->body_handles.push_back(handle_of(body));
    }
    node->conditional = node_state;
    return CUDA_SUCCESS;
  });
  if (rc == CUDA_SUCCESS) c.phGraph_out = node_state->body_handles.data();
  return rc;
}

CUresult conditional_replay(const GraphNode* node, Replay* out) {
  const ConditionalNode& c = *node->conditional;
  std::vector<std::shared_ptr<const ReplayList>> bodies;
  for (GraphObject* body : c.bodies) {
    auto ops = std::make_shared<ReplayList>();
    std::unordered_map<const GraphNode*, size_t> unused;
    if (CUresult rc = order_graph(body, ops.get(), &unused); rc != CUDA_SUCCESS) return rc;
    bodies.push_back(std::move(ops));
  }
  *out = [condition = c.condition, type = c.type, bodies = std::move(bodies)](uint64_t stream) -> CUresult {
    for (;;) {
      // the value as the work before the node on this stream left it
      uint32_t value = 0;
      if (CUresult rc = copy_device_to_host({&value, 4}, {condition->dptr, 4}, 4, 1, stream, true);
          rc != CUDA_SUCCESS)
        return rc;
      const ReplayList* body = chosen_body(type, value, bodies);
      if (body == nullptr) return CUDA_SUCCESS;
      for (const Replay& op : *body)
        if (CUresult rc = op(stream); rc != CUDA_SUCCESS) return rc;
      if (type != CU_GRAPH_COND_TYPE_WHILE) return CUDA_SUCCESS;
    }
  };
  return CUDA_SUCCESS;
}

void assign_condition_defaults(const GraphObject* graph, ReplayList* ops) {
  for (const auto& condition : graph->conditions) {
    if (!condition->assign_default) continue;
    ops->push_back([condition](uint64_t stream) {
      return set_value(condition->dptr, condition->default_value, stream, true);
    });
  }
}

bool has_conditional_nodes(GraphObject* graph) {
  std::lock_guard<std::mutex> lock(graph->mutex);
  for (GraphNode* node : graph->nodes) {
    if (node->conditional != nullptr) return true;
    if (node->child != nullptr && has_conditional_nodes(node->child)) return true;
  }
  return false;
}

}  // namespace tally::client

using namespace tally::client;

TALLY_ENTRY(cuGraphConditionalHandleCreate_v12030)(CUgraphConditionalHandle* pHandle_out, CUgraph hGraph,
                                                   CUcontext ctx, unsigned int defaultLaunchValue,
                                                   unsigned int flags) {
  (void)ctx;  // one context per device here: every handle's value lives in the job's memory
  GraphObject* g = as_graph(hGraph);
  if (pHandle_out == nullptr || g == nullptr || (flags & ~CU_GRAPH_COND_ASSIGN_DEFAULT) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  auto condition = std::make_shared<ConditionValue>();
  condition->default_value = defaultLaunchValue;
  condition->assign_default = (flags & CU_GRAPH_COND_ASSIGN_DEFAULT) != 0;
  if (CUresult rc = allocate_device_memory(&condition->dptr, 4); rc != CUDA_SUCCESS) {
    condition->dptr = 0;
    return rc;
  }
  // the value before any launch is the default too (CUDA leaves it unspecified)
  // tally's own write, outside any capture: a handle is made while its graph is being
  // captured, when the legacy stream may not be used (capture.h)
  if (CUresult rc = send_memset({condition->dptr, 4}, defaultLaunchValue, 4, 1, 1, kLegacyStream, false);
      rc != CUDA_SUCCESS)
    return rc;
  {
    std::lock_guard<std::mutex> lock(g->mutex);
    g->conditions.push_back(condition);
  }
  *pHandle_out = condition->dptr;
  return CUDA_SUCCESS;
}
