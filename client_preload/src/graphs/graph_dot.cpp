// cuGraphDebugDotPrint: a Graphviz DOT file describing a graph, as the driver
// writes one: a cluster per graph (child graphs nested in it), one box per node
// with its index, type, kernel name and launch shape or copy direction, and an
// edge per dependency. Flags add each kind of node's parameters (VERBOSE: all of
// them) and handles. Render with `dot -Tsvg file.dot`.
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <mutex>
#include <string>
#include <unordered_map>

#include "driver_objects.h"
#include "entry_points/entry_point.h"
#include "graphs/graph_nodes.h"

namespace tally::client {

const char* node_type_name(CUgraphNodeType type) {
  switch (type) {
    case CU_GRAPH_NODE_TYPE_KERNEL: return "KERNEL";
    case CU_GRAPH_NODE_TYPE_MEMCPY: return "MEMCPY";
    case CU_GRAPH_NODE_TYPE_MEMSET: return "MEMSET";
    case CU_GRAPH_NODE_TYPE_HOST: return "HOST";
    case CU_GRAPH_NODE_TYPE_GRAPH: return "GRAPH";
    case CU_GRAPH_NODE_TYPE_EMPTY: return "EMPTY";
    case CU_GRAPH_NODE_TYPE_WAIT_EVENT: return "WAIT_EVENT";
    case CU_GRAPH_NODE_TYPE_EVENT_RECORD: return "EVENT_RECORD";
    case CU_GRAPH_NODE_TYPE_MEM_ALLOC: return "MEM_ALLOC";
    case CU_GRAPH_NODE_TYPE_MEM_FREE: return "MEM_FREE";
    case CU_GRAPH_NODE_TYPE_BATCH_MEM_OP: return "BATCH_MEM_OP";
    default: return "UNKNOWN";
  }
}

namespace {

constexpr unsigned kAllDotFlags = (1u << 16) - 1;

std::string format(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string format(const char* fmt, ...) {
  char buffer[512];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buffer, sizeof buffer, fmt, ap);
  va_end(ap);
  return buffer;
}

char memory_letter(CUmemorytype type) {
  switch (type) {
    case CU_MEMORYTYPE_HOST: return 'H';
    case CU_MEMORYTYPE_ARRAY: return 'A';
    default: return 'D';
  }
}

class DotWriter {
 public:
  explicit DotWriter(unsigned flags) : flags_(flags) {}

  std::string graph(GraphObject* g, const std::string& label) {
    std::string out = format("subgraph cluster_graph_%" PRIu64 " {\nlabel=\"%s\";\nstyle=\"dashed\";\n", g->id,
                             escape(label).c_str());
    std::lock_guard<std::mutex> lock(g->mutex);
    std::unordered_map<const GraphNode*, size_t> index;
    for (size_t i = 0; i < g->nodes.size(); ++i) index[g->nodes[i]] = i;
    std::string edges;
    for (size_t i = 0; i < g->nodes.size(); ++i) {
      const GraphNode* node = g->nodes[i];
      const std::string name = node_name(g, i);
      out += format("\"%s\" [shape=\"rectangle\" label=\"", name.c_str()) + escape(node_label(node, i)) + "\"];\n";
      for (const GraphNode* d : node->depends_on)
        edges += format("\"%s\" -> \"%s\";\n", node_name(g, index.at(d)).c_str(), name.c_str());
      if (node->child != nullptr) {
        out += graph(node->child, format("graph_%" PRIu64 " (child graph of node %zu)", node->child->id, i));
        std::lock_guard<std::mutex> child_lock(node->child->mutex);
        for (size_t k = 0; k < node->child->nodes.size(); ++k) {
          if (node->child->nodes[k]->depends_on.empty())
            edges += format("\"%s\" -> \"%s\" [style=\"dashed\"];\n", name.c_str(),
                            node_name(node->child, k).c_str());
        }
      }
    }
    return out + edges + "}\n";
  }

 private:
  bool wants(unsigned flag) const { return (flags_ & (flag | CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE)) != 0; }

  static std::string node_name(const GraphObject* g, size_t i) {
    return format("graph_%" PRIu64 "_node_%zu", g->id, i);
  }

  static std::string escape(const std::string& text) {
    std::string out;
    for (char c : text) {
      if (c == '"' || c == '\\') out += '\\';
      if (c == '\n') {
        out += "\\n";
        continue;
      }
      out += c;
    }
    return out;
  }

  std::string node_label(const GraphNode* node, size_t i) const {
    std::string text = format("%zu\n%s", i, node_type_name(node->type));
    if (wants(CU_GRAPH_DEBUG_DOT_FLAGS_HANDLES)) text += format("\nnode handle %p", static_cast<const void*>(node));
    switch (node->type) {
      case CU_GRAPH_NODE_TYPE_KERNEL: {
        const KernelNodeLaunch& k = node->kernel;
        const FunctionObject* fn = as_function(k.function);
        text += "\n" + (fn != nullptr ? fn->name : std::string("(unloaded function)"));
        text += format("\n<<<(%u,%u,%u), (%u,%u,%u), %u>>>", k.grid[0], k.grid[1], k.grid[2], k.block[0], k.block[1],
                       k.block[2], k.shared_bytes);
        if (wants(CU_GRAPH_DEBUG_DOT_FLAGS_HANDLES)) text += format("\nfunction %p", static_cast<void*>(k.function));
        if (wants(CU_GRAPH_DEBUG_DOT_FLAGS_KERNEL_NODE_PARAMS)) {
          text += format("\nparameters (%zu bytes):", k.params.size());
          for (uint8_t b : k.params) text += format(" %02x", b);
        }
        break;
      }
      case CU_GRAPH_NODE_TYPE_MEMCPY:
        text += format("\n%cto%c", memory_letter(node->copy.from), memory_letter(node->copy.to));
        if (wants(CU_GRAPH_DEBUG_DOT_FLAGS_MEMCPY_NODE_PARAMS))
          text += format("\nwidth %zu height %zu", node->copy.width, node->copy.height);
        break;
      case CU_GRAPH_NODE_TYPE_MEMSET:
        if (wants(CU_GRAPH_DEBUG_DOT_FLAGS_MEMSET_NODE_PARAMS)) {
          const MemsetNodeShape& m = node->memset;
          text += format("\ndst 0x%llx value 0x%x elementSize %u\nwidth %zu height %zu pitch %zu",
                         static_cast<unsigned long long>(m.dst), m.value, m.element_size, m.width, m.height, m.pitch);
        }
        break;
      case CU_GRAPH_NODE_TYPE_HOST:
        if (wants(CU_GRAPH_DEBUG_DOT_FLAGS_HOST_NODE_PARAMS))
          text += format("\nfn %p userData %p", reinterpret_cast<void*>(node->host_fn), node->host_data);
        break;
      case CU_GRAPH_NODE_TYPE_EVENT_RECORD:
      case CU_GRAPH_NODE_TYPE_WAIT_EVENT:
        if (wants(CU_GRAPH_DEBUG_DOT_FLAGS_EVENT_NODE_PARAMS))
          text += format("\nevent %p", static_cast<void*>(node->event));
        break;
      default:
        break;
    }
    return text;
  }

  unsigned flags_;
};

}  // namespace
}  // namespace tally::client

using namespace tally::client;

TALLY_ENTRY(cuGraphDebugDotPrint_v11030)(CUgraph hGraph, const char* path, unsigned int flags) {
  GraphObject* g = as_graph(hGraph);
  if (g == nullptr || path == nullptr || (flags & ~kAllDotFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  const std::string text = "digraph dot {\n" + DotWriter(flags).graph(g, format("graph_%" PRIu64, g->id)) + "}\n";
  std::FILE* file = std::fopen(path, "w");
  if (file == nullptr) return CUDA_ERROR_OPERATING_SYSTEM;
  const bool written = std::fwrite(text.data(), 1, text.size(), file) == text.size();
  return std::fclose(file) == 0 && written ? CUDA_SUCCESS : CUDA_ERROR_OPERATING_SYSTEM;
}
