// cuGraphClone and cuGraphNodeFindInClone, and destroying a graph (graph_nodes.h).
// A clone copies every node's parameters and replays (replays hold their values,
// never references into the original), its edges in the same order, and child
// graphs recursively, so the original and the clone change independently.
#include <mutex>
#include <unordered_map>

#include "connection/connection.h"
#include "entry_points/entry_point.h"
#include "graphs/conditional_nodes.h"
#include "graphs/graph_nodes.h"

namespace tally::client {

GraphObject* clone_graph(GraphObject* original) {
  auto* copy = new GraphObject();
  copy->cloned_from = original;
  copy->user_objects->retain_copy_of(*original->user_objects);  // CUDA clones the references too
  std::lock_guard<std::mutex> lock(original->mutex);
  std::unordered_map<const GraphNode*, GraphNode*> copy_of;
  for (const GraphNode* node : original->nodes) {
    auto* c = new GraphNode();
    c->graph = copy;
    c->type = node->type;
    c->ops = node->ops;
    c->kernel = node->kernel;
    c->copy = node->copy;
    c->memset = node->memset;
    c->host_fn = node->host_fn;
    c->host_data = node->host_data;
    c->event = node->event;
    c->mem_ops = node->mem_ops;
    c->mem_op_flags = node->mem_op_flags;
    c->mem_op_context = node->mem_op_context;
    c->allocation = node->allocation;   // the same address, as CUDA keeps it
    c->original = node;
    if (node->child != nullptr) c->child = clone_graph(node->child);
    copy_of[node] = c;
    copy->nodes.push_back(c);
  }
  // Edges may name nodes added later (cuGraphAddDependencies): mapped once every node has its copy.
  for (size_t i = 0; i < original->nodes.size(); ++i)
    for (const GraphNode* d : original->nodes[i]->depends_on) copy->nodes[i]->depends_on.push_back(copy_of.at(d));
  return copy;
}

void hold_user_objects(GraphObject* graph, UserObjectRefs* into) {
  into->retain_copy_of(*graph->user_objects);
  std::lock_guard<std::mutex> lock(graph->mutex);
  for (GraphNode* node : graph->nodes) {
    if (node->child != nullptr) hold_user_objects(node->child, into);
  }
}

void destroy_graph(GraphObject* graph) {
  graph->tag.store(ObjectTag::kDead, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(graph->mutex);
    for (GraphNode* node : graph->nodes) {
      node->tag.store(ObjectTag::kDead, std::memory_order_release);
      node->ops.clear();
      node->kernel = KernelNodeLaunch();
      node->allocation.reset();   // instantiations keep their own reference
      if (node->child != nullptr) destroy_graph(node->child);
      if (node->conditional != nullptr) {
        for (GraphObject* body : node->conditional->bodies) destroy_graph(body);
        node->conditional.reset();
      }
    }
    graph->conditions.clear();   // their values go once no instantiation runs them
  }
  // The graph itself runs nothing (its instantiations hold their own references).
  graph->user_objects->release_all();
}

}  // namespace tally::client

using namespace tally::client;

TALLY_ENTRY(cuGraphClone_v10000)(CUgraph* phGraphClone, CUgraph originalGraph) {
  if (phGraphClone == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
  GraphObject* g = as_graph(originalGraph);
  if (g == nullptr || g->capturing.load(std::memory_order_acquire)) return CUDA_ERROR_INVALID_VALUE;
  if (has_conditional_nodes(g)) return CUDA_ERROR_INVALID_VALUE;   // CUDA clones no graph with conditionals
  *phGraphClone = handle_of(clone_graph(g));
  return CUDA_SUCCESS;
}

TALLY_ENTRY(cuGraphNodeFindInClone_v10000)(CUgraphNode* phNode, CUgraphNode hOriginalNode, CUgraph hClonedGraph) {
  GraphObject* clone = as_graph(hClonedGraph);
  GraphNode* original = as_graph_node(hOriginalNode);
  if (phNode == nullptr || clone == nullptr || original == nullptr || clone->cloned_from != original->graph)
    return CUDA_ERROR_INVALID_VALUE;
  std::lock_guard<std::mutex> lock(clone->mutex);
  for (GraphNode* node : clone->nodes) {
    if (node->original == original) {
      *phNode = handle_of(node);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_VALUE;  // the original was added after the clone, or its copy was destroyed
}
