// RecordRing and ByteArena behaviour within one process: a server handle (create)
// and a client handle (open) on the same segment, so each ring has its real
// producer and consumer objects.
#include <atomic>
#include <cstring>
#include <deque>
#include <random>
#include <thread>
#include <vector>

#include "tally/segment.h"
#include "test_transport_util.h"

using namespace tally::transport;

namespace {

struct Pair {
  std::unique_ptr<Segment> server;
  std::unique_ptr<Segment> client;
  explicit Pair(SegmentSizes sizes, WaitPolicy policy = {}) {
    const std::string name = tally_test::unique_segment_name("ring");
    server = Segment::create(name, sizes, policy);
    client = Segment::open(name, policy);
    server->unlink();
  }
};

SegmentSizes small_sizes(uint64_t ring_bytes) {
  SegmentSizes s;
  s.request_bytes = ring_bytes;
  s.completion_bytes = ring_bytes;
  s.upload_bytes = 4096;
  s.download_bytes = 4096;
  return s;
}

std::vector<uint8_t> pattern(uint64_t seq, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seq * 131 + i * 7);
  return v;
}

bool pop_one(RecordRing& ring, RecordView* out, std::vector<uint8_t>* payload) {
  if (!ring.try_peek(out)) return false;
  payload->assign(out->payload, out->payload + out->size);
  ring.consume(*out);
  return true;
}

void round_trip_values() {
  Pair p(small_sizes(4096));
  RecordRing& tx = p.client->request_ring();
  RecordRing& rx = p.server->request_ring();
  const auto data = pattern(7, 13);
  CHECK(tx.try_push(42, 0xfeedbeefcafe, data.data(), data.size()));
  CHECK(tx.try_push(43, 1, nullptr, 0));
  CHECK_EQ(tx.used(), uint64_t{16 + 16 + 16});  // 13 bytes pad to 16
  RecordView v;
  std::vector<uint8_t> got;
  CHECK(pop_one(rx, &v, &got));
  CHECK_EQ(v.kind, 42u);
  CHECK_EQ(v.tag, uint64_t{0xfeedbeefcafe});
  CHECK(got == data);
  CHECK(pop_one(rx, &v, &got));
  CHECK_EQ(v.kind, 43u);
  CHECK_EQ(v.size, 0u);
  CHECK(!rx.try_peek(&v));
  CHECK_EQ(rx.used(), uint64_t{0});
}

// Many records of varying sizes through a 256-byte ring: wraps every few records,
// with padding records and bare 8-byte tails.
void wrap_around_with_padding() {
  Pair p(small_sizes(256));
  RecordRing& tx = p.client->request_ring();
  RecordRing& rx = p.server->request_ring();
  uint64_t pushed = 0, popped = 0;
  RecordView v;
  std::vector<uint8_t> got;
  for (int round = 0; round < 20000; ++round) {
    const size_t n = (round * 37) % 120;
    const auto data = pattern(pushed, n);
    while (!tx.try_push(1000 + (pushed % 7), pushed, data.data(), n)) {
      CHECK(pop_one(rx, &v, &got));
      CHECK_EQ(v.tag, popped);
      CHECK(got == pattern(popped, got.size()));
      CHECK_EQ(v.kind, static_cast<uint32_t>(1000 + popped % 7));
      ++popped;
    }
    ++pushed;
  }
  while (pop_one(rx, &v, &got)) {
    CHECK_EQ(v.tag, popped);
    ++popped;
  }
  CHECK_EQ(popped, pushed);
  const uint64_t positions = p.server->request_ring().used();
  CHECK_EQ(positions, uint64_t{0});
}

// A 64-byte ring: a 56-byte record leaves an 8-byte tail, too short for a header.
void eight_byte_tail_is_skipped() {
  Pair p(small_sizes(64));
  RecordRing& tx = p.client->request_ring();
  RecordRing& rx = p.server->request_ring();
  const auto a = pattern(1, 40);  // span 56
  RecordView v;
  std::vector<uint8_t> got;
  CHECK(tx.try_push(5, 1, a.data(), a.size()));
  CHECK(pop_one(rx, &v, &got));
  CHECK(tx.try_push(6, 2, nullptr, 0));  // must skip 8 bytes and start at 0
  CHECK(pop_one(rx, &v, &got));
  CHECK_EQ(v.kind, 6u);
  CHECK_EQ(v.tag, uint64_t{2});
  CHECK_EQ(v.position, uint64_t{64});
}

void too_large_is_rejected() {
  Pair p(small_sizes(256));
  RecordRing& tx = p.client->request_ring();
  std::vector<uint8_t> big(256 - 16 + 1);
  CHECK_THROWS(RecordTooLarge, "can never fit", tx.try_push(1, 1, big.data(), big.size()));
  CHECK_THROWS(RecordTooLarge, "ring capacity 256", tx.push(1, 1, big.data(), big.size(), Deadline::never()));
  CHECK(tx.try_push(1, 1, big.data(), big.size() - 1));  // exactly the whole ring
  CHECK_EQ(tx.used(), uint64_t{256});
  CHECK_THROWS(RecordTooLarge, "upload arena", p.client->upload().try_reserve(4097, nullptr));
}

void full_ring_times_out() {
  Pair p(small_sizes(256));
  RecordRing& tx = p.client->request_ring();
  int n = 0;
  while (tx.try_push(1, n, nullptr, 0)) ++n;
  CHECK_EQ(n, 16);
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(tx.push(1, 99, nullptr, 0, Deadline::after_seconds(0.05)) == WaitStatus::kTimedOut);
  const double waited = tally_test::seconds_since(t0);
  CHECK(waited >= 0.05 && waited < 1.0);
  RecordView v;
  CHECK(p.server->request_ring().peek(&v, Deadline::after_seconds(0.01)) == WaitStatus::kReady);
}

void empty_ring_times_out() {
  Pair p(small_sizes(256));
  RecordView v;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(p.server->request_ring().peek(&v, Deadline::after_seconds(0.05)) == WaitStatus::kTimedOut);
  CHECK(tally_test::seconds_since(t0) >= 0.05);
  CHECK(p.server->request_ring().peek(&v, Deadline::now()) == WaitStatus::kTimedOut);
}

// The producer blocks on a full ring and resumes as the consumer drains it.
void back_pressure_between_threads() {
  WaitPolicy policy;
  policy.spin_ns = 2'000;  // make the threads actually sleep on the futex
  Pair p(small_sizes(512), policy);
  const uint64_t total = 200'000;
  std::thread producer([&] {
    RecordRing& tx = p.client->request_ring();
    for (uint64_t i = 0; i < total; ++i) {
      const auto data = pattern(i, i % 50);
      if (tx.push(7, i, data.data(), data.size(), Deadline::never()) != WaitStatus::kReady) std::abort();
    }
  });
  RecordRing& rx = p.server->request_ring();
  RecordView v;
  std::vector<uint8_t> got;
  for (uint64_t i = 0; i < total; ++i) {
    if (i % 20000 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));  // let it fill up
    if (rx.peek(&v, Deadline::after_seconds(10)) != WaitStatus::kReady) tally_test::fail(__FILE__, __LINE__, "peek timed out");
    if (v.tag != i || v.size != i % 50 || (v.size && std::memcmp(v.payload, pattern(i, v.size).data(), v.size) != 0))
      tally_test::fail(__FILE__, __LINE__, "record " + std::to_string(i) + " damaged");
    rx.consume(v);
  }
  producer.join();
  CHECK_EQ(rx.used(), uint64_t{0});
}

void corrupt_record_is_detected() {
  Pair p(small_sizes(256));
  RecordRing& tx = p.client->request_ring();
  CHECK(tx.try_push(1, 1, "abcd", 4));
  // Overwrite the header's size with more than the ring holds.
  uint8_t* data = p.server->base() + p.server->layout().request.data_offset;
  const uint32_t huge = 100000;
  std::memcpy(data + 4, &huge, 4);
  RecordView v;
  CHECK_THROWS(CorruptSegment, "crosses the ring's end", p.server->request_ring().try_peek(&v));
  const uint32_t unpublished = 100;  // fits the ring, but only 20 bytes were published
  std::memcpy(data + 4, &unpublished, 4);
  CHECK_THROWS(CorruptSegment, "extends past the published data", p.server->request_ring().try_peek(&v));
  const uint32_t honest = 4;
  std::memcpy(data + 4, &honest, 4);
  CHECK(p.server->request_ring().try_peek(&v));
  CHECK_EQ(std::memcmp(v.payload, "abcd", 4), 0);
}

void corrupt_index_is_detected() {
  Pair p(small_sizes(256));
  auto* control = reinterpret_cast<SpscControl*>(p.server->base() + p.server->layout().request.control_offset);
  control->write.pos.store(1024);  // producer far ahead of what the ring holds
  RecordView v;
  CHECK_THROWS(CorruptSegment, "inconsistent", p.server->request_ring().try_peek(&v));
  control->write.pos.store(0);
  std::vector<uint8_t> fill(200);
  RecordRing& tx = p.client->request_ring();
  CHECK(tx.try_push(1, 1, fill.data(), 200));
  control->read.pos.store(control->write.pos.load() + 64);  // consumer ahead of producer
  CHECK_THROWS(CorruptSegment, "inconsistent", tx.try_push(1, 1, fill.data(), 200));
}

void wrong_side_is_refused() {
  Pair p(small_sizes(256));
  CHECK_THROWS(TransportError, "consuming side", p.server->request_ring().try_push(1, 1, nullptr, 0));
  RecordView v;
  CHECK_THROWS(TransportError, "producing side", p.client->request_ring().try_peek(&v));
  CHECK_THROWS(TransportError, "reserved for ring padding", [&] {
    p.client->request_ring().try_begin(0);
    p.client->request_ring().commit(RecordRing::kPaddingKind, 0);
  }());
  uint64_t off;
  CHECK_THROWS(TransportError, "producing side", p.server->upload().try_reserve(64, &off));
  CHECK_THROWS(TransportError, "consuming side", p.client->upload().release(0, 64));
  CHECK(p.client->side() == Side::kClient);
  CHECK(p.server->side() == Side::kServer);
}

void arena_reserve_release_and_skip() {
  Pair p(small_sizes(256));
  ByteArena& tx = p.client->upload();
  ByteArena& rx = p.server->upload();
  CHECK_EQ(tx.capacity(), uint64_t{4096});
  uint64_t a, b, c, d;
  CHECK(tx.try_reserve(1000, &a));  // 1024
  CHECK(tx.try_reserve(2000, &b));  // 2048 -> 3072
  CHECK_EQ(a, uint64_t{0});
  CHECK_EQ(b, uint64_t{1024});
  CHECK(!tx.try_reserve(1500, &c));  // tail has 1024, front is still in use
  std::memset(tx.data() + a, 0xab, 1000);
  CHECK_EQ(rx.data()[a + 999], uint8_t{0xab});
  rx.release(a, 1000);
  // 1024 free at the end, 1024 at the front: a 1500-byte chunk still cannot fit.
  CHECK(!tx.try_reserve(1500, &c));
  CHECK(tx.try_reserve(1000, &c));  // the skip was published above, so this lands at 0
  CHECK_EQ(c, uint64_t{0});
  CHECK_THROWS(CorruptSegment, "out of order", rx.release(64, 100));
  rx.release(b, 2000);
  rx.release(c, 1000);  // at offset 0: the consumer infers the skipped tail
  CHECK_EQ(rx.used(), uint64_t{0});
  // The whole arena: skips the tail at 1024 although the consumer has not moved
  // past it yet (it has released everything before it).
  CHECK(tx.try_reserve(4096, &d));
  CHECK_EQ(d, uint64_t{0});
  rx.release(d, 4096);
  CHECK_EQ(rx.used(), uint64_t{0});
}

void arena_release_past_reserved_is_refused() {
  Pair p(small_sizes(256));
  uint64_t a;
  CHECK(p.client->upload().try_reserve(128, &a));
  CHECK_THROWS(CorruptSegment, "goes past what the producer reserved", p.server->upload().release(a, 256));
  p.server->upload().release(a, 128);
}

void arena_blocks_until_released() {
  WaitPolicy policy;
  policy.spin_ns = 1'000;
  Pair p(small_sizes(256), policy);
  uint64_t a, b;
  CHECK(p.client->upload().try_reserve(4096, &a));
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    p.server->upload().release(a, 4096);
  });
  const auto t0 = std::chrono::steady_clock::now();
  CHECK(p.client->upload().reserve(64, Deadline::after_seconds(5), &b) == WaitStatus::kReady);
  CHECK(tally_test::seconds_since(t0) >= 0.02);
  releaser.join();
  CHECK(p.client->upload().reserve(4096, Deadline::after_seconds(0.02), &b) == WaitStatus::kTimedOut);
}

// Random reserve/release interleavings with chunks up to 30% of the arena: a new
// chunk never overlaps one the consumer still holds, and nothing deadlocks.
void arena_random_interleaving_never_overlaps() {
  SegmentSizes sizes = small_sizes(256);
  sizes.upload_bytes = 1 << 20;
  Pair p(sizes);
  ByteArena& tx = p.client->upload();
  ByteArena& rx = p.server->upload();
  std::mt19937_64 rng(12345);
  struct Live {
    uint64_t offset, n;
  };
  std::deque<Live> live;
  uint64_t reserved = 0, refused = 0;
  for (int step = 0; step < 400000; ++step) {
    if (rng() % 2) {
      const uint64_t n = 1 + rng() % (300 * 1024);
      uint64_t off;
      if (!tx.try_reserve(n, &off)) {
        ++refused;
        continue;
      }
      for (const Live& c : live)
        if (off < c.offset + c.n && c.offset < off + n)
          tally_test::fail(__FILE__, __LINE__, "chunk at " + std::to_string(off) + " overlaps a live chunk at " + std::to_string(c.offset));
      if (off + n > tx.capacity()) tally_test::fail(__FILE__, __LINE__, "chunk crosses the arena's end");
      live.push_back({off, n});
      ++reserved;
    } else if (!live.empty()) {
      rx.release(live.front().offset, live.front().n);
      live.pop_front();
    }
  }
  while (!live.empty()) {
    rx.release(live.front().offset, live.front().n);
    live.pop_front();
  }
  CHECK(reserved > 50000);
  CHECK(refused > 1000);
  CHECK_EQ(rx.used() <= rx.capacity(), true);
  uint64_t off;
  CHECK(tx.try_reserve(tx.capacity(), &off));  // everything released: the whole arena fits
}

}  // namespace

int main() {
  tally_test::run_case("round_trip_values", round_trip_values);
  tally_test::run_case("wrap_around_with_padding", wrap_around_with_padding);
  tally_test::run_case("eight_byte_tail_is_skipped", eight_byte_tail_is_skipped);
  tally_test::run_case("too_large_is_rejected", too_large_is_rejected);
  tally_test::run_case("full_ring_times_out", full_ring_times_out);
  tally_test::run_case("empty_ring_times_out", empty_ring_times_out);
  tally_test::run_case("back_pressure_between_threads", back_pressure_between_threads);
  tally_test::run_case("corrupt_record_is_detected", corrupt_record_is_detected);
  tally_test::run_case("corrupt_index_is_detected", corrupt_index_is_detected);
  tally_test::run_case("wrong_side_is_refused", wrong_side_is_refused);
  tally_test::run_case("arena_reserve_release_and_skip", arena_reserve_release_and_skip);
  tally_test::run_case("arena_release_past_reserved_is_refused", arena_release_past_reserved_is_refused);
  tally_test::run_case("arena_blocks_until_released", arena_blocks_until_released);
  tally_test::run_case("arena_random_interleaving_never_overlaps", arena_random_interleaving_never_overlaps);
  return tally_test::finish("test_transport_ring");
}
