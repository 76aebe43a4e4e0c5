// The co-location benchmark's best-effort job (plain CUDA): full-batch gradient
// descent on a least-squares model, with kernels that are long next to an
// inference request (every thread loops over a whole row or column of the data).
//
//   long_kernel_training --out REPORT.json --stop FILE [--ready FILE]
//                        [--samples N] [--features N] [--lr X] [--max-steps N]
//
// A step is three kernels: residual (one thread per sample, a loop over all
// features), gradient (one block per feature, a loop over all samples and a
// shared-memory tree reduction with barriers) and update, then a 4-byte copy
// back (the synchronization a training loop has every step). After the first
// step the weights are compared with the CPU's and --ready is created; steps go
// on until the file --stop exists (or --max-steps). At the end the weights are
// compared with a CPU replay of every step (or, when that would take more than
// a few seconds of CPU, the loss must have fallen). The report lists when each
// step ended. Exit status 0 only if the checks pass.
#include <algorithm>
#include <cmath>

#include "job_common.h"

constexpr int kBlock = 128;      // the gradient kernel's reduction assumes a power of two

// X is stored feature-major (xt[f * n + i]) so that neighbouring threads read neighbouring samples.
__global__ void residual(const float* xt, const float* w, const float* y, float* r, int n, int f) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float p = 0.f;
  for (int k = 0; k < f; ++k) p += xt[(size_t)k * n + i] * w[k];
  r[i] = p - y[i];
}

__global__ void gradient(const float* xt, const float* r, float* g, int n) {
  __shared__ float part[kBlock];
  const float* column = xt + (size_t)blockIdx.x * n;
  float acc = 0.f;
  for (int i = threadIdx.x; i < n; i += kBlock) acc += r[i] * column[i];
  part[threadIdx.x] = acc;
  __syncthreads();
  for (int s = kBlock / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) g[blockIdx.x] = part[0] / n;
}

__global__ void update(float* w, const float* g, float lr, int f) {
  int k = blockIdx.x * blockDim.x + threadIdx.x;
  if (k < f) w[k] -= lr * g[k];
}

namespace {

struct Problem {
  int n, f;
  float lr;
  std::vector<float> xt, y;
};

// The same step on the CPU, in the kernels' summation order (per-thread partial
// sums, then the tree), so the comparison can be tight.
void cpu_step(const Problem& p, std::vector<float>& w) {
  std::vector<float> r(p.n), g(p.f);
  for (int i = 0; i < p.n; ++i) {
    float acc = 0.f;
    for (int k = 0; k < p.f; ++k) acc += p.xt[(size_t)k * p.n + i] * w[k];
    r[i] = acc - p.y[i];
  }
  for (int k = 0; k < p.f; ++k) {
    float part[kBlock];
    for (int t = 0; t < kBlock; ++t) {
      float acc = 0.f;
      for (int i = t; i < p.n; i += kBlock) acc += r[i] * p.xt[(size_t)k * p.n + i];
      part[t] = acc;
    }
    for (int s = kBlock / 2; s > 0; s >>= 1)
      for (int t = 0; t < s; ++t) part[t] += part[t + s];
    g[k] = part[0] / p.n;
  }
  for (int k = 0; k < p.f; ++k) w[k] -= p.lr * g[k];
}

double loss(const Problem& p, const std::vector<float>& w) {
  double sum = 0;
  for (int i = 0; i < p.n; ++i) {
    double acc = 0;
    for (int k = 0; k < p.f; ++k) acc += double(p.xt[(size_t)k * p.n + i]) * w[k];
    sum += (acc - p.y[i]) * (acc - p.y[i]);
  }
  return sum / p.n;
}

double max_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t k = 0; k < a.size(); ++k) worst = std::max(worst, double(std::fabs(a[k] - b[k])) / (1.0 + std::fabs(b[k])));
  return std::isnan(worst) ? INFINITY : worst;
}

}  // namespace

int main(int argc, char** argv) {
  job::program_name = "long_kernel_training";
  job::Flags flags(argc, argv, {"out", "stop", "ready", "samples", "features", "lr", "max-steps"});
  const std::string out_path = flags.str("out", nullptr), stop_path = flags.str("stop", nullptr);
  const std::string ready_path = flags.str("ready", "");
  Problem p;
  p.n = (int)flags.whole("samples", 4096, 1);
  p.f = (int)flags.whole("features", 256, 1);
  p.lr = (float)flags.num("lr", 0.05);
  const long max_steps = flags.whole("max-steps", 0, 0);
  p.xt.resize((size_t)p.f * p.n);
  p.y.resize(p.n);
  for (size_t j = 0; j < p.xt.size(); ++j) p.xt[j] = job::hashed_unit(j, 21);
  for (int i = 0; i < p.n; ++i) {
    float t = 0.f;
    for (int k = 0; k < p.f; ++k) t += p.xt[(size_t)k * p.n + i] * job::hashed_unit(k, 22);
    p.y[i] = t + 0.1f * job::hashed_unit(i, 23);
  }
  float *dxt, *dy, *dw, *dr, *dg;
  JOB_CHECK(cudaMalloc(&dxt, p.xt.size() * sizeof(float)));
  JOB_CHECK(cudaMalloc(&dy, p.n * sizeof(float)));
  JOB_CHECK(cudaMalloc(&dr, p.n * sizeof(float)));
  JOB_CHECK(cudaMalloc(&dw, p.f * sizeof(float)));
  JOB_CHECK(cudaMalloc(&dg, p.f * sizeof(float)));
  JOB_CHECK(cudaMemcpy(dxt, p.xt.data(), p.xt.size() * sizeof(float), cudaMemcpyHostToDevice));
  JOB_CHECK(cudaMemcpy(dy, p.y.data(), p.n * sizeof(float), cudaMemcpyHostToDevice));
  JOB_CHECK(cudaMemset(dw, 0, p.f * sizeof(float)));

  auto step = [&] {
    residual<<<(p.n + kBlock - 1) / kBlock, kBlock>>>(dxt, dw, dy, dr, p.n, p.f);
    gradient<<<p.f, kBlock>>>(dxt, dr, dg, p.n);
    update<<<(p.f + kBlock - 1) / kBlock, kBlock>>>(dw, dg, p.lr, p.f);
    JOB_CHECK(cudaGetLastError());
    float g0;
    JOB_CHECK(cudaMemcpy(&g0, dg, sizeof g0, cudaMemcpyDeviceToHost));
  };
  auto download = [&] {
    std::vector<float> w(p.f);
    JOB_CHECK(cudaMemcpy(w.data(), dw, p.f * sizeof(float), cudaMemcpyDeviceToHost));
    return w;
  };

  const double started = job::now_s();
  step();
  std::vector<float> reference(p.f, 0.f);
  cpu_step(p, reference);
  const double first_error = max_difference(download(), reference);
  const double first_loss = loss(p, reference);
  std::vector<double> ends{job::now_s()};
  job::touch(ready_path);
  long steps = 1;
  while (!job::file_exists(stop_path) && (max_steps == 0 || steps < max_steps)) {
    step();
    ends.push_back(job::now_s());
    ++steps;
  }

  const std::vector<float> w = download();
  const bool replay = double(steps) * p.n * p.f <= 4e9;     // a few seconds of CPU at most
  std::string check;
  bool ok = first_error < 1e-4;
  char buf[200];
  if (replay) {
    for (long s = 1; s < steps; ++s) cpu_step(p, reference);
    const double error = max_difference(w, reference);
    ok = ok && error < 1e-3;
    std::snprintf(buf, sizeof buf, "weights after %ld steps vs CPU replay: max rel. difference %.2e", steps, error);
  } else {
    const double last_loss = loss(p, w);
    ok = ok && std::isfinite(last_loss) && last_loss <= first_loss;
    std::snprintf(buf, sizeof buf, "step 1 vs CPU: %.2e; loss %.4g after step 1, %.4g after %ld steps", first_error,
                  first_loss, last_loss, steps);
  }
  check = buf;
  job::Report report;
  report.text("job", "long-kernel-training");
  report.number("started", started);
  report.numbers("step_end", ends);
  report.boolean("ok", ok);
  report.text("check", check);
  report.write(out_path);
  std::printf("long_kernel_training: %ld steps (%d samples x %d features), %s: %s\n", steps, p.n, p.f, check.c_str(),
              ok ? "results correct" : "WRONG RESULTS");
  cudaFree(dxt); cudaFree(dy); cudaFree(dr); cudaFree(dw); cudaFree(dg);
  return ok ? 0 : 1;
}
