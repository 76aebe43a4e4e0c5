// The preemption board (csrc/src/data_plane/preempt_board.h): what a high-priority
// plane's fire() writes, once per pinned PTB launch, what unpin() reports, and a
// board hammered from two threads (Python's pins and unpins against planes' fires)
// never losing or doubling a preemption.
#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "data_plane/preempt_board.h"
#include "test_transport_util.h"

using tally::data_plane::DeviceIssuer;
using tally::data_plane::FunctionEntry;
using tally::data_plane::LaunchShape;
using tally::data_plane::PreemptBoard;

namespace {

// Records the copies a board asks for; declines while `declining`.
class RecordingIssuer final : public DeviceIssuer {
 public:
  struct Copy {
    uint64_t stream, dst;
    uint32_t value;
  };
  bool declining = false;
  std::vector<Copy> copies;
  std::mutex mu;

  bool launch(uint64_t, const FunctionEntry&, const LaunchShape&, const uint8_t*, uint32_t, uint32_t) override {
    return false;
  }
  bool memset(uint64_t, uint64_t, uint32_t, uint32_t, uint64_t) override { return false; }
  bool copy_dtod(uint64_t, uint64_t, uint64_t, uint64_t) override { return false; }
  bool copy_htod(uint64_t stream, uint64_t dst, const uint8_t* src, uint64_t nbytes) override {
    if (declining || nbytes != 4) return false;
    uint32_t value;
    std::memcpy(&value, src, 4);
    std::lock_guard<std::mutex> lock(mu);
    copies.push_back({stream, dst, value});
    return true;
  }
  bool stream_quiet(uint64_t) override { return true; }
  bool completes_at_issue() const override { return false; }
  bool carries_sm_cap() const override { return true; }
  const char* name() const override { return "recording"; }
};

void fires_each_pinned_launch_once() {
  PreemptBoard board;
  RecordingIssuer issuer;
  board.fire(issuer);                                   // nothing pinned: nothing written
  CHECK_EQ(issuer.copies.size(), size_t{0});
  board.pin(0x1000, 7);
  board.pin(0x2000, 7);
  board.fire(issuer);
  CHECK_EQ(issuer.copies.size(), size_t{2});
  for (const auto& c : issuer.copies) {
    CHECK_EQ(c.stream, uint64_t{7});
    CHECK_EQ(c.value, uint32_t{1});
    CHECK(c.dst == 0x1000 || c.dst == 0x2000);
  }
  board.fire(issuer);                                   // already set: not again
  CHECK_EQ(issuer.copies.size(), size_t{2});
  CHECK_EQ(board.fires(), uint64_t{2});
  CHECK(board.unpin(0x1000));                           // the plane set it
  CHECK(!board.unpin(0x1000));                          // gone
  CHECK(!board.unpin(0x3000));                          // never pinned
  board.pin(0x2000, 9);                                 // the next launch on that lane: armed again
  board.fire(issuer);
  CHECK_EQ(issuer.copies.size(), size_t{3});
  CHECK_EQ(issuer.copies.back().stream, uint64_t{9});
  board.pin(0x4000, 7);
  CHECK(!board.unpin(0x4000));                          // taken off before any fire: not set
}

void a_declined_write_is_tried_again() {
  PreemptBoard board;
  RecordingIssuer issuer;
  board.pin(0x1000, 1);
  issuer.declining = true;
  board.fire(issuer);
  CHECK_EQ(issuer.copies.size(), size_t{0});
  CHECK_EQ(board.fires(), uint64_t{0});
  issuer.declining = false;
  board.fire(issuer);
  CHECK_EQ(issuer.copies.size(), size_t{1});
  CHECK(board.unpin(0x1000));
}

void pins_and_fires_from_two_threads_agree() {
  // One thread pins a launch, then takes it off; another fires all the while. Every
  // pin must end with exactly as many writes for it as unpin() reports (0 or 1).
  PreemptBoard board;
  RecordingIssuer issuer;
  std::atomic<bool> done{false};
  std::thread plane([&] {
    while (!done.load()) board.fire(issuer);
  });
  size_t reported = 0;
  const int rounds = 20000;
  for (int i = 0; i < rounds; ++i) {
    board.pin(0x1000 + 8 * (i % 4), 3);
    if (i % 3 == 0) std::this_thread::yield();
    reported += board.unpin(0x1000 + 8 * (i % 4)) ? 1 : 0;
  }
  done.store(true);
  plane.join();
  CHECK_EQ(issuer.copies.size(), reported);
  CHECK_EQ(board.fires(), uint64_t{reported});
  std::printf("  %zu of %d pins were fired before they were taken off\n", reported, rounds);
}

}  // namespace

int main() {
  tally_test::run_case("fires_each_pinned_launch_once", fires_each_pinned_launch_once);
  tally_test::run_case("a_declined_write_is_tried_again", a_declined_write_is_tried_again);
  tally_test::run_case("pins_and_fires_from_two_threads_agree", pins_and_fires_from_two_threads_agree);
  return tally_test::finish("test_preempt_board");
}
