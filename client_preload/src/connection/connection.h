// The process-wide connection to tally-server, set up by cuInit:
//   - the handshake socket, kept open for the life of the process (its EOF tells
//     the server the job is gone, however it dies);
//   - the device snapshot the server sent (attributes, name, UUID, memory, PCI ids);
//   - the shared segment: requests go out on its request ring (one producer: a
//     mutex in front), replies come back on its completion ring, matched by tag;
//     bulk bytes go through its upload arena and come back through its download
//     arena.
// Nothing here throws to the caller and nothing aborts the process: failures
// become CUresults and one "tally:" line on stderr.
//
// A context fault (context_faults.h: an illegal address, a failed assert...) the
// server reports is sticky, as on a GPU: every later request fails with it at
// once, without reaching the server, until the job resets its context
// (reset_context: cuDevicePrimaryCtxReset, cudaDeviceReset). The library's own
// records (a host function's completion) still go out.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "connection/client_config.h"
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

// Records the server sends on its own (tag 0, e.g. HostFuncReady) go to this
// function, on whichever thread read them. It must only queue work.
using UnsolicitedHandler = void (*)(uint32_t kind, const uint8_t* payload, uint32_t size);

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

  // ---- requests ---------------------------------------------------------------
  // One record made of `msg` followed by `tail`. With tag_out == nullptr the
  // request is fire-and-forget (tag 0): the server never answers it and a failure
  // comes back at the next synchronous call. Otherwise *tag_out gets a fresh tag
  // to wait() on.
  CUresult post(uint32_t kind, const void* msg, uint32_t msg_size, const void* tail, uint32_t tail_size,
                uint64_t* tag_out);
  // Waits for the record answering `tag`, a request of `request_kind`. An Error
  // record becomes its status (its text goes to the trace log, and the first
  // failure of each kind to stderr: failure_reports.h); otherwise a deferred
  // client-side error, if one is pending, is returned.
  CUresult wait(uint64_t tag, uint32_t request_kind, Reply* reply);

  CUresult send_async(uint32_t kind, const void* payload, uint32_t size) {
    return post(kind, payload, size, nullptr, 0, nullptr);
  }
  CUresult call(uint32_t kind, const void* payload, uint32_t size, Reply* reply) {
    return call(kind, payload, size, nullptr, 0, reply);
  }
  CUresult call(uint32_t kind, const void* msg, uint32_t msg_size, const void* tail, uint32_t tail_size,
                Reply* reply);
  // Fire-and-forget request written in place: fill(slot, context) writes all
  // `size` payload bytes straight into the ring (launches: no staging copy).
  CUresult send_async_fill(uint32_t kind, uint32_t size, void (*fill)(uint8_t* slot, const void* context),
                           const void* context);

  // Typed helpers: Msg is a generated protocol struct.
  template <class Msg>
  CUresult send(const Msg& m, const void* tail = nullptr, uint32_t tail_size = 0) {
    return post(static_cast<uint32_t>(Msg::kKind), &m, wire_size<Msg>(), tail, tail_size, nullptr);
  }
  template <class Msg>
  CUresult request(const Msg& m, Reply* reply, const void* tail = nullptr, uint32_t tail_size = 0) {
    return call(static_cast<uint32_t>(Msg::kKind), &m, wire_size<Msg>(), tail, tail_size, reply);
  }
  // Sends a request whose answer carries nothing but success (Done).
  template <class Msg>
  CUresult request_done(const Msg& m, const void* tail = nullptr, uint32_t tail_size = 0) {
    Reply reply;
    CUresult rc = request(m, &reply, tail, tail_size);
    return rc == CUDA_SUCCESS ? expect_kind(reply, protocol::MessageKind::Done, 0) : rc;
  }
  template <class Msg>
  static constexpr uint32_t wire_size() {
    return sizeof(Msg) == 1 && std::is_empty_v<Msg> ? 0 : static_cast<uint32_t>(sizeof(Msg));
  }
  // Checks a reply's kind and size (a mismatch means client and server disagree
  // on the protocol: CUDA_ERROR_UNKNOWN and a stderr line).
  static CUresult expect_kind(const Reply& reply, protocol::MessageKind kind, size_t min_size);

  // ---- bulk bytes -------------------------------------------------------------
  // Upload arena: hold upload_mutex() from reserve_upload() until the request
  // naming the chunk is posted, so chunks are named in the order they were taken
  // (the server releases them in that order).
  std::mutex& upload_mutex() { return upload_mutex_; }
  CUresult reserve_upload(uint64_t nbytes, uint64_t* offset, uint8_t** data);
  uint64_t upload_capacity() const;
  // Download arena: a MemcpyDtoHReply names a chunk; copy it out, then release it
  // (chunks are handed back to the server in the order the replies arrived).
  const uint8_t* download_data(uint64_t offset) const;
  void release_download(uint64_t offset);
  uint64_t download_capacity() const;

  // ---- server-initiated records -----------------------------------------------
  void set_unsolicited_handler(UnsolicitedHandler handler) { unsolicited_.store(handler); }
  // While holds are taken, a background thread reads the completion ring when no
  // other thread does, so records the server sends on its own are seen even when
  // no thread of the job waits for a reply.
  void hold_reader();
  void release_reader();

  // Errors the client itself detected while sending asynchronous requests, held
  // until the next synchronizing call takes them (first error wins, as in CUDA).
  void defer_error(CUresult error);
  CUresult take_deferred_error();

  // The context fault every request fails with now (CUDA_SUCCESS: none).
  CUresult sticky_error() const { return static_cast<CUresult>(sticky_error_.load(std::memory_order_acquire)); }
  // cuDevicePrimaryCtxReset: waits for the job's work, then forgets the sticky
  // error and any deferred one (they belonged to the context that was reset).
  CUresult reset_context();
  // One of the library's own records, sent even after a context fault.
  template <class Msg>
  CUresult send_internal(const Msg& m) {
    return post_record(static_cast<uint32_t>(Msg::kKind), &m, wire_size<Msg>(), nullptr, 0, nullptr);
  }

 private:
  enum class State { kIdle, kConnected, kFailed, kForked };
  struct DownloadChunk {
    uint64_t offset;
    uint64_t size;
    bool copied;
  };
  enum class ReadStatus { kRecord, kTimedOut, kFailed };

  Connection() = default;
  CUresult connect_locked();
  CUresult fail_transport(const char* what);  // the server is gone: every call fails from now on
  // The server marked this job evicted: read its Evicted record off the completion
  // ring (it was pushed before the mark) and fail every call from now on.
  CUresult learn_eviction(int64_t wait_for_reader_ms);
  // With reply_mutex_ held: an Evicted record arrived.
  void evicted_locked(const Reply& got);
  // A request of `kind` failed because the job was evicted: unless it only lets go of
  // something (a free, an unload, a destroy), the job asked for work that was not
  // done, which the eviction notice says once (eviction.cpp).
  void refused_after_eviction(uint32_t kind);
  static void at_exit();
 public:
  // A stream of this job was told to wait on a value (streams/stream_memory_ops.cpp):
  // at exit the server is asked to end such waits (at_exit, eviction.cpp).
  void note_value_waits() { value_waits_.store(true, std::memory_order_relaxed); }

 private:
  std::atomic<bool> value_waits_{false};
  // post() without the sticky-error check
  CUresult post_record(uint32_t kind, const void* msg, uint32_t msg_size, const void* tail, uint32_t tail_size,
                       uint64_t* tag_out);
  CUresult wait_reply(uint64_t tag, Reply* reply);
  // Reads one completion record (the caller holds the reader role).
  ReadStatus read_record(int64_t timeout_ns, Reply* got, uint64_t* tag, std::string* failure);
  // With reply_mutex_ held: hands a record read from the ring to its owner.
  static void write_kernel_output(const std::vector<uint8_t>& text, FILE* to);
  void route_locked(uint64_t tag, Reply&& got);
  void background_reader();
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
  std::mutex upload_mutex_;

  // One thread at a time reads the completion ring; replies for other threads'
  // tags are parked here for them.
  std::mutex reply_mutex_;
  std::condition_variable reply_ready_;
  bool reader_active_ = false;
  std::unordered_map<uint64_t, Reply> parked_replies_;
  int reader_holds_ = 0;
  bool background_started_ = false;
  std::atomic<UnsolicitedHandler> unsolicited_{nullptr};

  std::mutex download_mutex_;
  std::deque<DownloadChunk> downloads_;  // in the order their replies arrived

  std::atomic<int> deferred_error_{CUDA_SUCCESS};
  std::atomic<int> sticky_error_{CUDA_SUCCESS};
  std::atomic<bool> evicted_{false};          // the server evicted this job
  std::atomic<bool> work_dropped_noted_{false};   // the notice says its work was dropped
};

// A synchronous request (with an optional tail) answered by one fixed-size record
// of `kind`, copied to *out.
template <class Request, class ReplyMsg>
CUresult request_reply(const Request& request, protocol::MessageKind kind, ReplyMsg* out, const void* tail = nullptr,
                       uint32_t tail_size = 0) {
  Reply reply;
  if (CUresult rc = Connection::instance().request(request, &reply, tail, tail_size); rc != CUDA_SUCCESS) return rc;
  if (CUresult rc = Connection::expect_kind(reply, kind, sizeof(ReplyMsg)); rc != CUDA_SUCCESS) return rc;
  std::memcpy(out, reply.payload.data(), sizeof *out);
  return CUDA_SUCCESS;
}

}  // namespace tally::client
