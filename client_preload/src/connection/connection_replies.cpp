// Connection, the completion-ring side: one thread at a time reads the ring and
// routes each record: a reply to the thread waiting for its tag (parked until it
// looks), a record the server sent on its own (tag 0) to the unsolicited handler,
// and every download-arena chunk a reply names into the release queue, in ring
// order, so chunks go back to the server in the order it reserved them.
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "connection/connection.h"
#include "tally/segment.h"
#include "logging/trace.h"

namespace tally::client {

Connection::ReadStatus Connection::read_record(int64_t timeout_ns, Reply* got, uint64_t* tag,
                                               std::string* failure) {
  try {
    transport::RecordView view{};
    auto deadline = timeout_ns < 0 ? transport::Deadline::never() : transport::Deadline::after_ns(timeout_ns);
    auto status = segment_->completion_ring().peek(&view, deadline);
    if (status == transport::WaitStatus::kTimedOut) return ReadStatus::kTimedOut;
    if (status != transport::WaitStatus::kReady) {
      *failure = "the server stopped answering";
      return ReadStatus::kFailed;
    }
    got->kind = view.kind;
    got->payload.assign(view.payload, view.payload + view.size);
    *tag = view.tag;
    segment_->completion_ring().consume(view);
    return ReadStatus::kRecord;
  } catch (const std::exception& e) {
    *failure = e.what();
    return ReadStatus::kFailed;
  }
}

// Device printf (to stdout) and failed device asserts (to stderr): the text arrives
// before the reply to the synchronizing call that flushed it and goes through the
// job's own stdio stream, in order with what the job printed itself (as the real
// driver delivers it).
void Connection::write_kernel_output(const std::vector<uint8_t>& text, FILE* to) {
  if (text.empty()) return;
  std::fwrite(text.data(), 1, text.size(), to);
  std::fflush(to);
}

namespace {

// The download-arena chunk a reply names, if it is of a kind that names one.
template <class Msg>
bool chunk_of(const Reply& got, uint64_t* offset, uint64_t* size) {
  if (got.kind != static_cast<uint32_t>(Msg::kKind) || got.payload.size() < sizeof(Msg)) return false;
  Msg m{};
  std::memcpy(&m, got.payload.data(), sizeof m);
  *offset = m.arena_offset;
  *size = m.size;
  return true;
}

}  // namespace

void Connection::route_locked(uint64_t tag, Reply&& got) {
  uint64_t offset = 0, size = 0;
  if ((chunk_of<protocol::MemcpyDtoHReplyMsg>(got, &offset, &size) ||
       chunk_of<protocol::LinkReplyMsg>(got, &offset, &size)) &&
      size != 0) {
    std::lock_guard<std::mutex> lock(download_mutex_);
    downloads_.push_back({offset, size, false});
  }
  if (tag != 0) {
    parked_replies_[tag] = std::move(got);
    return;
  }
  if (got.kind == static_cast<uint32_t>(protocol::MessageKind::Evicted)) {
    evicted_locked(got);  // eviction.cpp
    return;
  }
  if (got.kind == static_cast<uint32_t>(protocol::MessageKind::KernelOutput)) {
    write_kernel_output(got.payload, stdout);
    return;
  }
  if (got.kind == static_cast<uint32_t>(protocol::MessageKind::KernelStderr)) {
    write_kernel_output(got.payload, stderr);
    return;
  }
  UnsolicitedHandler handler = unsolicited_.load();
  if (handler != nullptr) {
    handler(got.kind, got.payload.data(), static_cast<uint32_t>(got.payload.size()));
  } else {
    trace_line("dropped an unsolicited completion of kind %u", got.kind);
  }
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
    if (state_.load(std::memory_order_acquire) != State::kConnected) {
      lock.unlock();
      return usable();
    }
    if (reader_active_) {
      reply_ready_.wait(lock);
      continue;
    }
    // Become the reader: take the next record off the completion ring and route it.
    reader_active_ = true;
    lock.unlock();
    Reply got;
    uint64_t got_tag = 0;
    std::string failure;
    ReadStatus status = read_record(-1, &got, &got_tag, &failure);
    lock.lock();
    reader_active_ = false;
    reply_ready_.notify_all();
    if (status != ReadStatus::kRecord) {
      lock.unlock();
      return fail_transport(failure.c_str());
    }
    // Routed before the lock is released, so records are routed in ring order.
    route_locked(got_tag, std::move(got));
  }
}

void Connection::hold_reader() {
  std::lock_guard<std::mutex> lock(reply_mutex_);
  ++reader_holds_;
  if (!background_started_) {
    background_started_ = true;
    std::thread([this] { background_reader(); }).detach();
  }
  reply_ready_.notify_all();
}

void Connection::release_reader() {
  std::lock_guard<std::mutex> lock(reply_mutex_);
  if (reader_holds_ > 0) --reader_holds_;
}

void Connection::background_reader() {
  // Wakes every so often while holds are taken, so a thread waiting for the
  // reader role is not kept waiting long when the ring stays quiet.
  constexpr int64_t kReadSliceNs = 20'000'000;
  std::unique_lock<std::mutex> lock(reply_mutex_);
  for (;;) {
    reply_ready_.wait(lock, [this] {
      return (reader_holds_ > 0 && !reader_active_) || state_.load(std::memory_order_acquire) != State::kConnected;
    });
    if (state_.load(std::memory_order_acquire) != State::kConnected) return;
    reader_active_ = true;
    lock.unlock();
    Reply got;
    uint64_t got_tag = 0;
    std::string failure;
    ReadStatus status = read_record(kReadSliceNs, &got, &got_tag, &failure);
    lock.lock();
    reader_active_ = false;
    reply_ready_.notify_all();
    if (status == ReadStatus::kFailed) {
      lock.unlock();
      fail_transport(failure.c_str());
      lock.lock();
      reply_ready_.notify_all();
      return;
    }
    if (status == ReadStatus::kRecord) {
      route_locked(got_tag, std::move(got));
    } else {
      // Give a thread that waits for the reader role its turn.
      lock.unlock();
      std::this_thread::yield();
      lock.lock();
    }
  }
}

const uint8_t* Connection::download_data(uint64_t offset) const { return segment_->download().data() + offset; }

void Connection::release_download(uint64_t offset) {
  std::lock_guard<std::mutex> lock(download_mutex_);
  for (DownloadChunk& chunk : downloads_) {
    if (chunk.offset == offset && !chunk.copied) {
      chunk.copied = true;
      break;
    }
  }
  try {
    while (!downloads_.empty() && downloads_.front().copied) {
      segment_->download().release(downloads_.front().offset, downloads_.front().size);
      downloads_.pop_front();
    }
  } catch (const std::exception& e) {
    fail_transport(e.what());
  }
}

}  // namespace tally::client
