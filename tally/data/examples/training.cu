// A small "training job": gradient-descent steps of a linear least-squares
// model, each step a few kernels (forward, residual, gradient with a
// shared-memory reduction and barriers, update), checked against the same
// steps on the CPU at the end. Used by `tally-bench demo` as the best-effort
// job; it is a plain CUDA program.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CHECK(call) do { cudaError_t e = (call); if (e != cudaSuccess) { \
  std::fprintf(stderr, "training: %s failed: %s\n", #call, cudaGetErrorString(e)); std::exit(1); } } while (0)

constexpr int kSamples = 256, kFeatures = 16, kBlock = 64;

__global__ void residual(const float* X, const float* w, const float* y, float* r) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= kSamples) return;
  float p = 0.f;
  for (int f = 0; f < kFeatures; ++f) p += X[i * kFeatures + f] * w[f];
  r[i] = p - y[i];
}

// One block per feature: grad[f] = sum_i r[i] * X[i][f] / n, reduced in shared memory.
__global__ void gradient(const float* X, const float* r, float* grad) {
  __shared__ float part[kBlock];
  int f = blockIdx.x;
  float acc = 0.f;
  for (int i = threadIdx.x; i < kSamples; i += blockDim.x) acc += r[i] * X[i * kFeatures + f];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) grad[f] = part[0] / kSamples;
}

__global__ void update(float* w, const float* grad, float lr) {
  int f = threadIdx.x;
  if (f < kFeatures) w[f] -= lr * grad[f];
}

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 30;
  const float lr = 0.05f;
  std::vector<float> X(kSamples * kFeatures), y(kSamples), w(kFeatures, 0.f);
  for (int i = 0; i < kSamples; ++i) {
    float t = 0.f;
    for (int f = 0; f < kFeatures; ++f) {
      X[i * kFeatures + f] = ((i * 7 + f * 3) % 11 - 5) / 5.f;
      t += X[i * kFeatures + f] * (f % 3 - 1);
    }
    y[i] = t;
  }
  float *dX, *dy, *dw, *dr, *dg;
  CHECK(cudaMalloc(&dX, X.size() * 4)); CHECK(cudaMalloc(&dy, y.size() * 4));
  CHECK(cudaMalloc(&dw, w.size() * 4)); CHECK(cudaMalloc(&dr, kSamples * 4)); CHECK(cudaMalloc(&dg, kFeatures * 4));
  CHECK(cudaMemcpy(dX, X.data(), X.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(dy, y.data(), y.size() * 4, cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dw, 0, w.size() * 4));
  for (int s = 0; s < steps; ++s) {
    residual<<<(kSamples + kBlock - 1) / kBlock, kBlock>>>(dX, dw, dy, dr);
    gradient<<<kFeatures, kBlock>>>(dX, dr, dg);
    update<<<1, 32>>>(dw, dg, lr);
  }
  CHECK(cudaGetLastError());
  std::vector<float> got(kFeatures);
  CHECK(cudaMemcpy(got.data(), dw, got.size() * 4, cudaMemcpyDeviceToHost));
  // The same steps on the CPU, summed in the kernels' order.
  std::vector<float> r(kSamples), g(kFeatures);
  for (int s = 0; s < steps; ++s) {
    for (int i = 0; i < kSamples; ++i) {
      float p = 0.f;
      for (int f = 0; f < kFeatures; ++f) p += X[i * kFeatures + f] * w[f];
      r[i] = p - y[i];
    }
    for (int f = 0; f < kFeatures; ++f) {
      double acc = 0;
      for (int i = 0; i < kSamples; ++i) acc += r[i] * X[i * kFeatures + f];
      g[f] = float(acc / kSamples);
    }
    for (int f = 0; f < kFeatures; ++f) w[f] -= lr * g[f];
  }
  double loss = 0, err = 0;
  for (int i = 0; i < kSamples; ++i) {
    float p = 0.f;
    for (int f = 0; f < kFeatures; ++f) p += X[i * kFeatures + f] * got[f];
    loss += (p - y[i]) * (p - y[i]) / kSamples;
  }
  for (int f = 0; f < kFeatures; ++f) err = std::fmax(err, std::fabs(got[f] - w[f]));
  bool ok = err < 1e-3;
  std::printf("training: %d steps (%d kernels), loss %.4f, max |w_gpu - w_cpu| %.2e, %s\n", steps, 3 * steps, loss,
              err, ok ? "results correct" : "WRONG RESULTS");
  cudaFree(dX); cudaFree(dy); cudaFree(dw); cudaFree(dr); cudaFree(dg);
  return ok ? 0 : 1;
}
