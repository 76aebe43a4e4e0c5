// A best-effort job suspended in the middle of its loop of kernels
// (tally-server suspend/resume). Each round replays a CUDA graph on one stream
// (a step over array `a` that reads the round from a __device__ variable, then
// a kernel that bumps it), hands over to a second stream through an event (a
// mix into array `b`), and back through another event; every eighth round it
// also writes into a 16 MiB `ballast` buffer filled by a memset. Prints "looping"
// once the loop is under way (with the argument `wait`, it then waits for a line
// on stdin before it goes on; with `hold`, it loops on and waits for a line after
// its last round, before synchronizing, so a test can look at it between a resume
// and its end however fast it ran), then checks everything on the host:
// wrong_a= wrong_b= wrong_ballast= rounds= (0, 0, 0, ROUNDS when nothing was lost
// or repeated).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#include "runtime_check.h"

constexpr int N = 1 << 14;
constexpr int ROUNDS = 400;
constexpr size_t BALLAST_INTS = (16u << 20) / sizeof(unsigned);
constexpr size_t BALLAST_STRIDE = 4096;

__device__ unsigned g_round;          // module global: the round the graph's step works on
__device__ unsigned g_seen[256];      // module global: rounds each block of `mark` saw

__global__ void step(unsigned* a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = a[i] * 3u + g_round + (i & 7);
}

__global__ void bump() {
  if (threadIdx.x == 0 && blockIdx.x == 0) g_round += 1;
}

__global__ void mix(unsigned* b, const unsigned* a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = b[i] * 5u + (a[i] ^ i);
}

__global__ void mark(unsigned* ballast, unsigned round) {
  size_t k = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (k * BALLAST_STRIDE < BALLAST_INTS) ballast[k * BALLAST_STRIDE] = round;
  if (threadIdx.x == 0) g_seen[blockIdx.x] += 1;
}

int main(int argc, char** argv) {
  const bool wait_for_line = argc > 1 && strcmp(argv[1], "wait") == 0;
  const bool hold_at_end = argc > 1 && strcmp(argv[1], "hold") == 0;
  unsigned *a, *b, *ballast;
  CHECK(cudaMalloc(&a, N * sizeof(unsigned)));
  CHECK(cudaMalloc(&b, N * sizeof(unsigned)));
  CHECK(cudaMalloc(&ballast, BALLAST_INTS * sizeof(unsigned)));
  CHECK(cudaMemset(a, 0, N * sizeof(unsigned)));
  CHECK(cudaMemset(b, 0, N * sizeof(unsigned)));
  CHECK(cudaMemset(ballast, 0xA5, BALLAST_INTS * sizeof(unsigned)));
  cudaStream_t s1, s2;
  CHECK(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  cudaEvent_t stepped, mixed;
  CHECK(cudaEventCreateWithFlags(&stepped, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&mixed, cudaEventDisableTiming));

  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaStreamBeginCapture(s1, cudaStreamCaptureModeGlobal));
  step<<<N / 128, 128, 0, s1>>>(a, N);
  bump<<<1, 32, 0, s1>>>();
  CHECK(cudaStreamEndCapture(s1, &graph));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));

  const int mark_blocks = (int)((BALLAST_INTS / BALLAST_STRIDE + 63) / 64);
  for (int round = 0; round < ROUNDS; ++round) {
    CHECK(cudaGraphLaunch(exec, s1));
    CHECK(cudaEventRecord(stepped, s1));
    CHECK(cudaStreamWaitEvent(s2, stepped, 0));
    mix<<<N / 128, 128, 0, s2>>>(b, a, N);
    if (round % 8 == 0) mark<<<mark_blocks, 64, 0, s2>>>(ballast, round);
    CHECK(cudaEventRecord(mixed, s2));
    CHECK(cudaStreamWaitEvent(s1, mixed, 0));
    if (round % 4 == 3) CHECK(cudaEventSynchronize(mixed));
    if (round == 3) {
      printf("looping\n");
      fflush(stdout);
      char line[16];
      if (wait_for_line && fgets(line, sizeof line, stdin) == nullptr) return 1;
    }
  }
  if (hold_at_end) {
    char line[16];
    if (fgets(line, sizeof line, stdin) == nullptr) return 1;
  }
  CHECK(cudaGetLastError());
  CHECK(cudaStreamSynchronize(s1));
  CHECK(cudaStreamSynchronize(s2));

  static unsigned host_a[N], host_b[N];
  unsigned* host_ballast = (unsigned*)malloc(BALLAST_INTS * sizeof(unsigned));
  unsigned rounds = 0, seen[256];
  CHECK(cudaMemcpy(host_a, a, sizeof host_a, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(host_b, b, sizeof host_b, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(host_ballast, ballast, BALLAST_INTS * sizeof(unsigned), cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpyFromSymbol(&rounds, g_round, sizeof rounds));
  CHECK(cudaMemcpyFromSymbol(seen, g_seen, sizeof seen));
  int wrong_a = 0, wrong_b = 0, wrong_ballast = 0, wrong_seen = 0;
  for (int i = 0; i < N; ++i) {
    unsigned ea = 0, eb = 0;
    for (int round = 0; round < ROUNDS; ++round) {
      ea = ea * 3u + round + (i & 7);
      eb = eb * 5u + (ea ^ i);
    }
    wrong_a += host_a[i] != ea;
    wrong_b += host_b[i] != eb;
  }
  const unsigned last_mark = (ROUNDS - 1) / 8 * 8;
  for (size_t k = 0; k < BALLAST_INTS; ++k) {
    unsigned expected = k % BALLAST_STRIDE == 0 ? last_mark : 0xA5A5A5A5u;
    wrong_ballast += host_ballast[k] != expected;
  }
  for (int blk = 0; blk < mark_blocks; ++blk) wrong_seen += seen[blk] != (ROUNDS + 7) / 8;
  printf("wrong_a=%d wrong_b=%d wrong_ballast=%d wrong_seen=%d rounds=%u\n", wrong_a, wrong_b, wrong_ballast,
         wrong_seen, rounds);
  free(host_ballast);
  return 0;
}
