// Serializes an instantiated graph into GraphDefine's tail (spec.py's
// GRAPH_NODE_FORMAT records, then edges) and sends replays as one message.
#include "graphs/server_graphs.h"

#include <atomic>
#include <cstring>

#include "connection/connection.h"
#include "connection/staged_bytes.h"
#include "driver_objects.h"

namespace tally::client {
namespace {

// GRAPH_NODE_FORMAT in tally/protocol/spec.py.
struct NodeRecord {
  uint32_t type, enabled;
  uint64_t function;
  uint32_t grid[3], block[3];
  uint32_t shared_bytes, param_bytes;
};
static_assert(sizeof(NodeRecord) == 48, "GraphNode records are 48 bytes");

// Graphs up to kInlineRequestBytes travel in the GraphDefine record; bigger ones
// through the staging buffer first (staged_bytes.h), up to this size: a graph past
// it (a million nodes) stays with the client.
constexpr size_t kMaxGraphBytes = 64 << 20;

template <class T>
void append(std::vector<uint8_t>* out, const T& value) {
  const auto* p = reinterpret_cast<const uint8_t*>(&value);
  out->insert(out->end(), p, p + sizeof value);
}

// False when a node is of a kind the server does not keep.
bool serialize(const std::vector<ExecNode>& nodes, std::vector<uint8_t>* tail, uint32_t* edges) {
  for (const ExecNode& n : nodes) {
    NodeRecord r{};
    r.enabled = 1;
    r.grid[0] = r.grid[1] = r.grid[2] = r.block[0] = r.block[1] = r.block[2] = 1;
    const std::vector<uint8_t>* params = nullptr;
    if (n.type == CU_GRAPH_NODE_TYPE_KERNEL) {
      const KernelNodeLaunch& k = n.source->kernel;
      const FunctionObject* fn = as_function(n.function);
      // Cooperative launches keep the client's path (LaunchKernel's flag).
      if (fn == nullptr || k.cooperative || k.function != n.function) return false;
      r.type = 1;
      r.function = fn->id;
      std::memcpy(r.grid, k.grid, sizeof r.grid);
      std::memcpy(r.block, k.block, sizeof r.block);
      r.shared_bytes = k.shared_bytes;
      r.param_bytes = static_cast<uint32_t>(k.params.size());
      params = &k.params;
    } else if (n.type != CU_GRAPH_NODE_TYPE_EMPTY) {
      return false;
    }
    append(tail, r);
    if (params != nullptr) {
      tail->insert(tail->end(), params->begin(), params->end());
      tail->resize((tail->size() + 7) & ~size_t{7}, 0);
    }
  }
  *edges = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (size_t from : nodes[i].depends_on) {
      append(tail, static_cast<uint32_t>(from));
      append(tail, static_cast<uint32_t>(i));
      ++*edges;
    }
  }
  return tail->size() <= kMaxGraphBytes;
}

}  // namespace

CUresult define_on_server(const std::vector<ExecNode>& nodes, uint64_t* id) {
  static std::atomic<uint64_t> ids{1};
  *id = 0;
  std::vector<uint8_t> tail;
  uint32_t edges = 0;
  if (nodes.empty() || !serialize(nodes, &tail, &edges)) return CUDA_SUCCESS;
  protocol::GraphDefineMsg msg{};
  msg.graph = ids.fetch_add(1, std::memory_order_relaxed);
  msg.node_count = static_cast<uint32_t>(nodes.size());
  msg.edge_count = edges;
  if (tail.size() <= kInlineRequestBytes) {
    if (CUresult rc = Connection::instance().request_done(msg, tail.data(), static_cast<uint32_t>(tail.size()));
        rc != CUDA_SUCCESS)
      return rc;
  } else {
    std::lock_guard<std::mutex> staging(staging_mutex());
    if (CUresult rc = stage_bytes(tail.data(), tail.size()); rc != CUDA_SUCCESS) return rc;
    msg.staged = 1;
    if (CUresult rc = Connection::instance().request_done(msg); rc != CUDA_SUCCESS) return rc;
  }
  *id = msg.graph;
  return CUDA_SUCCESS;
}

void forget_on_server(uint64_t id) {
  if (id == 0) return;
  protocol::GraphDestroyMsg msg{};
  msg.graph = id;
  Connection::instance().send(msg);
}

CUresult launch_on_server(uint64_t id, uint64_t stream) {
  protocol::GraphLaunchMsg msg{};
  msg.graph = id;
  msg.stream = stream;
  return Connection::instance().send(msg);
}

}  // namespace tally::client
