// A job that only holds device memory, for `tally-bench migrate`: allocates
// argv[1] MiB, fills it with pseudo-random bytes (incompressible, so a migration
// moves every byte), prints "ready", waits for a line on stdin (meanwhile it is
// suspended, resumed and migrated), then reads it all back and prints
// "wrong=<bytes that changed>". Each "probe" line before that makes it work until
// the next line and print the longest call (probe_until_next_line). A kernel
// stamps a `__device__` variable first, so the job also carries a module, a kernel
// and a global that must come back.
//
// The bytes are a function of their position (splitmix64 of the word's index),
// so the job makes and checks them one chunk at a time: it needs one chunk of
// host memory, not two copies of its footprint, and a 4 GiB job fits a host
// that also holds the servers' copies of it.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <cuda_runtime.h>
#include <poll.h>

static const size_t kChunkBytes = 64u << 20;
static const unsigned long long kStamp = 0x5EED5EED5EED5EEDull;

__device__ unsigned long long stamp_value;

__global__ void stamp(unsigned long long value) { stamp_value = value; }

static void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    printf("error %s: %s\n", what, cudaGetErrorName(e));
    exit(1);
  }
}

static uint64_t word_at(uint64_t index) {
  uint64_t z = index * 0x9E3779B97F4A7C15ull + 0x6A09E667F3BCC909ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static void fill(uint64_t* words, size_t first, size_t n) {
  for (size_t i = 0; i < n; ++i) words[i] = word_at(first + i);
}

static size_t count_wrong(const uint64_t* words, size_t first, size_t n) {
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) {
    uint64_t diff = words[i] ^ word_at(first + i);
    for (; diff != 0; diff >>= 8) wrong += (diff & 0xff) != 0;   // bytes, as before
  }
  return wrong;
}

static double now_ms() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

// "probe": the job keeps working while it is migrated, reading 8 bytes from the
// device every millisecond until the next line comes; the longest of those calls is
// the pause the job saw (its requests wait while it moves).
static double probe_until_next_line() {
  printf("probing\n");
  fflush(stdout);
  double longest = 0;
  pollfd input{0, POLLIN, 0};
  while (poll(&input, 1, 1) == 0) {
    unsigned long long value = 0;
    const double start = now_ms();
    check(cudaMemcpyFromSymbol(&value, stamp_value, sizeof value), "probe");
    const double took = now_ms() - start;
    if (took > longest) longest = took;
  }
  return longest;
}

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? strtoull(argv[1], nullptr, 10) : 16;
  const size_t bytes = mib << 20;
  uint64_t* host = static_cast<uint64_t*>(malloc(kChunkBytes));
  stamp<<<1, 1>>>(kStamp);
  check(cudaGetLastError(), "stamp launch");
  char* device = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&device), bytes), "cudaMalloc");
  for (size_t at = 0; at < bytes; at += kChunkBytes) {
    const size_t n = bytes - at < kChunkBytes ? bytes - at : kChunkBytes;
    fill(host, at / 8, n / 8);
    check(cudaMemcpy(device + at, host, n, cudaMemcpyHostToDevice), "upload");
  }
  // A pageable upload may return before it reached the device: the job is idle
  // only once it has, so a suspend measured from "ready" times the suspend alone.
  check(cudaDeviceSynchronize(), "upload finished");
  printf("ready\n");
  fflush(stdout);
  char line[16];
  for (;;) {
    if (fgets(line, sizeof line, stdin) == nullptr) return 1;
    if (std::strncmp(line, "probe", 5) != 0) break;
    const double longest = probe_until_next_line();
    if (fgets(line, sizeof line, stdin) == nullptr) return 1;   // the line that stopped it
    printf("longest_call_ms=%.3f\n", longest);
    fflush(stdout);
  }
  size_t wrong = 0;
  for (size_t at = 0; at < bytes; at += kChunkBytes) {
    const size_t n = bytes - at < kChunkBytes ? bytes - at : kChunkBytes;
    check(cudaMemcpy(host, device + at, n, cudaMemcpyDeviceToHost), "download");
    wrong += count_wrong(host, at / 8, n / 8);
  }
  unsigned long long stamped = 0;
  check(cudaMemcpyFromSymbol(&stamped, stamp_value, sizeof stamped), "read the stamp");
  if (stamped != kStamp) wrong += sizeof stamped;
  printf("wrong=%zu\n", wrong);
  return 0;
}
