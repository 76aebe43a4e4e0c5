// Timing loops for bench/bench_client.py, run under tally-run:
//   launch_bench PTX ROUNDS BATCH SYNCS [GAP_US...]
// - async launch: BATCH cuLaunchKernel calls (a 3-parameter kernel) timed as a
//   batch, per round; the batch fits the request ring, so the time is the
//   client's own cost (the server drains concurrently). cuCtxSynchronize after
//   each round; from the first launch to the end of that synchronization is the
//   time the server took to take the batch (drain time per launch).
// - baseline: the same parameter packing into a local buffer through a plain
//   (non-inlined) function call.
// - sync round trip: SYNCS cuCtxSynchronize calls on an idle device, each timed.
// - ping: SYNCS tally_client_ping round trips (the server's cheapest handler).
// - sync after a gap: for each GAP_US, cuCtxSynchronize after the job computed
//   on its own for that long (the server may have gone to sleep meanwhile).
// Prints one line per measurement: name=median_ns plus the round count.
#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver_check.h"

int tally_client_ping(uint64_t value, uint64_t* echoed);

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int compare(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(double* xs, int n) {
  qsort(xs, n, sizeof *xs, compare);
  return n % 2 ? xs[n / 2] : (xs[n / 2 - 1] + xs[n / 2]) / 2;
}

// The baseline's stand-in for a launch: pack three parameters into a block.
__attribute__((noinline)) int pack_params(void** params, const size_t* sizes, char* out) {
  size_t at = 0;
  for (int i = 0; i < 3; ++i) {
    memcpy(out + at, params[i], sizes[i]);
    at += sizes[i];
  }
  return (int)at;
}

int main(int argc, char** argv) {
  if (argc < 5) return 2;
  const int rounds = atoi(argv[2]), batch = atoi(argv[3]), syncs = atoi(argv[4]);
  CUmodule mod;
  CUfunction fn;
  setup();
  char* ptx = read_file(argv[1], NULL);
  CHECK(cuModuleLoadData(&mod, ptx));
  CHECK(cuModuleGetFunction(&fn, mod, "iota"));
  CUdeviceptr out;
  CHECK(cuMemAlloc(&out, 4096));
  int n = 1, start = 0;
  void* params[] = {&out, &n, &start};
  const size_t sizes[] = {sizeof out, sizeof n, sizeof start};

  double* launch = malloc(sizeof(double) * rounds);
  double* plain = malloc(sizeof(double) * rounds);
  double* drain = malloc(sizeof(double) * rounds);
  int sync_errors = 0;
  for (int r = 0; r <= rounds; ++r) {  // round 0 warms up
    int64_t t0 = now_ns();
    for (int i = 0; i < batch; ++i) CHECK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, NULL, params, NULL));
    int64_t t1 = now_ns();
    if (cuCtxSynchronize() != CUDA_SUCCESS) ++sync_errors;
    int64_t drained = now_ns();
    char block[64];
    volatile int sink = 0;
    int64_t t2 = now_ns();
    for (int i = 0; i < batch; ++i) sink += pack_params(params, sizes, block);
    int64_t t3 = now_ns();
    if (r > 0) {
      launch[r - 1] = (double)(t1 - t0) / batch;
      plain[r - 1] = (double)(t3 - t2) / batch;
      drain[r - 1] = (double)(drained - t0) / batch;
    }
  }
  printf("launch_ns=%.1f rounds=%d batch=%d sync_errors=%d\n", median(launch, rounds), rounds, batch, sync_errors);
  printf("plain_call_ns=%.1f\n", median(plain, rounds));
  printf("drain_ns=%.1f\n", median(drain, rounds));

  double* sync = malloc(sizeof(double) * syncs);
  double* ping = malloc(sizeof(double) * syncs);
  for (int i = 0; i < syncs; ++i) {
    int64_t t0 = now_ns();
    CHECK(cuCtxSynchronize());
    sync[i] = (double)(now_ns() - t0);
  }
  for (int i = 0; i < syncs; ++i) {
    uint64_t echoed = 0;
    int64_t t0 = now_ns();
    if (tally_client_ping(i, &echoed) != 0 || echoed != (uint64_t)i) exit(3);
    ping[i] = (double)(now_ns() - t0);
  }
  double sync_median = median(sync, syncs);
  double sync_p99 = sync[(int)(syncs * 0.99)];
  printf("sync_ns=%.1f p99=%.1f count=%d\n", sync_median, sync_p99, syncs);
  double ping_median = median(ping, syncs);
  printf("ping_ns=%.1f p99=%.1f\n", ping_median, ping[(int)(syncs * 0.99)]);
  for (int g = 5; g < argc; ++g) {
    const int64_t gap = atoll(argv[g]) * 1000;
    const int count = syncs / 10 > 20 ? syncs / 10 : 20;
    for (int i = 0; i < count; ++i) {
      int64_t until = now_ns() + gap;
      while (now_ns() < until) {
      }
      int64_t t0 = now_ns();
      CHECK(cuCtxSynchronize());
      sync[i] = (double)(now_ns() - t0);
    }
    printf("gap_%s_us_sync_ns=%.1f count=%d\n", argv[g], median(sync, count), count);
  }
  CHECK(cuMemFree(out));
  return 0;
}
