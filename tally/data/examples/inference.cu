// A small "inference service": each request copies an input vector to the
// device, runs a dense layer + ReLU, copies the result back and checks it
// against the CPU. Prints per-request latency percentiles. Used by
// `tally-bench demo` as the high-priority job; it is a plain CUDA program.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call) do { cudaError_t e = (call); if (e != cudaSuccess) { \
  std::fprintf(stderr, "inference: %s failed: %s\n", #call, cudaGetErrorString(e)); std::exit(1); } } while (0)

__global__ void dense_relu(const float* w, const float* x, const float* b, float* y, int rows, int cols) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float acc = b[r];
  for (int c = 0; c < cols; ++c) acc += w[r * cols + c] * x[c];
  y[r] = acc > 0.f ? acc : 0.f;
}

int main(int argc, char** argv) {
  const int requests = argc > 1 ? std::atoi(argv[1]) : 20;
  const int rows = 128, cols = 64;
  std::vector<float> w(rows * cols), b(rows), x(cols), y(rows);
  for (int i = 0; i < rows * cols; ++i) w[i] = ((i * 37) % 17 - 8) / 16.f;
  for (int i = 0; i < rows; ++i) b[i] = (i % 5 - 2) / 4.f;
  float *dw, *db, *dx, *dy;
  CHECK(cudaMalloc(&dw, w.size() * sizeof(float)));
  CHECK(cudaMalloc(&db, b.size() * sizeof(float)));
  CHECK(cudaMalloc(&dx, x.size() * sizeof(float)));
  CHECK(cudaMalloc(&dy, y.size() * sizeof(float)));
  CHECK(cudaMemcpy(dw, w.data(), w.size() * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice));
  std::vector<double> latency_ms;
  int wrong = 0;
  // Request -1 warms up (the first launch loads the module) and is not timed, as a
  // service answers traffic only once it is ready.
  for (int q = -1; q < requests; ++q) {
    for (int c = 0; c < cols; ++c) x[c] = ((q + c) % 7 - 3) / 2.f;
    auto t0 = std::chrono::steady_clock::now();
    CHECK(cudaMemcpy(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
    dense_relu<<<(rows + 63) / 64, 64>>>(dw, dx, db, dy, rows, cols);
    CHECK(cudaGetLastError());
    CHECK(cudaMemcpy(y.data(), dy, y.size() * sizeof(float), cudaMemcpyDeviceToHost));
    auto t1 = std::chrono::steady_clock::now();
    if (q >= 0) latency_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    for (int r = 0; r < rows; ++r) {
      float acc = b[r];
      for (int c = 0; c < cols; ++c) acc += w[r * cols + c] * x[c];
      float want = acc > 0.f ? acc : 0.f;
      if (std::fabs(y[r] - want) > 1e-4f * (1.f + std::fabs(want))) ++wrong;
    }
  }
  std::sort(latency_ms.begin(), latency_ms.end());
  auto pct = [&](double p) { return latency_ms[std::min(latency_ms.size() - 1, size_t(p * latency_ms.size()))]; };
  std::printf("inference: %d requests, latency p50 %.2f ms, p99 %.2f ms, %s\n", requests, pct(0.50), pct(0.99),
              wrong ? "WRONG RESULTS" : "results correct");
  cudaFree(dw); cudaFree(db); cudaFree(dx); cudaFree(dy);
  return wrong ? 1 : 0;
}
