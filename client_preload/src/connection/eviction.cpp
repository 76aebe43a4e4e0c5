// Connection, when the server evicts this job (tally-server evict, SysProbe, the
// server shutting down): the server pushes an Evicted record naming the reason onto
// the completion ring, then sets the segment's evicted flag. Whichever comes first
// to this side, the record read by a waiting thread or the flag seen by the next
// request, ends the same way: one "tally:" line on stderr with the reason, the
// reason appended to the file tally-run named (TALLY_EVICTION_NOTICE; tally-run
// then exits 75), and every driver call fails from now on with the code the server
// named (CUDA_ERROR_DEVICE_UNAVAILABLE).
//
// Whether the job lost work decides what tally-run exits with. The notice gets a
// "work dropped:" line when the server says the eviction dropped work the job had
// asked for, or when the job asks for more work afterwards (a launch, a copy, an
// allocation, a synchronization...: any request but one that only lets go of
// something, as a job's exit does). A job evicted once its work was done, which
// then only exits (a shutdown's drain found it idle), has no such line: tally-run
// keeps its own exit status.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>

#include "connection/connection.h"
#include "logging/log.h"
#include "logging/trace.h"
#include "tally/segment.h"

namespace tally::client {
namespace {

void append_notice(const std::string& path, const std::string& reason) {
  if (path.empty()) return;
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return;  // tally-run removed it already; the stderr line still says why
  const std::string line = reason + "\n";
  ssize_t unused = ::write(fd, line.data(), line.size());  // one write: lines of several processes never mix
  (void)unused;
  ::close(fd);
}

// The first word of a notice line saying the job lost work (tally/cli/job_process.py reads it).
constexpr const char* kWorkDropped = "work dropped: ";

// Requests that only let go of something: a job's exit and cleanup make them, and
// failing them loses no work.
bool lets_go(uint32_t kind) {
  using K = protocol::MessageKind;
  switch (static_cast<K>(kind)) {
    case K::MemFree: case K::MemFreeAsync: case K::ModuleUnload: case K::StreamDestroy: case K::EventDestroy:
    case K::HostUnregister: case K::MemAddressFree: case K::MemRelease: case K::MemUnmap:
    case K::IpcCloseMemHandle: case K::LinkDestroy: case K::Goodbye: case K::Ping: case K::Notify:
    case K::HostFuncDone: case K::ReleaseValueWaits:
      return true;
    default:
      return false;
  }
}

}  // namespace

void Connection::evicted_locked(const Reply& got) {
  protocol::EvictedMsg msg{};
  std::string reason = "no reason given";
  if (got.payload.size() >= sizeof msg) {
    std::memcpy(&msg, got.payload.data(), sizeof msg);
    if (got.payload.size() > sizeof msg)
      reason.assign(reinterpret_cast<const char*>(got.payload.data()) + sizeof msg, got.payload.size() - sizeof msg);
  }
  const CUresult status = msg.status == CUDA_SUCCESS ? CUDA_ERROR_DEVICE_UNAVAILABLE : static_cast<CUresult>(msg.status);
  std::lock_guard<std::mutex> lock(connect_mutex_);
  if (state_.load(std::memory_order_acquire) != State::kConnected) return;
  log_error("evicted by tally-server: %s (every GPU call of this job fails from now on)", reason.c_str());
  append_notice(config_.eviction_notice, reason);
  if (msg.work_dropped && !work_dropped_noted_.exchange(true))
    append_notice(config_.eviction_notice, std::string(kWorkDropped) + "the eviction dropped work it had asked for");
  connect_result_ = status;
  evicted_.store(true, std::memory_order_release);
  state_.store(State::kFailed, std::memory_order_release);
}

void Connection::refused_after_eviction(uint32_t kind) {
  if (!evicted_.load(std::memory_order_acquire) || lets_go(kind)) return;
  if (work_dropped_noted_.exchange(true)) return;
  append_notice(config_.eviction_notice,
                std::string(kWorkDropped) + protocol::message_name(kind) + " was asked for after the eviction");
}

CUresult Connection::learn_eviction(int64_t wait_for_reader_ms) {
  {
    std::unique_lock<std::mutex> lock(reply_mutex_);
    // A thread reading the ring now finds the record itself (it is there already).
    reply_ready_.wait_for(lock, std::chrono::milliseconds(wait_for_reader_ms),
                          [this] { return !reader_active_ || !connected(); });
    if (connected() && !reader_active_) {
      reader_active_ = true;
      while (connected()) {
        lock.unlock();
        Reply got;
        uint64_t tag = 0;
        std::string failure;
        const ReadStatus status = read_record(0, &got, &tag, &failure);
        lock.lock();
        if (status != ReadStatus::kRecord) break;
        route_locked(tag, std::move(got));
      }
      reader_active_ = false;
      reply_ready_.notify_all();
    }
  }
  if (connected()) return fail_transport("tally-server evicted this job without saying why");
  return usable();
}

// A job that makes no driver call after its eviction still learns of it as it exits,
// so tally-run reports the eviction rather than the job's own exit status.
void Connection::at_exit() {
  Connection& c = instance();
  if (c.connected() && c.segment_ && c.segment_->evicted()) c.learn_eviction(1000);
  // A stream waiting on a value nobody will write would hold the C runtime's exit
  // handlers (they unload modules, which waits for the job's work) forever: this
  // handler runs before them (registered after cudart's), and the server ends the waits.
  if (c.connected() && c.value_waits_.load(std::memory_order_relaxed) && c.usable() == CUDA_SUCCESS) {
    protocol::ReleaseValueWaitsMsg m{};
    c.send(m);
  }
}

}  // namespace tally::client
