// The process-wide connection to tally-server, set up by cuInit:
//   - the handshake socket, kept open for the life of the process (its EOF tells
//     the server the job is gone, however it dies);
//   - the device snapshot the server sent (attributes, name, UUID, memory, PCI ids);
//   - the shared segment: requests go out on its request ring (one producer: a
//     mutex in front), replies come back on its completion ring, matched by tag.
// Nothing here throws to the caller and nothing aborts the process: failures
// become CUresults and one "tally:" line on stderr.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "client_config.h"
#include "driver_headers.h"
#include "tally/protocol_generated.h"

namespace tally::transport {
class Segment;
}

namespace tally::client {

// A reply to a synchronous request: the record the server sent for its tag.
struct Reply {
  uint32_t kind = 0;
  std::vector<uint8_t> payload;
};

class Connection {
 public:
  // The one connection of this process (never destroyed: other libraries' exit
  // handlers may still call the driver while the process shuts down).
  static Connection& instance();

  // Connects and handshakes once; later calls return the first call's result.
  // CUDA_ERROR_NO_DEVICE (with a stderr line saying how to start a server) when no
  // server answers or it refuses the job.
  CUresult connect();
  bool connected() const { return state_.load(std::memory_order_acquire) == State::kConnected; }
  // CUDA_SUCCESS when connected; otherwise what a driver call made now must return.
  CUresult usable() const;

  // Valid once connected. The server serves one device.
  int device_count() const { return connected() ? 1 : 0; }
  const protocol::DeviceInfoMsg& device() const { return device_; }
  uint64_t client_id() const { return client_id_; }

  // Fire-and-forget request (tag 0): the server never answers it; a failure on
  // the server side comes back at the next synchronous call.
  CUresult send_async(uint32_t kind, const void* payload, uint32_t size);
  // Request with a fresh tag; waits for the record answering that tag. An Error
  // record from the server becomes its status (its text goes to the trace log);
  // otherwise a deferred client-side error, if one is pending, is returned.
  CUresult call(uint32_t kind, const void* payload, uint32_t size, Reply* reply);

  // Errors the client itself detected while sending asynchronous requests, held
  // until the next synchronizing call takes them (first error wins, as in CUDA).
  void defer_error(CUresult error);
  CUresult take_deferred_error();

 private:
  enum class State { kIdle, kConnected, kFailed, kForked };
  Connection() = default;
  CUresult connect_locked();
  CUresult fail_transport(const char* what);  // the server is gone: every call fails from now on
  CUresult wait_reply(uint64_t tag, Reply* reply);
  static void after_fork_in_child();

  std::mutex connect_mutex_;
  std::atomic<State> state_{State::kIdle};
  CUresult connect_result_ = CUDA_SUCCESS;
  ClientConfig config_;
  int socket_fd_ = -1;
  uint64_t client_id_ = 0;
  protocol::DeviceInfoMsg device_{};
  std::unique_ptr<transport::Segment> segment_;

  std::mutex request_mutex_;  // the request ring has exactly one producer
  std::atomic<uint64_t> next_tag_{1};

  // One thread at a time reads the completion ring; replies for other threads'
  // tags are parked here for them.
  std::mutex reply_mutex_;
  std::condition_variable reply_ready_;
  bool reader_active_ = false;
  std::unordered_map<uint64_t, Reply> parked_replies_;

  std::atomic<int> deferred_error_{CUDA_SUCCESS};
};

}  // namespace tally::client
