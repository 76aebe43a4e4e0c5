// `tally-bench launch`'s job (tally/bench/launch.py runs it under tally-run):
// how fast a job can launch kernels and synchronize through tally, timed in the
// job. The kernel does nothing (it is launched with n = 0), so on the null
// backend what is timed is tally's forwarding alone.
//
//   launch_rate --mode launches --rounds R --batch B
//       R rounds (after one warm-up round) of B back-to-back launches, each
//       round ended by cudaDeviceSynchronize. Prints client_ns (the job's own
//       cost per launch: the batch's launch calls) and drain_ns (first launch
//       to the end of the round's synchronization, per launch: what the job
//       waits for the server to take them), medians over the rounds.
//   launch_rate --mode sync --count N
//       N synchronizations of an idle device, each timed: sync_ns (median), p99_ns.
//   launch_rate --mode wake --count N --gap-us G
//       N synchronizations, each after the job computed alone for G us (the
//       server's session thread has gone to sleep by then): wake_ns (median);
//       and, as the baselines of the same run (futex_floor.h), how long this
//       machine takes to wake, after the same gap, a thread of this process
//       sleeping on a futex (futex_wake_ns), a process (futex_wake_process_ns:
//       the least any sleeping server can take) and two processes in turn
//       (futex_wake_two_ns); the same until the waker sees the sleeper ran
//       (*_rtt_ns: the least a job can wait for an answer from a sleeping
//       server); and the share of wake-ups that ran on the waker's CPU
//       (*_same_cpu).
//   launch_rate --mode together --start-at T --rounds R --batch B
//       waits until CLOCK_MONOTONIC second T (so several jobs start at once),
//       then as `launches`; prints launches, start_s and end_s of the timed rounds.
#include <algorithm>
#include <thread>

#include "futex_floor.h"
#include "job_common.h"

__global__ void noop(int* out, int n, int start) {
  if (threadIdx.x < n) out[threadIdx.x] = start;   // n = 0: never
}

namespace {

double median(std::vector<double> xs) {
  std::sort(xs.begin(), xs.end());
  const size_t n = xs.size();
  return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

double percentile(std::vector<double> xs, double q) {
  std::sort(xs.begin(), xs.end());
  return xs[std::min(xs.size() - 1, size_t(q * xs.size()))];
}

void spin_for(double seconds) {
  const double until = job::now_s() + seconds;
  while (job::now_s() < until) {
  }
}

// One round of launches; returns (client s, drain s).
std::pair<double, double> round_of(int* out, long batch) {
  const double t0 = job::now_s();
  for (long i = 0; i < batch; ++i) noop<<<1, 1>>>(out, 0, int(i));
  const double t1 = job::now_s();
  JOB_CHECK(cudaGetLastError());
  JOB_CHECK(cudaDeviceSynchronize());
  return {t1 - t0, job::now_s() - t0};
}

void launches(int* out, long rounds, long batch, bool together, double start_at) {
  round_of(out, batch);   // warm-up: the kernel's first launches go through the server's Python
  if (together) {
    if (start_at - job::now_s() > 0.01) std::this_thread::sleep_for(std::chrono::duration<double>(start_at - job::now_s() - 0.01));
    while (job::now_s() < start_at) {
    }
  }
  std::vector<double> client, drain;
  const double start = job::now_s();
  for (long r = 0; r < rounds; ++r) {
    auto [c, d] = round_of(out, batch);
    client.push_back(c / batch * 1e9);
    drain.push_back(d / batch * 1e9);
  }
  const double end = job::now_s();
  std::printf("client_ns=%.1f drain_ns=%.1f rounds=%ld batch=%ld\n", median(client), median(drain), rounds, batch);
  if (together) std::printf("launches=%ld start_s=%.9f end_s=%.9f\n", rounds * batch, start, end);
}

void syncs(long count) {
  std::vector<double> t;
  for (long i = 0; i < count / 10 + 1; ++i) JOB_CHECK(cudaDeviceSynchronize());   // warm-up
  for (long i = 0; i < count; ++i) {
    const double t0 = job::now_s();
    JOB_CHECK(cudaDeviceSynchronize());
    t.push_back((job::now_s() - t0) * 1e9);
  }
  std::printf("sync_ns=%.1f p99_ns=%.1f count=%ld\n", median(t), percentile(t, 0.99), count);
}

void wakes(long count, double gap_us) {
  std::vector<double> t;
  JOB_CHECK(cudaDeviceSynchronize());
  for (long i = 0; i < count; ++i) {
    spin_for(gap_us * 1e-6);
    const double t0 = job::now_s();
    JOB_CHECK(cudaDeviceSynchronize());
    t.push_back((job::now_s() - t0) * 1e9);
  }
  std::printf("wake_ns=%.1f count=%ld gap_us=%.0f\n", median(t), count, gap_us);
  const int64_t gap_ns = static_cast<int64_t>(gap_us * 1e3);
  const struct {
    const char* key;
    bool processes;
    int chain;
  } floors[] = {{"futex_wake", false, 1}, {"futex_wake_process", true, 1}, {"futex_wake_two", true, 2}};
  for (const auto& f : floors) {
    const futex_floor::Result r = futex_floor::measure(count, gap_ns, f.processes, f.chain);
    std::printf("%s_ns=%.1f %s_rtt_ns=%.1f %s_same_cpu=%.2f\n", f.key, r.median_ns, f.key, r.round_trip_ns, f.key,
                r.same_cpu_share);
  }
}

}  // namespace

int main(int argc, char** argv) {
  job::program_name = "launch_rate";
  job::Flags flags(argc, argv, {"mode", "rounds", "batch", "count", "gap-us", "start-at"});
  const std::string mode = flags.str("mode", nullptr);
  int* out = nullptr;
  JOB_CHECK(cudaMalloc(&out, 64));
  if (mode == "launches" || mode == "together") {
    launches(out, flags.whole("rounds", 20, 1), flags.whole("batch", 2000, 1), mode == "together",
             flags.num("start-at", 0));
  } else if (mode == "sync") {
    syncs(flags.whole("count", 2000, 1));
  } else if (mode == "wake") {
    wakes(flags.whole("count", 200, 1), flags.num("gap-us", 1000));
  } else {
    std::fprintf(stderr, "launch_rate: --mode must be launches, sync, wake or together, got %s\n", mode.c_str());
    return 2;
  }
  JOB_CHECK(cudaFree(out));
  return 0;
}
