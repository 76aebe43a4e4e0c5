// A single-producer single-consumer ring of variable-length records in shared
// memory, one process on each end.
//
// Discipline (rigtorp/SPSCQueue, folly ProducerConsumerQueue): each index has one
// writer and its own cache line; a side loads its own index relaxed and the other
// side's with acquire, and publishes with release; each side keeps a private cached
// copy of the other's index and reloads it only when the ring looks full/empty.
// Positions are monotonic 64-bit byte counts (no ABA); the byte offset is
// position & (capacity - 1). Memory is named by offsets, never pointers.
//
// A record is a protocol::RecordHeader {kind, size, tag} and `size` payload bytes,
// padded to 8. A record never wraps: when it does not fit before the end, the
// producer fills the tail with a padding record (kind kPaddingKind), or leaves it
// empty when only 8 bytes remain (too short for a header; the consumer skips it).
//
// Everything read from shared memory that the other process writes (its index, a
// record header) is copied once into a local and validated before use, so a
// corrupt or hostile peer causes CorruptSegment, never an out-of-bounds access.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "tally/futex_wait.h"
#include "tally/protocol_generated.h"
#include "tally/transport_errors.h"

namespace tally::transport {

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared indices need lock-free 64-bit atomics");

struct alignas(64) PositionLine {
  std::atomic<uint64_t> pos;
  uint8_t reserved[56];
};
static_assert(sizeof(PositionLine) == 64);

// Shared control block of one ring or arena; 256 bytes, one writer per line
// (wait lines are written by both sides, but only on the sleep/wake slow path).
struct SpscControl {
  PositionLine write;     // producer: bytes published
  PositionLine read;      // consumer: bytes released
  WaitLine data_ready;    // consumer sleeps here when empty; producer notifies
  WaitLine space_ready;   // producer sleeps here when full; consumer notifies
};
static_assert(sizeof(SpscControl) == 256);
static_assert(offsetof(SpscControl, write) == 0 && offsetof(SpscControl, read) == 64 &&
              offsetof(SpscControl, data_ready) == 128 && offsetof(SpscControl, space_ready) == 192);
static_assert(std::is_standard_layout_v<SpscControl>);

enum class RingRole { kProducer, kConsumer };

inline bool is_power_of_two(uint64_t x) { return x != 0 && (x & (x - 1)) == 0; }
inline uint64_t round_up(uint64_t x, uint64_t align) { return (x + align - 1) & ~(align - 1); }

// What a consumer sees of a record: valid until consume() is called for it.
struct RecordView {
  uint32_t kind;
  uint32_t size;
  uint64_t tag;
  const uint8_t* payload;
  uint64_t position;  // ring position of the header
  uint64_t span;      // header + padded payload
};

class RecordRing {
 public:
  using RecordHeader = protocol::RecordHeader;
  static constexpr uint64_t kAlign = 8;
  static constexpr uint64_t kHeaderBytes = sizeof(RecordHeader);
  static constexpr uint64_t kMinCapacity = 64;
  // Fills the unusable tail before a wrap; never a protocol message kind.
  static constexpr uint32_t kPaddingKind = UINT32_MAX;

  RecordRing() = default;
  // `name` is for error messages ("request ring"). `policy` and `peer` must outlive
  // the ring; peer may be null (then the peer is always considered alive).
  // `presence` holds pointers into the segment: where this side and its peer run.
  RecordRing(SpscControl* control, uint8_t* data, uint64_t capacity, RingRole role, std::string name,
             const WaitPolicy* policy, PeerProbe* peer, const Presence& presence = {})
      : control_(control), data_(data), capacity_(capacity), mask_(capacity - 1), role_(role),
        name_(std::move(name)), policy_(policy), peer_(peer), presence_(presence) {
    if (!is_power_of_two(capacity) || capacity < kMinCapacity)
      throw TransportError(name_ + ": capacity " + std::to_string(capacity) +
                           " must be a power of two >= " + std::to_string(kMinCapacity));
    cached_read_ = control_->read.pos.load(std::memory_order_acquire);
    cached_write_ = control_->write.pos.load(std::memory_order_acquire);
  }

  uint64_t capacity() const { return capacity_; }
  uint64_t max_payload() const { return capacity_ - kHeaderBytes; }
  RingRole role() const { return role_; }
  const std::string& name() const { return name_; }
  // Bytes published and not yet consumed (padding included).
  uint64_t used() const {
    const uint64_t r = control_->read.pos.load(std::memory_order_acquire);
    return control_->write.pos.load(std::memory_order_acquire) - r;
  }

  // ---- producer ----------------------------------------------------------

  // Reserves room for a record with `payload_bytes` of payload and returns where
  // to write the payload, or nullptr when the ring is full. Finish with commit().
  uint8_t* try_begin(uint64_t payload_bytes) {
    const uint64_t span = record_span(payload_bytes);
    return make_room(span) ? payload_slot() : nullptr;
  }

  WaitStatus begin(uint64_t payload_bytes, Deadline deadline, uint8_t** payload_out) {
    const uint64_t span = record_span(payload_bytes);
    const WaitStatus st = EventCount(&control_->space_ready, &presence_)
                              .wait([&] { return make_room(span); }, [&] { return peer_alive(); }, deadline, *policy_);
    if (st == WaitStatus::kReady) *payload_out = payload_slot();
    return st;
  }

  // Publishes the record begun by try_begin()/begin() and wakes a sleeping consumer.
  void commit(uint32_t kind, uint64_t tag) {
    if (pending_span_ == 0) throw TransportError(name_ + ": commit() without a successful begin()");
    if (kind == kPaddingKind) throw TransportError(name_ + ": record kind 0xFFFFFFFF is reserved for ring padding");
    const uint64_t w = control_->write.pos.load(std::memory_order_relaxed);
    const RecordHeader header{kind, pending_size_, tag};
    std::memcpy(data_ + (w & mask_), &header, sizeof header);
    control_->write.pos.store(w + pending_span_, std::memory_order_release);
    pending_span_ = 0;
    EventCount(&control_->data_ready, &presence_).notify();
  }

  bool try_push(uint32_t kind, uint64_t tag, const void* payload, uint64_t size) {
    uint8_t* slot = try_begin(size);
    if (slot == nullptr) return false;
    if (size) std::memcpy(slot, payload, size);
    commit(kind, tag);
    return true;
  }

  WaitStatus push(uint32_t kind, uint64_t tag, const void* payload, uint64_t size, Deadline deadline) {
    uint8_t* slot = nullptr;
    const WaitStatus st = begin(size, deadline, &slot);
    if (st != WaitStatus::kReady) return st;
    if (size) std::memcpy(slot, payload, size);
    commit(kind, tag);
    return st;
  }

  // ---- consumer ----------------------------------------------------------

  // Fills `out` with the oldest record, or returns false when the ring is empty.
  bool try_peek(RecordView* out) {
    expect_role(RingRole::kConsumer, "pop");
    for (;;) {
      const uint64_t r = control_->read.pos.load(std::memory_order_relaxed);
      if (r == cached_write_) {
        cached_write_ = load_write(r);
        if (r == cached_write_) return false;
      }
      const uint64_t offset = r & mask_;
      const uint64_t to_end = capacity_ - offset;
      if (to_end < kHeaderBytes) {  // an 8-byte tail the producer skipped
        release_to(r + to_end);
        continue;
      }
      RecordHeader header;
      std::memcpy(&header, data_ + offset, sizeof header);
      const uint64_t span = kHeaderBytes + round_up(header.size, kAlign);
      const uint64_t published = cached_write_ - r;
      if (header.kind == kPaddingKind) {
        if (span != to_end || span > published)
          corrupt(r, "padding record of " + std::to_string(header.size) + " bytes does not end at the ring's end");
        release_to(r + span);
        continue;
      }
      if (span > to_end) corrupt(r, "record of " + std::to_string(header.size) + " payload bytes crosses the ring's end");
      if (span > published) corrupt(r, "record of " + std::to_string(header.size) + " payload bytes extends past the published data");
      *out = RecordView{header.kind, header.size, header.tag, data_ + offset + kHeaderBytes, r, span};
      return true;
    }
  }

  WaitStatus peek(RecordView* out, Deadline deadline) {
    return EventCount(&control_->data_ready, &presence_)
        .wait([&] { return try_peek(out); }, [&] { return peer_alive(); }, deadline, *policy_);
  }

  // Frees the record returned by the last peek and wakes a producer waiting for space.
  void consume(const RecordView& record) {
    const uint64_t r = control_->read.pos.load(std::memory_order_relaxed);
    if (record.position != r) throw TransportError(name_ + ": consume() of a record that is not the oldest one");
    release_to(r + record.span);
  }

 private:
  static constexpr uint64_t kMaxSize = UINT32_MAX;

  uint64_t record_span(uint64_t payload_bytes) {
    expect_role(RingRole::kProducer, "push");
    if (payload_bytes > max_payload() || payload_bytes > kMaxSize)
      throw RecordTooLarge(name_ + ": a record of " + std::to_string(payload_bytes) +
                           " payload bytes can never fit (ring capacity " + std::to_string(capacity_) +
                           " bytes, at most " + std::to_string(max_payload()) +
                           " payload bytes per record); send it in chunks or through an arena");
    pending_size_ = static_cast<uint32_t>(payload_bytes);
    return kHeaderBytes + round_up(payload_bytes, kAlign);
  }

  // True when `span` contiguous bytes are free at the write position; writes a
  // padding record first when the record would cross the ring's end.
  bool make_room(uint64_t span) {
    uint64_t w = control_->write.pos.load(std::memory_order_relaxed);
    const uint64_t to_end = capacity_ - (w & mask_);
    if (span > to_end) {
      if (!has_free(w, to_end)) return false;
      if (to_end >= kHeaderBytes) {
        const RecordHeader pad{kPaddingKind, static_cast<uint32_t>(to_end - kHeaderBytes), 0};
        std::memcpy(data_ + (w & mask_), &pad, sizeof pad);
      }
      w += to_end;
      control_->write.pos.store(w, std::memory_order_release);
      // A sleeping consumer must release the padding before the record can fit.
      EventCount(&control_->data_ready, &presence_).notify();
    }
    if (!has_free(w, span)) return false;
    pending_span_ = span;
    return true;
  }

  uint8_t* payload_slot() const {
    return data_ + (control_->write.pos.load(std::memory_order_relaxed) & mask_) + kHeaderBytes;
  }

  bool has_free(uint64_t w, uint64_t bytes) {
    if (capacity_ - (w - cached_read_) >= bytes) return true;
    const uint64_t r = control_->read.pos.load(std::memory_order_acquire);
    if (w - r > capacity_ || (r & (kAlign - 1)) != 0)
      corrupt(r, "consumer position is inconsistent with producer position " + std::to_string(w));
    cached_read_ = r;
    return capacity_ - (w - r) >= bytes;
  }

  uint64_t load_write(uint64_t r) {
    const uint64_t w = control_->write.pos.load(std::memory_order_acquire);
    if (w - r > capacity_ || (w & (kAlign - 1)) != 0)
      corrupt(r, "producer position " + std::to_string(w) + " is inconsistent with consumer position");
    return w;
  }

  void release_to(uint64_t r) {
    control_->read.pos.store(r, std::memory_order_release);
    EventCount(&control_->space_ready, &presence_).notify();
  }

  bool peer_alive() { return peer_ == nullptr || peer_->alive(); }

  void expect_role(RingRole role, const char* op) const {
    if (role_ != role)
      throw TransportError(name_ + ": cannot " + op + " on the " +
                           (role_ == RingRole::kProducer ? "producing" : "consuming") +
                           " side; this ring is single-producer single-consumer, use the other side's handle");
  }

  [[noreturn]] void corrupt(uint64_t position, const std::string& what) const {
    throw CorruptSegment(name_ + " is corrupt at position " + std::to_string(position) + ": " + what +
                         "; the peer wrote inconsistent data, drop this connection");
  }

  SpscControl* control_ = nullptr;
  uint8_t* data_ = nullptr;
  uint64_t capacity_ = 0;
  uint64_t mask_ = 0;
  RingRole role_ = RingRole::kProducer;
  std::string name_;
  const WaitPolicy* policy_ = nullptr;
  PeerProbe* peer_ = nullptr;
  Presence presence_;           // this side's (cpu_presence.h)
  uint64_t cached_read_ = 0;   // producer's copy of the consumer's position
  uint64_t cached_write_ = 0;  // consumer's copy of the producer's position
  uint64_t pending_span_ = 0;  // reserved by begin(), published by commit()
  uint32_t pending_size_ = 0;
};

}  // namespace tally::transport
