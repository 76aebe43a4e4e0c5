#include "contexts/driver_version.h"

#include <string>

#include "connection/client_config.h"
#include "connection/connection.h"
#include "connection/handshake.h"
#include "entry_points/entry_point.h"
#include "logging/trace.h"

namespace tally::client {
namespace {

// A version query is one local round trip; a server that takes longer is stuck,
// and cuInit will say so with its own (longer) wait.
constexpr int kVersionQueryTimeoutMs = 2000;

// The server's driver version (what tally-server --emulate-driver sets, or the real
// driver's): from the handshake when connected, else from a query of its own.
// Without an answer, the version of the headers the entry table was built from.
int first_answer() {
  Connection& connection = Connection::instance();
  if (connection.connected() && connection.device().driver_version > 0) {
    return connection.device().driver_version;
  }
  ClientConfig config;
  std::string error;
  int version = 0;
  if (read_client_config(&config, &error) && query_driver_version(config, kVersionQueryTimeoutMs, &version, &error)) {
    trace_line("driver version %d, as tally-server at %s reports it", version, config.socket_path.c_str());
    return version;
  }
  trace_line("driver version %d (compiled in): %s", kEntryTableCudaVersion, error.c_str());
  return kEntryTableCudaVersion;
}

}  // namespace

// Fixed at the first call: cudart hashes the version into the integrity check
// and compares it with cuGetProcAddress's, so it must never change afterwards.
int reported_driver_version() {
  static const int version = first_answer();
  return version;
}

}  // namespace tally::client

TALLY_ENTRY(cuDriverGetVersion_v2020)(int* driverVersion) {
  if (driverVersion == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *driverVersion = tally::client::reported_driver_version();
  return CUDA_SUCCESS;
}
