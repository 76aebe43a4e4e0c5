// The floor under any wake-up after idle on this machine, measured the way
// `launch_rate --mode wake` measures tally's: the waker computes (spins) for the
// gap, wakes a sleeper through a futex and spins until the sleeper reports. No
// server that sleeps between requests can answer faster than one such wake-up.
//
// Variants: the sleeper is a thread of this process (a private futex) or a forked
// process (a shared futex in a shared mapping, as the job and tally-server use);
// and a chain of one or two sleepers (the waker wakes the first, which wakes the
// second): what a path that wakes two threads in turn costs.
//
// Two times per wake-up: until the last sleeper runs (the wake-up itself), and
// until the waker sees it did (the round trip: when the sleeper ran on the
// waker's CPU, the waker resumes only once the sleeper sleeps again, as a job
// resumes only once the server it woke has answered and slept).
#pragma once
#include <linux/futex.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <new>
#include <thread>
#include <vector>

namespace futex_floor {

struct Result {
  double median_ns;         // until the last sleeper runs
  double round_trip_ns;     // until the waker sees it ran
  double same_cpu_share;    // wake-ups whose last sleeper ran on the waker's CPU
};

namespace detail {

constexpr int kMaxChain = 2;
constexpr long kMaxCount = 100000;

inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Shared {
  std::atomic<uint32_t> word[kMaxChain];
  std::atomic<uint32_t> done;
  std::atomic<int64_t> sent_ns;
  std::atomic<int> waker_cpu;
  int64_t took_ns[kMaxCount];
  int64_t seen_ns[kMaxCount];
  int same_cpu[kMaxCount];
};

inline void sleep_on(std::atomic<uint32_t>* word, int op) {
  while (word->load() == 0) syscall(SYS_futex, word, op, 0, nullptr, nullptr, 0);
  word->store(0);
}

inline void wake(std::atomic<uint32_t>* word, int op) {
  word->store(1);
  syscall(SYS_futex, word, op, 1, nullptr, nullptr, 0);
}

}  // namespace detail

// `count` wake-ups, each after the waker spun `gap_ns`.
inline Result measure(long count, int64_t gap_ns, bool processes, int chain) {
  using namespace detail;
  count = std::min(count, kMaxCount);
  chain = std::clamp(chain, 1, kMaxChain);
  void* mem = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE,
                   (processes ? MAP_SHARED : MAP_PRIVATE) | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED) return {0, 0, 0};
  auto* s = new (mem) Shared();
  const int op = processes ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE;
  const int wake_op = processes ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE;
  auto sleeper = [=](int k) {
    for (long i = 0; i < count; ++i) {
      sleep_on(&s->word[k], op);
      if (k + 1 < chain) {
        wake(&s->word[k + 1], wake_op);
        continue;
      }
      s->took_ns[i] = now_ns() - s->sent_ns.load();
      s->same_cpu[i] = sched_getcpu() == s->waker_cpu.load();
      s->done.store(1);
    }
  };
  std::vector<std::thread> threads;
  std::vector<pid_t> children;
  for (int k = 0; k < chain; ++k) {
    if (!processes) {
      threads.emplace_back(sleeper, k);
      continue;
    }
    const pid_t pid = fork();
    if (pid == 0) {
      sleeper(k);
      _exit(0);
    }
    children.push_back(pid);
  }
  for (long i = 0; i < count; ++i) {
    const int64_t until = now_ns() + gap_ns;
    while (now_ns() < until) {
    }
    s->done.store(0);
    s->waker_cpu.store(sched_getcpu());
    s->sent_ns.store(now_ns());
    wake(&s->word[0], wake_op);
    while (s->done.load() == 0) {
    }
    s->seen_ns[i] = now_ns() - s->sent_ns.load();
  }
  for (auto& t : threads) t.join();
  for (pid_t pid : children) waitpid(pid, nullptr, 0);
  auto median = [count](const int64_t* xs) {
    std::vector<int64_t> v(xs, xs + count);
    std::sort(v.begin(), v.end());
    return count % 2 ? v[count / 2] : (v[count / 2 - 1] + v[count / 2]) / 2.0;
  };
  long same = 0;
  for (long i = 0; i < count; ++i) same += s->same_cpu[i];
  const Result result{median(s->took_ns), median(s->seen_ns), static_cast<double>(same) / count};
  munmap(mem, sizeof(Shared));
  return result;
}

}  // namespace futex_floor
