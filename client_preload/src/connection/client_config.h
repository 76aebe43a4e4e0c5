// What the job's environment tells the client (tally-run sets these):
//   TALLY_SERVER        the server's unix socket; default $XDG_RUNTIME_DIR/tally/server.sock,
//                       else /tmp/tally-<uid>/server.sock (tally/paths.py applies the same rule)
//   TALLY_PRIORITY      high | best-effort (default best-effort, as tally-run)
//   TALLY_MEMORY_QUOTA  device memory the job may use: bytes ("1073741824") or a
//                       percentage of the device ("50%"); unset or empty: no quota
//   TALLY_SM_PERCENT    the job's SM share in (0, 100] (tally-run --sm-percent); unset or
//                       empty: the job's CUDA_MPS_ACTIVE_THREAD_PERCENTAGE if it has one
//                       (jobs configured for MPS keep their share), else none asked
//   TALLY_EVICTION_NOTICE  a file tally-run made: if the server evicts this job, the
//                       client appends the reason there (tally-run then exits 75)
#pragma once
#include <cstdint>
#include <string>

#include "tally/protocol_generated.h"

namespace tally::client {

struct ClientConfig {
  std::string socket_path;
  protocol::Priority priority = protocol::Priority::BEST_EFFORT;
  uint64_t memory_quota_bytes = 0;    // 0: none
  double memory_quota_percent = 0.0;  // 0: unused
  double sm_percent = 0.0;            // 0: none asked
  std::string eviction_notice;        // empty: tally-run is not watching
};

std::string default_socket_path();

// Parsers for one variable each; false plus a message saying what to set on bad input.
bool parse_priority(const char* text, protocol::Priority* out, std::string* error);
bool parse_memory_quota(const char* text, ClientConfig* out, std::string* error);
// `variable` names where the text came from, for the message.
bool parse_sm_percent(const char* text, const char* variable, double* out, std::string* error);

// Reads all the variables; false plus a message on the first bad one.
bool read_client_config(ClientConfig* out, std::string* error);

}  // namespace tally::client
