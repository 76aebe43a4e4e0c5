// tally's own exported functions, beside the driver API: for tally-run, tests and
// benchmarks to check which library is loaded and to time the transport.
#include <cstdint>
#include <cstring>

#include "connection/connection.h"

#define TALLY_EXPORT extern "C" __attribute__((visibility("default")))

// A synchronous round trip (Ping -> Pong) through the server; *echoed gets the
// value back. Returns a CUresult; connects first, like cuInit.
TALLY_EXPORT int tally_client_ping(uint64_t value, uint64_t* echoed) {
  using namespace tally;
  auto& connection = client::Connection::instance();
  if (CUresult rc = connection.connect(); rc != CUDA_SUCCESS) return rc;
  protocol::PingMsg ping{value};
  client::Reply reply;
  CUresult rc = connection.call(static_cast<uint32_t>(protocol::MessageKind::Ping), &ping, sizeof ping, &reply);
  if (rc != CUDA_SUCCESS) return rc;
  protocol::PongMsg pong{};
  if (reply.kind != static_cast<uint32_t>(protocol::MessageKind::Pong) || reply.payload.size() != sizeof pong)
    return CUDA_ERROR_UNKNOWN;
  std::memcpy(&pong, reply.payload.data(), sizeof pong);
  if (echoed != nullptr) *echoed = pong.value;
  return CUDA_SUCCESS;
}

// An asynchronous request (Notify) the server counts and never answers.
TALLY_EXPORT int tally_client_notify(uint64_t value) {
  using namespace tally;
  auto& connection = client::Connection::instance();
  if (CUresult rc = connection.connect(); rc != CUDA_SUCCESS) return rc;
  protocol::NotifyMsg notify{value};
  return connection.send_async(static_cast<uint32_t>(protocol::MessageKind::Notify), &notify, sizeof notify);
}
