// A single-producer single-consumer byte arena in shared memory for bulk payloads
// (memcpy bytes), beside a record ring that names the chunks.
//
// The producer reserves a contiguous chunk, writes into it and sends (offset,
// length) in a ring record; the ring's release/acquire makes the bytes visible.
// The consumer releases chunks in the order they were reserved. A chunk never
// wraps: when it does not fit before the end, the producer skips the tail and
// starts at offset 0; the consumer recognises the skip when the next chunk it
// releases is at offset 0 while its own position is elsewhere, so the arena needs
// no markers. Chunks are 64-byte aligned so copies start on cache lines.
// Same index discipline as RecordRing (see spsc_ring.h), sharing its SpscControl.
#pragma once
#include <atomic>
#include <cstdint>
#include <string>

#include "tally/futex_wait.h"
#include "tally/spsc_ring.h"
#include "tally/transport_errors.h"

namespace tally::transport {

class ByteArena {
 public:
  static constexpr uint64_t kChunkAlign = 64;
  static constexpr uint64_t kMinCapacity = 4096;

  ByteArena() = default;
  ByteArena(SpscControl* control, uint8_t* data, uint64_t capacity, RingRole role, std::string name,
            const WaitPolicy* policy, PeerProbe* peer, const Presence& presence = {})
      : control_(control), data_(data), capacity_(capacity), mask_(capacity - 1), role_(role),
        name_(std::move(name)), policy_(policy), peer_(peer), presence_(presence) {
    if (!is_power_of_two(capacity) || capacity < kMinCapacity)
      throw TransportError(name_ + ": capacity " + std::to_string(capacity) +
                           " must be a power of two >= " + std::to_string(kMinCapacity));
    cached_read_ = control_->read.pos.load(std::memory_order_acquire);
  }

  uint64_t capacity() const { return capacity_; }
  RingRole role() const { return role_; }
  const std::string& name() const { return name_; }
  uint8_t* data() const { return data_; }
  // Bytes reserved and not yet released (skipped tails included).
  uint64_t used() const {
    const uint64_t r = control_->read.pos.load(std::memory_order_acquire);
    return control_->write.pos.load(std::memory_order_acquire) - r;
  }
  // Producer minus consumer position never exceeds this: a skipped tail the
  // consumer has not yet moved past, plus at most a full arena after it.
  uint64_t max_in_flight() const { return 2 * capacity_; }
  bool contains(uint64_t offset, uint64_t nbytes) const { return offset <= capacity_ && nbytes <= capacity_ - offset; }

  // ---- producer ----------------------------------------------------------

  // Reserves `nbytes` contiguous bytes; false when the arena is too full now.
  bool try_reserve(uint64_t nbytes, uint64_t* offset_out) {
    const uint64_t need = chunk_span(nbytes);
    if (!make_room(need)) return false;
    commit(need, offset_out);
    return true;
  }

  WaitStatus reserve(uint64_t nbytes, Deadline deadline, uint64_t* offset_out) {
    const uint64_t need = chunk_span(nbytes);
    const WaitStatus st = EventCount(&control_->space_ready, &presence_)
                              .wait([&] { return make_room(need); },
                                    [&] { return peer_ == nullptr || peer_->alive(); }, deadline, *policy_);
    if (st == WaitStatus::kReady) commit(need, offset_out);
    return st;
  }

  // ---- consumer ----------------------------------------------------------

  // Returns the chunk at `offset` (the oldest unreleased one) to the producer.
  void release(uint64_t offset, uint64_t nbytes) {
    if (role_ != RingRole::kConsumer)
      throw TransportError(name_ + ": release() belongs to the consuming side; the producer reserves");
    if (nbytes == 0) return;
    const uint64_t oldest = control_->read.pos.load(std::memory_order_relaxed);
    const uint64_t here = oldest & mask_;
    uint64_t start = oldest;
    if (offset != here) {
      if (offset != 0)
        throw CorruptSegment(name_ + ": release of offset " + std::to_string(offset) + " out of order (the oldest chunk starts at " +
                             std::to_string(here) + " or 0); chunks must be released in the order they were reserved");
      start += capacity_ - here;  // the producer skipped the tail
    }
    const uint64_t end = start + round_up(nbytes, kChunkAlign);
    const uint64_t w = control_->write.pos.load(std::memory_order_acquire);
    if (w - oldest > max_in_flight() || end - oldest > w - oldest)
      throw CorruptSegment(name_ + ": release of " + std::to_string(nbytes) + " bytes at offset " + std::to_string(offset) +
                           " goes past what the producer reserved");
    control_->read.pos.store(end, std::memory_order_release);
    EventCount(&control_->space_ready, &presence_).notify();
  }

 private:
  uint64_t chunk_span(uint64_t nbytes) const {
    if (role_ != RingRole::kProducer)
      throw TransportError(name_ + ": reserve() belongs to the producing side; the consumer releases");
    if (nbytes > capacity_)
      throw RecordTooLarge(name_ + ": a chunk of " + std::to_string(nbytes) + " bytes can never fit (arena capacity " +
                           std::to_string(capacity_) + " bytes); split the copy into smaller chunks");
    return round_up(nbytes, kChunkAlign);
  }

  bool make_room(uint64_t need) {
    uint64_t w = control_->write.pos.load(std::memory_order_relaxed);
    const uint64_t to_end = capacity_ - (w & mask_);
    if (need > to_end) {
      if (!has_free(w, to_end)) return false;
      skips_[1] = skips_[0];
      skips_[0] = SkippedTail{w, w + to_end};
      w += to_end;  // skip the tail; the consumer infers it from the next offset 0
      control_->write.pos.store(w, std::memory_order_release);
    }
    return has_free(w, need);
  }

  void commit(uint64_t need, uint64_t* offset_out) {
    const uint64_t w = control_->write.pos.load(std::memory_order_relaxed);
    *offset_out = w & mask_;
    control_->write.pos.store(w + need, std::memory_order_release);
  }

  bool has_free(uint64_t w, uint64_t bytes) {
    // The cached position may be stale by more than a lap; then just reload.
    const uint64_t cached_used = w - effective_read(cached_read_);
    if (cached_used <= capacity_ && capacity_ - cached_used >= bytes) return true;
    const uint64_t r = control_->read.pos.load(std::memory_order_acquire);
    const uint64_t used = w - effective_read(r);
    if (used > capacity_ || (r & (kChunkAlign - 1)) != 0)
      throw CorruptSegment(name_ + ": consumer position " + std::to_string(r) + " is inconsistent with producer position " +
                           std::to_string(w) + "; the peer wrote inconsistent data, drop this connection");
    cached_read_ = r;
    return capacity_ - used >= bytes;
  }

  // A consumer that has released everything before a skipped tail has freed the
  // tail too, although it moves its position past it only at its next release;
  // without this a chunk larger than the free front would wait forever. Only the
  // latest two skips matter: a consumer sitting before an older one would leave
  // more than a full arena in flight.
  uint64_t effective_read(uint64_t r) const {
    for (const SkippedTail& s : skips_)
      if (r == s.from && s.to != s.from) return s.to;
    return r;
  }

  struct SkippedTail {
    uint64_t from = 0, to = 0;
  };

  SpscControl* control_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t mask_ = 0;
  RingRole role_ = RingRole::kProducer;
  std::string name_;
  const WaitPolicy* policy_ = nullptr;
  PeerProbe* peer_ = nullptr;
  Presence presence_;           // this side's (cpu_presence.h)
  uint64_t cached_read_ = 0;  // producer's copy of the consumer's position
  SkippedTail skips_[2];      // the producer's latest skipped tails, newest first
};

}  // namespace tally::transport
