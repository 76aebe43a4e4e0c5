#include "connection.h"

#include <pthread.h>
#include <unistd.h>

#include <cstring>

#include "handshake.h"
#include "log.h"
#include "tally/segment.h"
#include "trace.h"

namespace tally::client {
namespace {

constexpr int kHandshakeTimeoutMs = 10000;

std::string fixed_string(const uint8_t* bytes, size_t n) {
  return std::string(reinterpret_cast<const char*>(bytes), strnlen(reinterpret_cast<const char*>(bytes), n));
}

// The snapshot names some values twice (its own fields and the attribute slots);
// the fields win, so every query (attributes, cuDeviceGetPCIBusId, the integrity
// check's hash) reports the same numbers.
void normalize_snapshot(protocol::DeviceInfoMsg* d) {
  d->attributes[CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID] = d->pci_domain;
  d->attributes[CU_DEVICE_ATTRIBUTE_PCI_BUS_ID] = d->pci_bus;
  d->attributes[CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID] = d->pci_device;
  d->attributes[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR] = d->cc_major;
  d->attributes[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR] = d->cc_minor;
  d->attributes[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT] = d->sm_count;
}

}  // namespace

Connection& Connection::instance() {
  static Connection* connection = new Connection();
  return *connection;
}

CUresult Connection::connect() {
  State state = state_.load(std::memory_order_acquire);
  if (state == State::kConnected) return CUDA_SUCCESS;
  // A forked child must not take locks another parent thread may have held at fork.
  if (state == State::kForked) return CUDA_ERROR_NOT_INITIALIZED;
  std::lock_guard<std::mutex> lock(connect_mutex_);
  return connect_locked();
}

CUresult Connection::connect_locked() {
  switch (state_.load(std::memory_order_acquire)) {
    case State::kConnected: return CUDA_SUCCESS;
    case State::kFailed: return connect_result_;
    case State::kForked: return CUDA_ERROR_NOT_INITIALIZED;
    case State::kIdle: break;
  }
  auto fail = [this](const std::string& why) {
    log_error("%s", why.c_str());
    connect_result_ = CUDA_ERROR_NO_DEVICE;
    state_.store(State::kFailed, std::memory_order_release);
    return connect_result_;
  };
  std::string error;
  if (!read_client_config(&config_, &error)) return fail(error);
  HandshakeResult hs = handshake(config_, kHandshakeTimeoutMs);
  if (hs.socket_fd < 0) return fail(hs.error);
  std::string segment_name = fixed_string(hs.reply.segment_name, sizeof hs.reply.segment_name);
  try {
    segment_ = transport::Segment::open(segment_name);
  } catch (const std::exception& e) {
    ::close(hs.socket_fd);
    return fail("cannot attach the shared memory tally-server at " + config_.socket_path + " set up for this job (" +
                segment_name + "): " + e.what());
  }
  socket_fd_ = hs.socket_fd;
  client_id_ = hs.reply.client_id;
  device_ = hs.device;
  normalize_snapshot(&device_);
  static pthread_once_t fork_handler_once = PTHREAD_ONCE_INIT;
  pthread_once(&fork_handler_once, [] { pthread_atfork(nullptr, nullptr, &Connection::after_fork_in_child); });
  state_.store(State::kConnected, std::memory_order_release);
  trace_line("connected to %s as client %llu, segment %s", config_.socket_path.c_str(),
             static_cast<unsigned long long>(client_id_), segment_name.c_str());
  return CUDA_SUCCESS;
}

CUresult Connection::usable() const {
  switch (state_.load(std::memory_order_acquire)) {
    case State::kConnected: return CUDA_SUCCESS;
    case State::kFailed: return connect_result_;
    case State::kIdle:
    case State::kForked: break;
  }
  return CUDA_ERROR_NOT_INITIALIZED;
}

// The child of a fork shares the parent's socket and segment; it must use neither
// (two producers on one ring would corrupt it), and it must not keep the socket
// open, or the server would not see the parent's death while the child lives.
// CUDA itself does not work in a forked child either.
void Connection::after_fork_in_child() {
  Connection& c = instance();
  if (c.state_.load(std::memory_order_acquire) != State::kConnected) return;
  c.state_.store(State::kForked, std::memory_order_release);
  ::close(c.socket_fd_);
  c.socket_fd_ = -1;
  (void)c.segment_.release();  // the mapping dies with exec or exit; no shared state touched
}

CUresult Connection::fail_transport(const char* what) {
  std::lock_guard<std::mutex> lock(connect_mutex_);
  if (state_.load(std::memory_order_acquire) == State::kConnected) {
    log_error("lost tally-server at %s (%s); GPU calls of this job fail from now on", config_.socket_path.c_str(),
              what);
    connect_result_ = CUDA_ERROR_DEVICE_UNAVAILABLE;
    state_.store(State::kFailed, std::memory_order_release);
  }
  return connect_result_;
}

CUresult Connection::send_async(uint32_t kind, const void* payload, uint32_t size) {
  if (CUresult rc = usable(); rc != CUDA_SUCCESS) return rc;
  try {
    std::lock_guard<std::mutex> lock(request_mutex_);
    auto status = segment_->request_ring().push(kind, 0, payload, size, transport::Deadline::never());
    if (status != transport::WaitStatus::kReady) return fail_transport("the server stopped reading requests");
  } catch (const transport::RecordTooLarge& e) {
    log_error("internal error, request dropped: %s", e.what());
    return CUDA_ERROR_INVALID_VALUE;
  } catch (const std::exception& e) {
    return fail_transport(e.what());
  }
  return CUDA_SUCCESS;
}

CUresult Connection::call(uint32_t kind, const void* payload, uint32_t size, Reply* reply) {
  if (CUresult rc = usable(); rc != CUDA_SUCCESS) return rc;
  const uint64_t tag = next_tag_.fetch_add(1, std::memory_order_relaxed);
  try {
    std::lock_guard<std::mutex> lock(request_mutex_);
    auto status = segment_->request_ring().push(kind, tag, payload, size, transport::Deadline::never());
    if (status != transport::WaitStatus::kReady) return fail_transport("the server stopped reading requests");
  } catch (const transport::RecordTooLarge& e) {
    log_error("internal error, request dropped: %s", e.what());
    return CUDA_ERROR_INVALID_VALUE;
  } catch (const std::exception& e) {
    return fail_transport(e.what());
  }
  CUresult rc = wait_reply(tag, reply);
  if (rc != CUDA_SUCCESS) return rc;
  if (reply->kind == static_cast<uint32_t>(protocol::MessageKind::Error)) {
    protocol::ErrorMsg error{};
    if (reply->payload.size() < sizeof error) return fail_transport("the server sent a truncated Error record");
    std::memcpy(&error, reply->payload.data(), sizeof error);
    std::string text(reinterpret_cast<const char*>(reply->payload.data()) + sizeof error,
                     reply->payload.size() - sizeof error);
    trace_line("request kind %u failed on the server: status %u: %s", kind, error.status, text.c_str());
    return error.status == CUDA_SUCCESS ? CUDA_ERROR_UNKNOWN : static_cast<CUresult>(error.status);
  }
  // An earlier asynchronous failure the client noticed itself surfaces here, at the
  // next synchronous call, as CUDA reports deferred errors.
  return take_deferred_error();
}

CUresult Connection::wait_reply(uint64_t tag, Reply* reply) {
  std::unique_lock<std::mutex> lock(reply_mutex_);
  for (;;) {
    auto parked = parked_replies_.find(tag);
    if (parked != parked_replies_.end()) {
      *reply = std::move(parked->second);
      parked_replies_.erase(parked);
      return CUDA_SUCCESS;
    }
    if (reader_active_) {
      reply_ready_.wait(lock);
      continue;
    }
    // Become the reader: take the next record off the completion ring, keep it if
    // it is ours, park it for its owner otherwise.
    reader_active_ = true;
    lock.unlock();
    Reply got;
    uint64_t got_tag = 0;
    const char* failure = nullptr;
    std::string failure_text;
    try {
      transport::RecordView view{};
      auto status = segment_->completion_ring().peek(&view, transport::Deadline::never());
      if (status == transport::WaitStatus::kReady) {
        got.kind = view.kind;
        got.payload.assign(view.payload, view.payload + view.size);
        got_tag = view.tag;
        segment_->completion_ring().consume(view);
      } else {
        failure = "the server stopped answering";
      }
    } catch (const std::exception& e) {
      failure_text = e.what();
      failure = failure_text.c_str();
    }
    lock.lock();
    reader_active_ = false;
    reply_ready_.notify_all();
    if (failure != nullptr) {
      lock.unlock();
      return fail_transport(failure);
    }
    if (got_tag == tag) {
      *reply = std::move(got);
      return CUDA_SUCCESS;
    }
    if (got_tag == 0) {
      trace_line("dropped an unsolicited completion of kind %u", got.kind);
      continue;
    }
    parked_replies_[got_tag] = std::move(got);
  }
}

void Connection::defer_error(CUresult error) {
  int expected = CUDA_SUCCESS;
  deferred_error_.compare_exchange_strong(expected, static_cast<int>(error), std::memory_order_acq_rel);
}

CUresult Connection::take_deferred_error() {
  return static_cast<CUresult>(deferred_error_.exchange(CUDA_SUCCESS, std::memory_order_acq_rel));
}

}  // namespace tally::client
