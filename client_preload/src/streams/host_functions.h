// Host functions the server runs in stream order through the job (host_functions.cpp):
// cuLaunchHostFunc's, cuStreamAddCallback's, and a server-kept graph's host nodes,
// whose callback ids each GraphLaunch names (graphs/server_graphs.cpp).
#pragma once
#include <cstdint>

#include "driver_headers.h"

namespace tally::client {

// A callback id for `fn(user_data)`, run on the job's callback thread when the server
// posts HostFuncReady for it, then answered with HostFuncDone.
uint64_t expect_host_function(CUhostFn fn, void* user_data);

// The request naming `callback` was not sent: nothing will come for it.
void forget_host_function(uint64_t callback);

}  // namespace tally::client
