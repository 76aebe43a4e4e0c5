// Where each side of a segment runs, so that a waiter spins only while its peer
// could be making progress.
//
// A thread waiting for its peer spins first (WaitPolicy::spin_ns): from another
// CPU, the peer's answer arrives within a microsecond. But a spinner sitting on
// the CPU its peer last ran on is keeping the peer off that CPU. That is the
// usual case after a futex wake-up: the kernel puts the woken thread on the
// waker's CPU and lets it preempt the waker, which then sits inside its wake
// syscall. Measured on the shared 2-vCPU VM (bench/results/launch-2026-11-28.md):
// the session thread, woken by a job's cuCtxSynchronize, answered in 5 us and
// then spun its whole 20 us on the job's CPU before the job could read the
// answer; every synchronization after idle, and every round trip while the two
// shared a CPU, cost those 20 us (1 ms on the cuda backend's spin).
//
// So each side says where it runs, and a waiter whose peer was last seen on the
// waiter's own CPU sleeps at once instead of spinning (its peer then runs, and
// wakes it through the futex when it publishes).
//
// The kernel does not always let the woken thread preempt its waker: then it
// waits, queued behind the waker on the waker's CPU, and has not said where it
// runs. Seen in 21 of 200 synchronizations after idle on the loaded VM (the job
// spun its whole 100 us for an answer the server could not give before the job
// slept), and in nearly every back-to-back synchronization of a job and session
// thread sharing a CPU. A waker therefore marks its peer's slot "woken, not seen
// yet", and a waiter that finds that mark yields its CPU once before it spins.
// It does not give up spinning for it: on an idle VM the peer is woken on the
// other, halted vCPU, which takes ~40 us to run it, and a waiter that slept
// after a 10 us grace then needed as long again to be woken for the answer
// (62 us instead of 44; launch-2026-11-28.md).
//
// Each side has one slot: 1 + the CPU its thread was last seen on in the
// transport (starting to wait, waking from a futex sleep, waking the peer), 0
// while it sleeps on a futex (or never said), kWokenSlot once the peer woke it
// and until it runs. A slot is a hint, never a condition of correctness: a stale
// one costs a spin or a wake-up, not a lost record. Several threads of one side
// share its slot; the last writer wins.
//
// A side's slot lives in the WaitLine of the ring it consumes (futex_wait.h),
// the line it writes anyway when it sleeps and wakes, and which the peer reads
// anyway when it notifies; the fast path (records flowing, nobody waiting)
// touches no extra cache line.
#pragma once
#include <sched.h>

#include <atomic>
#include <cstdint>

namespace tally::transport {

// A slot's value while its side, woken by the peer, has not run yet.
constexpr uint32_t kWokenSlot = UINT32_MAX;

// 1 + the CPU the calling thread runs on now; 0 when the kernel cannot say.
inline uint32_t current_cpu_slot() {
  const int cpu = sched_getcpu();
  return cpu < 0 ? 0 : static_cast<uint32_t>(cpu) + 1;
}

// One side's view: its own slot (written) and its peer's (read). Empty (both
// null) for rings outside a segment: then waits spin as WaitPolicy says.
struct Presence {
  std::atomic<uint32_t>* mine = nullptr;
  std::atomic<uint32_t>* peer = nullptr;

  // This side runs on `cpu_slot` now. Written only when it changed, so the line
  // stays shared between the two sides while nothing moves.
  void here(uint32_t cpu_slot) const {
    if (mine != nullptr && mine->load(std::memory_order_relaxed) != cpu_slot)
      mine->store(cpu_slot, std::memory_order_relaxed);
  }
  void asleep() const { here(0); }

  // We are waking the sleeping peer: it has not run since (unless it says otherwise).
  void woke_peer() const {
    uint32_t asleep = 0;
    if (peer != nullptr) peer->compare_exchange_strong(asleep, kWokenSlot, std::memory_order_relaxed);
  }

  // The peer was last seen on the CPU `cpu_slot` names, so it is not running
  // there now: this thread is.
  bool peer_on(uint32_t cpu_slot) const {
    return peer != nullptr && cpu_slot != 0 && peer->load(std::memory_order_relaxed) == cpu_slot;
  }
  // The peer was woken and has not run since.
  bool peer_unseen() const { return peer != nullptr && peer->load(std::memory_order_relaxed) == kWokenSlot; }
};

}  // namespace tally::transport
