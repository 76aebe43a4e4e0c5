// cuLaunchHostFunc and cuStreamAddCallback: the job's function runs in the job's
// process when its stream gets there, and the stream waits for it.
//
// The server holds the stream at a HostCallback operation and posts
// HostFuncReady(callback id) on the completion ring; whichever thread reads it
// queues it for the callback thread (started on first use), which runs the
// function and answers HostFuncDone, letting the stream go on. While callbacks
// are outstanding the connection's background reader keeps the completion ring
// read, so a job whose threads all wait on host-side state (set by the callback)
// still gets its callbacks.
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "streams/host_functions.h"

#include "graphs/capture.h"
#include "connection/connection.h"
#include "entry_points/entry_point.h"
#include "streams/stream_ids.h"

namespace tally::client {
namespace {

struct PendingCallback {
  CUhostFn host_fn;            // cuLaunchHostFunc
  CUstreamCallback stream_fn;  // cuStreamAddCallback
  CUstream stream;
  void* user_data;
};

class HostFunctionRunner {
 public:
  static HostFunctionRunner& instance() {
    static auto* runner = new HostFunctionRunner();  // never destroyed (see Connection)
    return *runner;
  }

  CUresult launch(CUstream stream, bool per_thread, const PendingCallback& callback) {
    if (CUresult rc = Connection::instance().usable(); rc != CUDA_SUCCESS) return rc;
    uint64_t id = 0;
    if (CUresult rc = stream_id(stream, per_thread, &id); rc != CUDA_SUCCESS) return rc;
    // A captured host function runs once per replay of its graph.
    if (CUresult rc; captured(id, true, &rc, [this, callback](GraphNode& node) {
          node.type = CU_GRAPH_NODE_TYPE_HOST;
          node.host_fn = callback.host_fn;
          node.host_data = callback.user_data;
          node.ops.push_back([this, callback](uint64_t s) { return launch_on(s, callback); });
        }))
      return rc;
    return launch_on(id, callback);
  }

  // A callback the server will post HostFuncReady for (its id), waited for from now on.
  uint64_t expect(const PendingCallback& callback) {
    Connection& c = Connection::instance();
    uint64_t id = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      id = next_id_++;
      pending_.emplace(id, callback);
      if (!started_) {
        started_ = true;
        c.set_unsolicited_handler(&HostFunctionRunner::on_unsolicited);
        std::thread([this] { run(); }).detach();
      }
    }
    c.hold_reader();
    return id;
  }

  // The server will never post it (its request was not sent).
  void forget(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (pending_.erase(id) != 0) Connection::instance().release_reader();
  }

 private:
  CUresult launch_on(uint64_t stream, const PendingCallback& callback) {
    protocol::LaunchHostFuncMsg m{};
    m.stream = stream;
    m.callback = expect(callback);
    CUresult rc = Connection::instance().send(m);
    if (rc != CUDA_SUCCESS) forget(m.callback);
    return rc;
  }

  static void on_unsolicited(uint32_t kind, const uint8_t* payload, uint32_t size) {
    if (kind != static_cast<uint32_t>(protocol::MessageKind::HostFuncReady) ||
        size < sizeof(protocol::HostFuncReadyMsg))
      return;
    protocol::HostFuncReadyMsg ready{};
    std::memcpy(&ready, payload, sizeof ready);
    HostFunctionRunner& self = instance();
    std::lock_guard<std::mutex> lock(self.mutex_);
    self.ready_.push_back(ready.callback);
    self.wake_.notify_one();
  }

  void run() {
    Connection& c = Connection::instance();
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_.wait(lock, [this] { return !ready_.empty(); });
      const uint64_t id = ready_.front();
      ready_.pop_front();
      auto it = pending_.find(id);
      if (it == pending_.end()) continue;
      PendingCallback callback = it->second;
      pending_.erase(it);
      lock.unlock();
      // After a context fault, as the driver does: a host function no longer runs,
      // a stream callback runs and is passed the error.
      const CUresult fault = c.sticky_error();
      if (callback.host_fn != nullptr) {
        if (fault == CUDA_SUCCESS) callback.host_fn(callback.user_data);
      } else {
        callback.stream_fn(callback.stream, fault, callback.user_data);
      }
      c.send_internal(protocol::HostFuncDoneMsg{id});
      c.release_reader();
      lock.lock();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_;
  bool started_ = false;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, PendingCallback> pending_;
  std::deque<uint64_t> ready_;
};

CUresult launch_host_func(CUstream stream, CUhostFn fn, void* user_data, bool per_thread) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return HostFunctionRunner::instance().launch(stream, per_thread, {fn, nullptr, stream, user_data});
}

CUresult add_callback(CUstream stream, CUstreamCallback fn, void* user_data, unsigned flags, bool per_thread) {
  if (fn == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  return HostFunctionRunner::instance().launch(stream, per_thread, {nullptr, fn, stream, user_data});
}

}  // namespace

uint64_t expect_host_function(CUhostFn fn, void* user_data) {
  return HostFunctionRunner::instance().expect({fn, nullptr, nullptr, user_data});
}

void forget_host_function(uint64_t callback) { HostFunctionRunner::instance().forget(callback); }

}  // namespace tally::client

using namespace tally::client;
namespace protocol = tally::protocol;

TALLY_ENTRY(cuLaunchHostFunc_v10000)(CUstream hStream, CUhostFn fn, void* userData) {
  return launch_host_func(hStream, fn, userData, false);
}
TALLY_ENTRY(cuLaunchHostFunc_v10000_ptsz)(CUstream hStream, CUhostFn fn, void* userData) {
  return launch_host_func(hStream, fn, userData, true);
}
TALLY_ENTRY(cuStreamAddCallback_v5000)(CUstream hStream, CUstreamCallback callback, void* userData,
                                       unsigned int flags) {
  return add_callback(hStream, callback, userData, flags, false);
}
TALLY_ENTRY(cuStreamAddCallback_v7000_ptsz)(CUstream hStream, CUstreamCallback callback, void* userData,
                                            unsigned int flags) {
  return add_callback(hStream, callback, userData, flags, true);
}
