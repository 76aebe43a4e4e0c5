// Serializes an instantiated graph into GraphDefine's tail (spec.py's
// GRAPH_NODE_FORMAT records, then edges), sends replays as one message each, and
// carries exec updates to the server's copy.
#include "graphs/server_graphs.h"

#include <atomic>
#include <cstring>

#include "connection/connection.h"
#include "connection/staged_bytes.h"
#include "driver_objects.h"
#include "streams/host_functions.h"

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

// GraphNodeType in tally/protocol/spec.py.
enum RecordType : uint32_t { kEmpty = 0, kKernel = 1, kMemset = 2, kMemcpy = 3, kHost = 4, kEventRecord = 5,
                             kEventWait = 6 };

// The record of a node that launches no kernel, `param_bytes` of its parameters to follow.
void append_record(RecordType type, bool enabled, uint32_t param_bytes, std::vector<uint8_t>* tail);

// Graphs up to kInlineRequestBytes travel in the GraphDefine record; bigger ones
// through the staging buffer first (staged_bytes.h), up to this size: a graph past
// it (a million nodes) stays with the client.
constexpr size_t kMaxGraphBytes = 64 << 20;

template <class T>
void append(std::vector<uint8_t>* out, const T& value) {
  const auto* p = reinterpret_cast<const uint8_t*>(&value);
  out->insert(out->end(), p, p + sizeof value);
}

// A kernel node's record and parameters; false for one the server does not keep
// (cooperative launches and launches given a cluster keep the client's path: the
// record has no room for LaunchKernel's flags and cluster).
bool append_kernel(const KernelNodeLaunch& k, CUfunction function, bool enabled, std::vector<uint8_t>* tail) {
  const FunctionObject* fn = as_function(function);
  if (fn == nullptr || k.cooperative || k.function != function) return false;
  if (k.cluster[0] != 0 || k.cluster[1] != 0 || k.cluster[2] != 0) return false;
  NodeRecord r{};
  r.type = kKernel;
  r.enabled = enabled ? 1 : 0;
  r.function = fn->id;
  std::memcpy(r.grid, k.grid, sizeof r.grid);
  std::memcpy(r.block, k.block, sizeof r.block);
  r.shared_bytes = k.shared_bytes;
  r.param_bytes = static_cast<uint32_t>(k.params.size());
  append(tail, r);
  tail->insert(tail->end(), k.params.begin(), k.params.end());
  tail->resize((tail->size() + 7) & ~size_t{7}, 0);
  return true;
}

// GRAPH_MEMSET_FORMAT in tally/protocol/spec.py.
struct MemsetRecord {
  uint64_t dst, count;
  uint32_t value, element_size;
};
static_assert(sizeof(MemsetRecord) == 24, "a graph memset's parameters are 24 bytes");

// A 1-D memset node (or a 2-D one whose rows touch); false for another.
bool append_memset(const MemsetNodeShape& m, bool enabled, std::vector<uint8_t>* tail) {
  const size_t height = m.height == 0 ? 1 : m.height;
  if (height > 1 && m.pitch != m.width * m.element_size) return false;
  append_record(kMemset, enabled, sizeof(MemsetRecord), tail);
  append(tail, MemsetRecord{m.dst, m.width * height, m.value, m.element_size});
  return true;
}

// GRAPH_MEMCPY_FORMAT in tally/protocol/spec.py.
struct CopyRecord {
  uint64_t dst, src, bytes;
};
static_assert(sizeof(CopyRecord) == 24, "a graph copy's parameters are 24 bytes");

// A device-to-device memcpy node of one contiguous span (1-D, or rows that touch on
// both sides); false for another.
bool append_copy(const CopyNodeShape& c, bool enabled, std::vector<uint8_t>* tail) {
  if (c.from != CU_MEMORYTYPE_DEVICE || c.to != CU_MEMORYTYPE_DEVICE || c.dst == 0 || c.src == 0) return false;
  const size_t height = c.height == 0 ? 1 : c.height;
  if (height > 1 && (c.dst_pitch != c.width || c.src_pitch != c.width)) return false;
  append_record(kMemcpy, enabled, sizeof(CopyRecord), tail);
  append(tail, CopyRecord{c.dst, c.src, c.width * height});
  return true;
}

void append_record(RecordType type, bool enabled, uint32_t param_bytes, std::vector<uint8_t>* tail) {
  NodeRecord r{};
  r.type = type;
  r.enabled = enabled ? 1 : 0;
  r.grid[0] = r.grid[1] = r.grid[2] = r.block[0] = r.block[1] = r.block[2] = 1;
  r.param_bytes = param_bytes;
  append(tail, r);
}

// A graph being flattened into GraphDefine's records: node records in `tail`,
// `count` of them so far, and the edges between them.
struct FlatGraph {
  std::vector<uint8_t>* tail;
  uint32_t count = 0;
  std::vector<std::pair<uint32_t, uint32_t>> edges;
  std::vector<GraphHostCall> hosts;   // host nodes' functions, in record order
};

// GRAPH_EVENT_FORMAT in tally/protocol/spec.py: the node's event by the job's id.
bool append_event(RecordType type, CUevent event, std::vector<uint8_t>* tail) {
  const EventObject* e = as_event(event);
  if (e == nullptr) return false;
  append_record(type, true, sizeof e->id, tail);
  append(tail, e->id);
  return true;
}

// Appends `nodes` as records base, base + 1, ... (so the exec's own nodes keep their
// indices, which GraphNodeUpdate names), then each child graph's nodes after them:
// a child-graph node's record is an empty node that waits for all of its child's
// nodes, which wait for an empty node standing for the child's start, which waits
// for what the child-graph node waits for. False when a node is of a kind the
// server does not keep.
bool flatten(const std::vector<ExecNode>& nodes, FlatGraph* g) {
  const uint32_t base = g->count;
  g->count += static_cast<uint32_t>(nodes.size());
  for (const ExecNode& n : nodes) {
    if (n.type == CU_GRAPH_NODE_TYPE_KERNEL) {
      if (!append_kernel(n.kernel != nullptr ? *n.kernel : n.source->kernel, n.function, n.enabled, g->tail))
        return false;
    } else if (n.type == CU_GRAPH_NODE_TYPE_MEMSET) {
      if (!append_memset(n.memset, n.enabled, g->tail)) return false;
    } else if (n.type == CU_GRAPH_NODE_TYPE_MEMCPY) {
      if (!append_copy(n.copy, n.enabled, g->tail)) return false;
    } else if (n.type == CU_GRAPH_NODE_TYPE_HOST) {
      append_record(kHost, true, 0, g->tail);
      g->hosts.push_back({n.host_fn, n.host_data});
    } else if (n.type == CU_GRAPH_NODE_TYPE_EVENT_RECORD || n.type == CU_GRAPH_NODE_TYPE_WAIT_EVENT) {
      if (!append_event(n.type == CU_GRAPH_NODE_TYPE_EVENT_RECORD ? kEventRecord : kEventWait, n.event, g->tail))
        return false;
    } else if (n.type == CU_GRAPH_NODE_TYPE_EMPTY || n.type == CU_GRAPH_NODE_TYPE_MEM_ALLOC ||
               n.type == CU_GRAPH_NODE_TYPE_MEM_FREE || (n.type == CU_GRAPH_NODE_TYPE_GRAPH && n.child != nullptr)) {
      // memory nodes run nothing on the device: the client marks their allocations at each launch
      append_record(kEmpty, true, 0, g->tail);
    } else {
      return false;
    }
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const uint32_t self = base + static_cast<uint32_t>(i);
    if (nodes[i].type != CU_GRAPH_NODE_TYPE_GRAPH) {
      for (size_t from : nodes[i].depends_on) g->edges.emplace_back(base + static_cast<uint32_t>(from), self);
      continue;
    }
    const uint32_t start = g->count++;
    append_record(kEmpty, true, 0, g->tail);
    for (size_t from : nodes[i].depends_on) g->edges.emplace_back(base + static_cast<uint32_t>(from), start);
    const std::vector<ExecNode>& child = *nodes[i].child;
    const uint32_t child_base = g->count;
    if (!flatten(child, g)) return false;
    for (size_t c = 0; c < child.size(); ++c) {
      const uint32_t node = child_base + static_cast<uint32_t>(c);
      if (child[c].depends_on.empty()) g->edges.emplace_back(start, node);
      g->edges.emplace_back(node, self);
    }
    if (child.empty()) g->edges.emplace_back(start, self);
  }
  return true;
}

// GraphDefine's tail for `nodes`: *node_count records, then *edge_count edges.
bool serialize(const std::vector<ExecNode>& nodes, std::vector<uint8_t>* tail, uint32_t* node_count,
               uint32_t* edge_count, HostCalls* hosts) {
  FlatGraph g{tail};
  if (!flatten(nodes, &g)) return false;
  *hosts = std::make_shared<const std::vector<GraphHostCall>>(std::move(g.hosts));
  for (const auto& [from, to] : g.edges) {
    append(tail, from);
    append(tail, to);
  }
  *node_count = g.count;
  *edge_count = static_cast<uint32_t>(g.edges.size());
  return tail->size() <= kMaxGraphBytes;
}

// Defines graph `id` on the server; *kept is false (and nothing is sent) when the
// server cannot keep these nodes.
CUresult send_define(const std::vector<ExecNode>& nodes, uint64_t id, bool* kept, HostCalls* hosts) {
  *kept = false;
  std::vector<uint8_t> tail;
  uint32_t node_count = 0, edges = 0;
  if (nodes.empty() || !serialize(nodes, &tail, &node_count, &edges, hosts)) return CUDA_SUCCESS;
  protocol::GraphDefineMsg msg{};
  msg.graph = id;
  msg.node_count = node_count;
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
  *kept = true;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult define_on_server(const std::vector<ExecNode>& nodes, uint64_t* id, HostCalls* hosts) {
  static std::atomic<uint64_t> ids{1};
  *id = 0;
  const uint64_t candidate = ids.fetch_add(1, std::memory_order_relaxed);
  bool kept = false;
  if (CUresult rc = send_define(nodes, candidate, &kept, hosts); rc != CUDA_SUCCESS) return rc;
  if (kept) *id = candidate;
  return CUDA_SUCCESS;
}

bool redefine_on_server(const std::vector<ExecNode>& nodes, uint64_t id, HostCalls* hosts) {
  if (id == 0) return false;
  bool kept = false;
  return send_define(nodes, id, &kept, hosts) == CUDA_SUCCESS && kept;
}

bool update_kernel_on_server(uint64_t id, uint32_t index, const KernelNodeLaunch& k, bool enabled) {
  if (id == 0) return false;
  std::vector<uint8_t> tail;
  if (!append_kernel(k, k.function, enabled, &tail)) return false;
  protocol::GraphNodeUpdateMsg msg{};
  msg.graph = id;
  msg.node = index;
  return Connection::instance().request_done(msg, tail.data(), static_cast<uint32_t>(tail.size())) == CUDA_SUCCESS;
}

void forget_on_server(uint64_t id) {
  if (id == 0) return;
  protocol::GraphDestroyMsg msg{};
  msg.graph = id;
  Connection::instance().send(msg);
}

CUresult launch_on_server(uint64_t id, uint64_t stream, const HostCalls& hosts) {
  protocol::GraphLaunchMsg msg{};
  msg.graph = id;
  msg.stream = stream;
  if (hosts == nullptr || hosts->empty()) return Connection::instance().send(msg);
  // A callback id per host node, waited for before the server can post it.
  std::vector<uint64_t> callbacks;
  callbacks.reserve(hosts->size());
  for (const GraphHostCall& h : *hosts) callbacks.push_back(expect_host_function(h.fn, h.data));
  CUresult rc = Connection::instance().send(msg, callbacks.data(), static_cast<uint32_t>(8 * callbacks.size()));
  if (rc != CUDA_SUCCESS)
    for (uint64_t c : callbacks) forget_host_function(c);
  return rc;
}

}  // namespace tally::client
