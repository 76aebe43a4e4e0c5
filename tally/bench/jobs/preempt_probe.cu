// The preemption probe (plain CUDA): a high-priority job whose request is one
// launch of a one-block kernel and a synchronization, so that its latency is
// what the device makes a high-priority launch wait. Next to a best-effort job
// whose kernels fill the device, latency shared minus latency alone is the
// preemption delay (tally-bench gpu-check's preemption step).
//
//   preempt_probe --arrivals FILE --duration S --out REPORT.json [--drain S] [--warmup N]
//
// The report is a high-priority job's (tally/bench/process_results.py); each
// request also adds one to a device counter, which must equal the number of
// launches at the end, so a launch lost under sharing is caught.
#include <algorithm>
#include <fstream>
#include <thread>

#include "job_common.h"

__global__ void probe(unsigned long long* counter) {
  if (threadIdx.x == 0) atomicAdd(counter, 1ull);
}

namespace {

std::vector<double> read_arrivals(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "preempt_probe: cannot read the arrival file %s\n", path.c_str());
    std::exit(2);
  }
  std::vector<double> times;
  double t;
  while (in >> t) times.push_back(t);
  if (!in.eof() || !std::is_sorted(times.begin(), times.end()) || (!times.empty() && times.front() < 0)) {
    std::fprintf(stderr, "preempt_probe: %s: expected sorted arrival times >= 0 (seconds), one per line\n",
                 path.c_str());
    std::exit(2);
  }
  return times;
}

void launch_and_wait(unsigned long long* counter) {
  probe<<<1, 32>>>(counter);
  JOB_CHECK(cudaGetLastError());
  JOB_CHECK(cudaDeviceSynchronize());
}

}  // namespace

int main(int argc, char** argv) {
  job::program_name = "preempt_probe";
  job::Flags flags(argc, argv, {"arrivals", "duration", "out", "drain", "warmup"});
  const std::vector<double> arrivals = read_arrivals(flags.str("arrivals", nullptr));
  const double duration = flags.num("duration", 0), drain = flags.num("drain", 10);
  const std::string out_path = flags.str("out", nullptr);
  const long warmup = flags.whole("warmup", 3, 1);

  unsigned long long* counter = nullptr;
  JOB_CHECK(cudaMalloc(&counter, sizeof *counter));
  JOB_CHECK(cudaMemset(counter, 0, sizeof *counter));
  for (long q = 0; q < warmup; ++q) launch_and_wait(counter);

  const double t0 = job::now_s(), deadline = t0 + duration + drain;
  std::vector<double> start, end;
  for (size_t q = 0; q < arrivals.size(); ++q) {
    const double due = t0 + arrivals[q];
    if (due > job::now_s())
      std::this_thread::sleep_until(std::chrono::steady_clock::time_point(
          std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(due))));
    const double begin = job::now_s();
    if (begin > deadline) break;
    launch_and_wait(counter);
    start.push_back(begin - t0);
    end.push_back(job::now_s() - t0);
  }
  const double stopped = job::now_s() - t0;
  unsigned long long counted = 0;
  JOB_CHECK(cudaMemcpy(&counted, counter, sizeof counted, cudaMemcpyDeviceToHost));
  const unsigned long long launched = (unsigned long long)(warmup + (long)end.size());
  const bool ok = counted == launched;
  job::Report report;
  report.text("job", "preempt-probe");
  report.number("t0", t0);
  report.numbers("start_s", start);
  report.numbers("end_s", end);
  report.number("stopped_s", stopped);
  report.number("unfinished", double(arrivals.size() - end.size()));
  report.boolean("ok", ok);
  report.text("check", ok ? "every launch ran once" :
              "WRONG: " + std::to_string(counted) + " kernel runs for " + std::to_string(launched) + " launches");
  report.write(out_path);
  std::printf("preempt_probe: %zu of %zu requests served, %s\n", end.size(), arrivals.size(),
              ok ? "every launch ran once" : "LAUNCHES LOST OR REPEATED");
  cudaFree(counter);
  return ok ? 0 : 1;
}
