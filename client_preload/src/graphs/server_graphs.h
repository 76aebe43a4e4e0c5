// Instantiated graphs the server keeps (tally/server/client/graphs.py): a graph
// of kernel, memset (1-D), device-to-device memcpy (1-D), host, event record and
// wait, empty and child-graph nodes (flattened) is sent once at instantiate (GraphDefine, through the
// staging buffer when it is big) and each launch is then one GraphLaunch message;
// exec updates change the server's copy. Other graphs, and an exec once it is
// updated, replay their operations from the client as before.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "driver_headers.h"
#include "graphs/graph_objects.h"

namespace tally::client {

// Sends `nodes` (an instantiation's, graph_objects.h) to the server if it can
// keep them; *id is the server's name for them, or 0 when the client replays
// the graph itself; *hosts its host nodes' functions in the order the server
// counts them (each launch names a callback for each). An error is the server's
// refusal (CUDA's code).
CUresult define_on_server(const std::vector<ExecNode>& nodes, uint64_t* id, HostCalls* hosts);

// Exec updates reaching the server's copy of graph `id`: the whole graph again
// (cuGraphExecUpdate; `nodes` name the new graph's nodes), or one kernel node's new
// launch (cuGraphExecKernelNodeSetParams; `index` in the exec's node order). False
// when the server cannot keep the result or refused it: the caller then forgets
// the server's copy and the client replays the graph itself.
bool redefine_on_server(const std::vector<ExecNode>& nodes, uint64_t id, HostCalls* hosts);
bool update_kernel_on_server(uint64_t id, uint32_t index, const KernelNodeLaunch& k, bool enabled);

// The server forgets graph `id` (0: nothing to forget).
void forget_on_server(uint64_t id);

// One replay of graph `id` on `stream`, its host nodes' functions `hosts`.
CUresult launch_on_server(uint64_t id, uint64_t stream, const HostCalls& hosts);

}  // namespace tally::client
