// A job that only holds device memory, for `tally-bench migrate`: allocates
// argv[1] MiB, fills it with pseudo-random bytes (incompressible, so a migration
// moves every byte), prints "ready", waits for a line on stdin (meanwhile it is
// suspended, resumed and migrated), then reads it all back and prints
// "wrong=<bytes that changed>".
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

static void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    printf("error %s: %s\n", what, cudaGetErrorName(e));
    exit(1);
  }
}

static void fill(uint64_t* words, size_t n, uint64_t seed) {
  uint64_t x = seed;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    words[i] = x;
  }
}

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? strtoull(argv[1], nullptr, 10) : 16;
  const size_t bytes = mib << 20, words = bytes / 8;
  uint64_t* host = static_cast<uint64_t*>(malloc(bytes));
  uint64_t* expected = static_cast<uint64_t*>(malloc(bytes));
  fill(expected, words, 0x9E3779B97F4A7C15ull);
  void* device = nullptr;
  check(cudaMalloc(&device, bytes), "cudaMalloc");
  check(cudaMemcpy(device, expected, bytes, cudaMemcpyHostToDevice), "upload");
  printf("ready\n");
  fflush(stdout);
  char line[16];
  if (fgets(line, sizeof line, stdin) == nullptr) return 1;
  check(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost), "download");
  size_t wrong = 0;
  const unsigned char* got = reinterpret_cast<const unsigned char*>(host);
  const unsigned char* want = reinterpret_cast<const unsigned char*>(expected);
  for (size_t i = 0; i < bytes; ++i) wrong += got[i] != want[i];
  printf("wrong=%zu\n", wrong);
  return 0;
}
