#include "connection/connection.h"

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "connection/context_faults.h"
#include "connection/handshake.h"
#include "logging/log.h"
#include "tally/segment.h"
#include "logging/failure_reports.h"
#include "logging/trace.h"

namespace tally::client {
namespace {

constexpr int kHandshakeTimeoutMs = 10000;
// An evicted job's request waits at most this long for a thread reading the completion
// ring to route the Evicted record (it is on the ring already, so that is quick).
constexpr int64_t kReaderWaitMs = 5000;

// How long a thread waiting for a reply spins before it sleeps on the futex. A
// reply that comes while the thread sleeps costs a futex wake-up (tens of us on a
// VM), so the spin covers a server that itself had to wake up first.
// TALLY_CLIENT_SPIN_US overrides it (0: sleep at once, for oversubscribed hosts).
int64_t client_spin_ns() {
  constexpr int64_t kDefaultSpinNs = 100'000;
  const char* env = std::getenv("TALLY_CLIENT_SPIN_US");
  if (env == nullptr || *env == '\0') return kDefaultSpinNs;
  char* end = nullptr;
  const double us = std::strtod(env, &end);
  if (end == env || *end != '\0' || !(us >= 0) || us > 1e6) {
    log_error("TALLY_CLIENT_SPIN_US=%s is not a number of microseconds (0..1000000); using %lld", env,
              static_cast<long long>(kDefaultSpinNs / 1000));
    return kDefaultSpinNs;
  }
  return static_cast<int64_t>(us * 1000);
}

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
    transport::WaitPolicy policy;
    policy.spin_ns = client_spin_ns();
    segment_ = transport::Segment::open(segment_name, policy);
  } catch (const std::exception& e) {
    ::close(hs.socket_fd);
    return fail("cannot attach the shared memory tally-server at " + config_.socket_path + " set up for this job (" +
                segment_name + "): " + e.what());
  }
  // Both sides have the segment mapped now, so its name is needed by no one: removing
  // it here means a server that is SIGKILLed later leaves nothing in /dev/shm (the
  // memory goes when the last mapping does). The server unlinks too (ENOENT is fine).
  shm_unlink(segment_name.c_str());
  // The server's liveness is its end of the handshake socket, not its pid, which a
  // job in its own pid namespace (a container) cannot see.
  segment_->watch_peer_socket(hs.socket_fd);
  socket_fd_ = hs.socket_fd;
  client_id_ = hs.reply.client_id;
  device_ = hs.device;
  normalize_snapshot(&device_);
  static pthread_once_t fork_handler_once = PTHREAD_ONCE_INIT;
  pthread_once(&fork_handler_once, [] {
    pthread_atfork(nullptr, nullptr, &Connection::after_fork_in_child);
    std::atexit(&Connection::at_exit);
  });
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

CUresult Connection::post(uint32_t kind, const void* msg, uint32_t msg_size, const void* tail, uint32_t tail_size,
                          uint64_t* tag_out) {
  if (CUresult rc = sticky_error(); rc != CUDA_SUCCESS) return rc;
  return post_record(kind, msg, msg_size, tail, tail_size, tag_out);
}

CUresult Connection::post_record(uint32_t kind, const void* msg, uint32_t msg_size, const void* tail,
                                 uint32_t tail_size, uint64_t* tag_out) {
  CUresult rc = usable();
  if (rc == CUDA_SUCCESS && segment_->evicted()) rc = learn_eviction(kReaderWaitMs);
  if (rc != CUDA_SUCCESS) {
    refused_after_eviction(kind);
    return rc;
  }
  const uint64_t tag = tag_out == nullptr ? 0 : next_tag_.fetch_add(1, std::memory_order_relaxed);
  try {
    std::lock_guard<std::mutex> lock(request_mutex_);
    auto& ring = segment_->request_ring();
    uint8_t* slot = nullptr;
    auto status = ring.begin(uint64_t{msg_size} + tail_size, transport::Deadline::never(), &slot);
    if (status != transport::WaitStatus::kReady) return fail_transport("the server stopped reading requests");
    if (msg_size) std::memcpy(slot, msg, msg_size);
    if (tail_size) std::memcpy(slot + msg_size, tail, tail_size);
    ring.commit(kind, tag);
  } catch (const transport::RecordTooLarge& e) {
    log_error("internal error, request dropped: %s", e.what());
    return CUDA_ERROR_INVALID_VALUE;
  } catch (const std::exception& e) {
    return fail_transport(e.what());
  }
  if (tag_out != nullptr) *tag_out = tag;
  return CUDA_SUCCESS;
}

CUresult Connection::send_async_fill(uint32_t kind, uint32_t size, void (*fill)(uint8_t*, const void*),
                                     const void* context) {
  CUresult gone = usable();
  if (gone == CUDA_SUCCESS && segment_->evicted()) gone = learn_eviction(kReaderWaitMs);
  if (gone != CUDA_SUCCESS) {
    refused_after_eviction(kind);
    return gone;
  }
  if (CUresult rc = sticky_error(); rc != CUDA_SUCCESS) return rc;
  try {
    std::lock_guard<std::mutex> lock(request_mutex_);
    auto& ring = segment_->request_ring();
    uint8_t* slot = nullptr;
    auto status = ring.begin(size, transport::Deadline::never(), &slot);
    if (status != transport::WaitStatus::kReady) return fail_transport("the server stopped reading requests");
    fill(slot, context);
    ring.commit(kind, 0);
  } catch (const transport::RecordTooLarge& e) {
    log_error("internal error, request dropped: %s", e.what());
    return CUDA_ERROR_INVALID_VALUE;
  } catch (const std::exception& e) {
    return fail_transport(e.what());
  }
  return CUDA_SUCCESS;
}

CUresult Connection::call(uint32_t kind, const void* msg, uint32_t msg_size, const void* tail, uint32_t tail_size,
                          Reply* reply) {
  uint64_t tag = 0;
  if (CUresult rc = post(kind, msg, msg_size, tail, tail_size, &tag); rc != CUDA_SUCCESS) return rc;
  return wait(tag, kind, reply);
}

CUresult Connection::wait(uint64_t tag, uint32_t request_kind, Reply* reply) {
  CUresult rc = wait_reply(tag, reply);
  if (rc != CUDA_SUCCESS) return rc;
  if (reply->kind == static_cast<uint32_t>(protocol::MessageKind::Error)) {
    protocol::ErrorMsg error{};
    if (reply->payload.size() < sizeof error) return fail_transport("the server sent a truncated Error record");
    std::memcpy(&error, reply->payload.data(), sizeof error);
    std::string text(reinterpret_cast<const char*>(reply->payload.data()) + sizeof error,
                     reply->payload.size() - sizeof error);
    trace_line("request %llu failed on the server: status %u: %s", static_cast<unsigned long long>(tag),
               error.status, text.c_str());
    const CUresult status = error.status == CUDA_SUCCESS ? CUDA_ERROR_UNKNOWN : static_cast<CUresult>(error.status);
    report_failure(request_kind, status, text);
    if (is_context_fault(status)) {
      int none = CUDA_SUCCESS;   // the first fault stays, as CUDA's sticky error does
      sticky_error_.compare_exchange_strong(none, static_cast<int>(status), std::memory_order_acq_rel);
    }
    return status;
  }
  // An earlier asynchronous failure the client noticed itself surfaces here, at the
  // next synchronous call, as CUDA reports deferred errors.
  return take_deferred_error();
}

CUresult Connection::expect_kind(const Reply& reply, protocol::MessageKind kind, size_t min_size) {
  if (reply.kind == static_cast<uint32_t>(kind) && reply.payload.size() >= min_size) return CUDA_SUCCESS;
  log_error("tally-server answered with record kind %u of %zu bytes where kind %u was expected; the server and "
            "this client library come from different tally versions",
            reply.kind, reply.payload.size(), static_cast<uint32_t>(kind));
  return CUDA_ERROR_UNKNOWN;
}

CUresult Connection::reset_context() {
  if (CUresult rc = usable(); rc != CUDA_SUCCESS) return rc;
  uint64_t tag = 0;
  const uint32_t kind = static_cast<uint32_t>(protocol::MessageKind::CtxSynchronize);
  if (CUresult rc = post_record(kind, nullptr, 0, nullptr, 0, &tag); rc != CUDA_SUCCESS) return rc;
  Reply reply;
  wait(tag, kind, &reply);   // what the reset context's work failed with goes with it
  if (CUresult rc = usable(); rc != CUDA_SUCCESS) return rc;
  sticky_error_.store(CUDA_SUCCESS, std::memory_order_release);
  deferred_error_.store(CUDA_SUCCESS, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult Connection::reserve_upload(uint64_t nbytes, uint64_t* offset, uint8_t** data) {
  CUresult gone = usable();
  if (gone == CUDA_SUCCESS && segment_->evicted()) gone = learn_eviction(kReaderWaitMs);
  if (gone != CUDA_SUCCESS) {
    refused_after_eviction(static_cast<uint32_t>(protocol::MessageKind::MemcpyHtoD));   // bytes for a copy
    return gone;
  }
  if (CUresult rc = sticky_error(); rc != CUDA_SUCCESS) return rc;
  try {
    auto& arena = segment_->upload();
    auto status = arena.reserve(nbytes, transport::Deadline::never(), offset);
    if (status != transport::WaitStatus::kReady) return fail_transport("the server stopped taking uploads");
    *data = arena.data() + *offset;
  } catch (const std::exception& e) {
    return fail_transport(e.what());
  }
  return CUDA_SUCCESS;
}

uint64_t Connection::upload_capacity() const { return segment_ ? segment_->upload().capacity() : 0; }
uint64_t Connection::download_capacity() const { return segment_ ? segment_->download().capacity() : 0; }

void Connection::defer_error(CUresult error) {
  int expected = CUDA_SUCCESS;
  deferred_error_.compare_exchange_strong(expected, static_cast<int>(error), std::memory_order_acq_rel);
}

CUresult Connection::take_deferred_error() {
  return static_cast<CUresult>(deferred_error_.exchange(CUDA_SUCCESS, std::memory_order_acq_rel));
}

}  // namespace tally::client
