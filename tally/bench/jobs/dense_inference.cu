// The co-location benchmark's latency-critical job (plain CUDA): an inference
// service whose requests arrive at the times listed in a file.
//
//   dense_inference --arrivals FILE --duration S --out REPORT.json
//                   [--drain S] [--layers N] [--width N] [--warmup N] [--batch N]
//
// A request is: copy --batch input vectors (default 1) to the device, run
// --layers dense+ReLU layers of --width units over the whole batch (one kernel
// each; its grid has a row of blocks per input, so a bigger batch gives a kernel
// more blocks to spread over the SMs), copy the outputs back. Requests are
// served one at a time in arrival order, as a single-stream server does, so a
// request that arrives while another is served waits: its latency is completion
// minus arrival. The first request arrives --warmup requests after start-up
// (those load the module and are not timed); the trace clock t0 starts then.
// Requests still waiting --drain seconds after the trace's end are left
// unserved and reported as such. Every output is compared with the CPU's.
// Exit status 0 only if every served output was right.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <thread>

#include "job_common.h"

// x and y hold one row of `width` values per input of the batch (blockIdx.y).
__global__ void dense_relu(const float* w, const float* b, const float* x, float* y, int width) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= width) return;
  const size_t row = (size_t)blockIdx.y * width;
  float acc = b[r];
  for (int c = 0; c < width; ++c) acc += w[(size_t)r * width + c] * x[row + c];
  y[row + r] = acc > 0.f ? acc : 0.f;
}

namespace {

constexpr int kDistinctInputs = 8;   // inputs cycle, so expected outputs are computed once, before t0

struct Model {
  int layers, width, batch;
  std::vector<float> w, b;           // layer-major
  float *dw = nullptr, *db = nullptr, *dx = nullptr, *dy = nullptr;
};

std::vector<float> input(int k, int width) {
  std::vector<float> x(width);
  for (int c = 0; c < width; ++c) x[c] = job::hashed_unit(c, 1000 + k);
  return x;
}

// Request q's batch is inputs q, q+1, ... (mod kDistinctInputs), one after the other.
int input_of(int q, int i, int batch) { return (q * batch + i) % kDistinctInputs; }

std::vector<float> cpu_forward(const Model& m, std::vector<float> x) {
  const size_t ww = (size_t)m.width * m.width;
  for (int l = 0; l < m.layers; ++l) {
    std::vector<float> y(m.width);
    for (int r = 0; r < m.width; ++r) {
      float acc = m.b[(size_t)l * m.width + r];
      for (int c = 0; c < m.width; ++c) acc += m.w[l * ww + (size_t)r * m.width + c] * x[c];
      y[r] = acc > 0.f ? acc : 0.f;
    }
    x.swap(y);
  }
  return x;
}

// Serves request q (its batch of inputs); true if every output equals the CPU's.
bool serve(const Model& m, int q, const std::vector<std::vector<float>>& inputs,
           const std::vector<std::vector<float>>& expected, std::vector<float>& x, std::vector<float>& y) {
  const size_t ww = (size_t)m.width * m.width;
  for (int i = 0; i < m.batch; ++i) {
    const std::vector<float>& one = inputs[input_of(q, i, m.batch)];
    std::copy(one.begin(), one.end(), x.begin() + (size_t)i * m.width);
  }
  JOB_CHECK(cudaMemcpy(m.dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
  float *in = m.dx, *out = m.dy;
  const dim3 grid((m.width + 127) / 128, m.batch);
  for (int l = 0; l < m.layers; ++l) {
    dense_relu<<<grid, 128>>>(m.dw + l * ww, m.db + (size_t)l * m.width, in, out, m.width);
    std::swap(in, out);
  }
  JOB_CHECK(cudaGetLastError());
  JOB_CHECK(cudaMemcpy(y.data(), in, y.size() * sizeof(float), cudaMemcpyDeviceToHost));
  for (int i = 0; i < m.batch; ++i) {
    const std::vector<float>& want = expected[input_of(q, i, m.batch)];
    const float* got = y.data() + (size_t)i * m.width;
    for (int r = 0; r < m.width; ++r)
      if (!(std::fabs(got[r] - want[r]) <= 1e-3f * (1.f + std::fabs(want[r])))) return false;
  }
  return true;
}

std::vector<double> read_arrivals(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "dense_inference: cannot read the arrival file %s\n", path.c_str());
    std::exit(2);
  }
  std::vector<double> times;
  double t;
  while (in >> t) times.push_back(t);
  if (!in.eof()) {
    std::fprintf(stderr, "dense_inference: %s: expected one arrival time (seconds) per line\n", path.c_str());
    std::exit(2);
  }
  if (!std::is_sorted(times.begin(), times.end()) || (!times.empty() && times.front() < 0)) {
    std::fprintf(stderr, "dense_inference: %s: arrival times must be >= 0 and sorted\n", path.c_str());
    std::exit(2);
  }
  return times;
}

}  // namespace

int main(int argc, char** argv) {
  job::program_name = "dense_inference";
  job::Flags flags(argc, argv, {"arrivals", "duration", "out", "drain", "layers", "width", "warmup", "batch"});
  const std::vector<double> arrivals = read_arrivals(flags.str("arrivals", nullptr));
  const double duration = flags.num("duration", 0), drain = flags.num("drain", 10);
  const std::string out_path = flags.str("out", nullptr);
  Model m;
  m.layers = (int)flags.whole("layers", 4, 1);
  m.width = (int)flags.whole("width", 256, 1);
  m.batch = (int)flags.whole("batch", 1, 1);
  const int warmup = (int)flags.whole("warmup", 3, 1);

  const size_t ww = (size_t)m.width * m.width;
  const float scale = 2.0f / std::sqrt(float(m.width));   // keeps activations near 1 through the layers
  m.w.resize(m.layers * ww);
  m.b.resize((size_t)m.layers * m.width);
  for (size_t i = 0; i < m.w.size(); ++i) m.w[i] = job::hashed_unit(i, 1) * scale;
  for (size_t i = 0; i < m.b.size(); ++i) m.b[i] = job::hashed_unit(i, 2) * 0.1f;
  JOB_CHECK(cudaMalloc(&m.dw, m.w.size() * sizeof(float)));
  JOB_CHECK(cudaMalloc(&m.db, m.b.size() * sizeof(float)));
  const size_t batch_bytes = (size_t)m.batch * m.width * sizeof(float);
  JOB_CHECK(cudaMalloc(&m.dx, batch_bytes));
  JOB_CHECK(cudaMalloc(&m.dy, batch_bytes));
  JOB_CHECK(cudaMemcpy(m.dw, m.w.data(), m.w.size() * sizeof(float), cudaMemcpyHostToDevice));
  JOB_CHECK(cudaMemcpy(m.db, m.b.data(), m.b.size() * sizeof(float), cudaMemcpyHostToDevice));
  std::vector<std::vector<float>> inputs, expected;
  for (int q = 0; q < kDistinctInputs; ++q) {
    inputs.push_back(input(q, m.width));
    expected.push_back(cpu_forward(m, inputs.back()));
  }
  std::vector<float> x((size_t)m.batch * m.width), y(x.size());
  int wrong = 0;
  for (int q = 0; q < warmup; ++q) wrong += !serve(m, q, inputs, expected, x, y);

  const double t0 = job::now_s(), deadline = t0 + duration + drain;
  std::vector<double> start, end;
  for (size_t q = 0; q < arrivals.size(); ++q) {
    const double due = t0 + arrivals[q];
    if (due > job::now_s())
      std::this_thread::sleep_until(std::chrono::steady_clock::time_point(
          std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(due))));
    const double begin = job::now_s();
    if (begin > deadline) break;
    const bool right = serve(m, (int)q, inputs, expected, x, y);
    const double done = job::now_s();
    start.push_back(begin - t0);
    end.push_back(done - t0);
    wrong += !right;
  }
  const double stopped = job::now_s() - t0;
  const bool ok = wrong == 0;
  job::Report report;
  report.text("job", "dense-inference");
  report.number("batch", m.batch);
  report.number("t0", t0);
  report.numbers("start_s", start);
  report.numbers("end_s", end);
  report.number("stopped_s", stopped);
  report.number("unfinished", double(arrivals.size() - end.size()));
  report.boolean("ok", ok);
  report.text("check", ok ? "every output equals the CPU's" : std::to_string(wrong) + " WRONG outputs");
  report.write(out_path);
  std::printf("dense_inference: %zu of %zu requests served (%d layers x %d, batch %d), %s\n", end.size(),
              arrivals.size(), m.layers, m.width, m.batch, ok ? "results correct" : "WRONG RESULTS");
  cudaFree(m.dw); cudaFree(m.db); cudaFree(m.dx); cudaFree(m.dy);
  return ok ? 0 : 1;
}
