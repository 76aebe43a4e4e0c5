// Waiting across processes without burning a core: spin briefly, then sleep on a
// futex in shared memory, guarded by an eventcount so the notifying side makes a
// syscall only when somebody is actually asleep.
//
// Protocol (Dekker-style; both sides use a seq_cst fence between their store and
// their load, so at least one of them sees the other's store):
//   waiter:   key = epoch; sleeping = 1; fence; if (ready) {sleeping = 0; done}
//             futex_wait(epoch, key); sleeping = 0
//   notifier: publish (release store); fence;
//             if (sleeping && exchange(sleeping, 0)) {++epoch; futex_wake}
// If the notifier missed the sleeper, the sleeper's re-check sees the published
// data; if the sleeper missed the data, the notifier sees the sleeper and bumps the
// epoch, so futex_wait either returns at once (epoch != key) or is woken. The
// notifier clears the flag, so a burst of notifications while the sleeper is
// still waking up costs one syscall, not one each. Each line has at most one
// sleeper (the single consumer or the single producer of an SPSC ring).
// The futex is the shared (not FUTEX_PRIVATE) kind because waiter and notifier
// live in different processes.
// A waiter spins only while its peer may be running elsewhere: it sleeps at once
// when the peer was last seen on the waiter's own CPU (cpu_presence.h).
#pragma once
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdint>
#include <ctime>

#include "tally/cpu_presence.h"
#include "tally/transport_errors.h"

namespace tally::transport {

static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free,
              "futex words must be plain lock-free 32-bit atomics");

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

inline int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// An absolute point on the monotonic clock; `never()` for unbounded waits.
class Deadline {
 public:
  static Deadline never() { return Deadline(INT64_MAX); }
  static Deadline now() { return Deadline(monotonic_ns()); }
  // Negative or NaN seconds mean "do not wait"; +inf means never.
  static Deadline after_seconds(double seconds) {
    if (!(seconds > 0)) return now();
    if (seconds > 1e9) return never();
    return Deadline(monotonic_ns() + static_cast<int64_t>(seconds * 1e9));
  }
  static Deadline after_ns(int64_t ns) { return Deadline(monotonic_ns() + std::max<int64_t>(ns, 0)); }

  bool is_never() const { return at_ns_ == INT64_MAX; }
  bool passed(int64_t now_ns) const { return now_ns >= at_ns_; }
  int64_t remaining_ns(int64_t now_ns) const { return is_never() ? INT64_MAX : std::max<int64_t>(at_ns_ - now_ns, 0); }

 private:
  explicit Deadline(int64_t at_ns) : at_ns_(at_ns) {}
  int64_t at_ns_;
};

// How long a blocked call spins before sleeping, and how often a sleeper wakes to
// check that its peer still exists (a dead peer never notifies). The first check
// comes after a short sleep rather than before it: the check is a syscall, and
// when the peer shares our CPU it would sit between our answer and the peer's
// next step. A peer already dead when the wait began is noticed within
// first_peer_check_ns.
struct WaitPolicy {
  int64_t spin_ns = 20'000;
  int64_t peer_check_ns = 50'000'000;
  int64_t first_peer_check_ns = 1'000'000;
};

// Shared-memory part of an eventcount, on its own cache line: written only when
// somebody goes to sleep or is woken, so the fast path only reads it.
struct alignas(64) WaitLine {
  std::atomic<uint32_t> epoch;     // futex word; bumped by the notifier
  std::atomic<uint32_t> sleeping;  // 1 while the waiter may be in futex_wait
  // On a ring's data_ready line: the presence slot of the side that consumes the
  // ring (cpu_presence.h); unused (0) elsewhere.
  std::atomic<uint32_t> present_cpu;
  uint8_t reserved[52];
};
static_assert(sizeof(WaitLine) == 64);

// Returns 0, or -1 with errno (ETIMEDOUT, EAGAIN, EINTR are all "re-check").
inline int futex_wait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns) {
  timespec ts{static_cast<time_t>(timeout_ns / 1'000'000'000), static_cast<long>(timeout_ns % 1'000'000'000)};
  return static_cast<int>(
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0));
}

inline void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

// Tells a waiter whether the other side can still make progress. Checked only on
// the slow path (while sleeping: first_peer_check_ns into the wait, then every
// peer_check_ns, and when woken without data).
class PeerProbe {
 public:
  virtual ~PeerProbe() = default;
  virtual bool alive() = 0;
};

class EventCount {
 public:
  // `presence` (optional, must outlive this) is the calling side's (cpu_presence.h).
  explicit EventCount(WaitLine* line = nullptr, const Presence* presence = nullptr)
      : line_(line), presence_(presence != nullptr ? *presence : Presence{}) {}

  // Call after publishing (the release store of an index). No syscall unless a
  // waiter announced itself.
  void notify() const {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (line_->sleeping.load(std::memory_order_relaxed) != 0 && line_->sleeping.exchange(0, std::memory_order_acq_rel) != 0) {
      // The woken side will likely run on this CPU, preempting us: say we are
      // here, so that it does not spin on our CPU once it has answered.
      presence_.here(current_cpu_slot());
      presence_.woke_peer();
      wake_now();
    }
  }

  // Unconditional wake, e.g. after setting a closed flag.
  void wake_now() const {
    line_->epoch.fetch_add(1, std::memory_order_release);
    futex_wake_all(&line_->epoch);
  }

  // Blocks until ready() holds, the deadline passes or peer_alive() turns false.
  // ready() is checked once more after the peer is found gone, so a consumer
  // drains what a dead producer left behind. ready() may throw (e.g. on a corrupt
  // index); the sleeping flag is cleared either way.
  template <class Ready, class PeerAlive>
  WaitStatus wait(Ready&& ready, PeerAlive&& peer_alive, Deadline deadline, const WaitPolicy& policy) const {
    if (ready()) return WaitStatus::kReady;
    int64_t now = monotonic_ns();
    if (deadline.passed(now)) return WaitStatus::kTimedOut;

    const int64_t spin_end = std::min(now + policy.spin_ns, deadline.is_never() ? INT64_MAX : now + deadline.remaining_ns(now));
    uint32_t cpu = current_cpu_slot();
    presence_.here(cpu);
    // A peer we just woke that has not run yet may be queued behind us on this
    // CPU: let it run first (where it was woken on another CPU, or nothing else
    // waits for this one, this returns at once).
    if (presence_.peer_unseen()) {
      sched_yield();
      cpu = current_cpu_slot();
      presence_.here(cpu);
    }
    // No spinning on the CPU the peer last ran on: the peer cannot run while we do.
    for (unsigned i = 1; !presence_.peer_on(cpu); ++i) {
      cpu_relax();
      if (ready()) return WaitStatus::kReady;
      if ((i & 31) == 0) {
        now = monotonic_ns();
        if (now >= spin_end) break;
        cpu = current_cpu_slot();   // we may have been moved, or the peer may have said where it is
        presence_.here(cpu);
      }
    }

    int64_t next_peer_check = monotonic_ns() + std::min(policy.first_peer_check_ns, policy.peer_check_ns);
    for (;;) {
      now = monotonic_ns();
      if (now >= next_peer_check) {
        if (!peer_alive()) return ready() ? WaitStatus::kReady : WaitStatus::kPeerGone;
        next_peer_check = now + policy.peer_check_ns;
      }
      if (deadline.passed(now)) return ready() ? WaitStatus::kReady : WaitStatus::kTimedOut;

      const uint32_t key = line_->epoch.load(std::memory_order_acquire);
      SleeperAnnouncement announced(line_);
      std::atomic_thread_fence(std::memory_order_seq_cst);
      if (ready()) return WaitStatus::kReady;
      const int64_t slice = std::min(deadline.remaining_ns(now), std::max<int64_t>(next_peer_check - now, 1));
      presence_.asleep();
      const int woken = futex_wait(&line_->epoch, key, slice);
      presence_.here(current_cpu_slot());
      if (ready()) return WaitStatus::kReady;   // the usual wake-up: before any check
      // Woken without data: maybe the peer set its closed flag; look at once.
      if (woken == 0) next_peer_check = 0;
    }
  }

 private:
  // Clears `sleeping` on every way out, ready() throwing included.
  struct SleeperAnnouncement {
    explicit SleeperAnnouncement(WaitLine* line) : line_(line) { line_->sleeping.store(1, std::memory_order_seq_cst); }
    ~SleeperAnnouncement() { line_->sleeping.store(0, std::memory_order_relaxed); }
    SleeperAnnouncement(const SleeperAnnouncement&) = delete;
    SleeperAnnouncement& operator=(const SleeperAnnouncement&) = delete;
    WaitLine* line_;
  };

  WaitLine* line_;
  Presence presence_;
};

}  // namespace tally::transport
