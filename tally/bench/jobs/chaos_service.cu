// The high-priority job of `tally-bench chaos`: a service that checks every
// answer it computes while best-effort jobs die around it.
//
// Each iteration uploads fresh inputs, runs two kernels on its own stream
// (an integer hash, then a prefix-free mix with the iteration number), copies the
// result back and compares every element with the host's own computation.
// Integer arithmetic, so the device's answer and the host's are equal bit for
// bit: any wrong element is a real corruption, never rounding.
//
//   chaos_service --stop FILE --out FILE [--elements N] [--ready FILE]
// Runs until FILE exists (checked between iterations), then writes a JSON report
// {iterations, wrong, elements, seconds} and prints iterations= wrong=.
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "job_common.h"

__host__ __device__ inline uint32_t mix(uint32_t x, uint32_t salt) {
  x ^= salt * 0x9E3779B9u;
  x *= 0x85EBCA6Bu;
  x ^= x >> 13;
  x *= 0xC2B2AE35u;
  return x ^ (x >> 16);
}

__global__ void hash_kernel(const uint32_t* in, uint32_t* out, int n, uint32_t salt) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = mix(in[i], salt);
}

__global__ void neighbour_kernel(const uint32_t* in, uint32_t* out, int n, uint32_t iteration) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] + in[(i + 1) % n] * (iteration | 1u);
}

int main(int argc, char** argv) {
  job::program_name = "chaos_service";
  job::Flags flags(argc, argv, {"stop", "out", "elements", "ready"});
  const std::string stop = flags.str("stop", nullptr), out = flags.str("out", nullptr);
  const int n = int(flags.whole("elements", 4096, 1));
  const size_t bytes = size_t(n) * sizeof(uint32_t);

  cudaStream_t stream;
  JOB_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  uint32_t *d_in, *d_mid, *d_out;
  JOB_CHECK(cudaMalloc(&d_in, bytes));
  JOB_CHECK(cudaMalloc(&d_mid, bytes));
  JOB_CHECK(cudaMalloc(&d_out, bytes));
  std::vector<uint32_t> in(n), got(n), mid(n);
  job::touch(flags.str("ready", ""));

  long iterations = 0, wrong = 0;
  const double start = job::now_s();
  const int threads = 128, blocks = (n + threads - 1) / threads;
  while (!job::file_exists(stop)) {
    const uint32_t it = uint32_t(iterations);
    for (int i = 0; i < n; ++i) in[i] = mix(uint32_t(i), it + 0x51u);
    JOB_CHECK(cudaMemcpyAsync(d_in, in.data(), bytes, cudaMemcpyHostToDevice, stream));
    hash_kernel<<<blocks, threads, 0, stream>>>(d_in, d_mid, n, it);
    neighbour_kernel<<<blocks, threads, 0, stream>>>(d_mid, d_out, n, it);
    JOB_CHECK(cudaGetLastError());
    JOB_CHECK(cudaMemcpyAsync(got.data(), d_out, bytes, cudaMemcpyDeviceToHost, stream));
    JOB_CHECK(cudaStreamSynchronize(stream));
    for (int i = 0; i < n; ++i) mid[i] = mix(in[i], it);
    for (int i = 0; i < n; ++i) wrong += got[i] != mid[i] + mid[(i + 1) % n] * (it | 1u);
    ++iterations;
  }
  const double seconds = job::now_s() - start;
  JOB_CHECK(cudaFree(d_in));
  JOB_CHECK(cudaFree(d_mid));
  JOB_CHECK(cudaFree(d_out));
  JOB_CHECK(cudaStreamDestroy(stream));
  job::Report report;
  report.number("iterations", double(iterations));
  report.number("wrong", double(wrong));
  report.number("elements", double(n));
  report.number("seconds", seconds);
  report.write(out);
  std::printf("iterations=%ld wrong=%ld\n", iterations, wrong);
  return 0;
}
