// The client's half of the handshake on the server's unix socket:
//   client: Hello -> server: HelloReply, then (when OK) DeviceInfo.
// The socket stays open for the life of the process afterwards; the server learns
// that the job is gone from its EOF.
#pragma once
#include <string>

#include "connection/client_config.h"
#include "tally/protocol_generated.h"

namespace tally::client {

struct HandshakeResult {
  int socket_fd = -1;                  // open on success, -1 otherwise
  protocol::HelloReplyMsg reply{};
  protocol::DeviceInfoMsg device{};
  std::string error;                   // why it failed, and what to do (empty on success)
};

// Connects to config.socket_path and runs the handshake, waiting at most
// timeout_ms for each answer. Never throws.
HandshakeResult handshake(const ClientConfig& config, int timeout_ms);

// Asks the server's driver version on a connection of its own (DriverVersionQuery):
// cuDriverGetVersion before cuInit, which must not register this process as a job
// (it may never use the GPU, or fork first). False and why when no server answers.
bool query_driver_version(const ClientConfig& config, int timeout_ms, int* version, std::string* error);

}  // namespace tally::client
