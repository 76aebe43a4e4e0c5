// `tally-bench graphs`' job: captures a graph of --nodes empty kernels, half of
// them on a second stream forked from and joined back into the first (a
// fork/join as PyTorch's and vLLM's captures have), instantiates it, and times
// --replays back-to-back cudaGraphLaunch calls until their synchronization,
// --rounds times. On the null backend nothing runs, so a round's time per
// replay is what the server (or the job's client, whichever is slower) spends
// on one replay.
//
// Prints: us_per_replay (median over rounds, launch loop start -> sync end)
//         client_us_per_replay (median, the launch loop alone)
#include <algorithm>
#include <cuda_runtime.h>

#include "job_common.h"

__global__ void step(int* out, int node) {
  if (out != nullptr && threadIdx.x == 0 && blockIdx.x == 0) out[node & 63] += 1;
}

static double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main(int argc, char** argv) {
  job::program_name = "graph_replay";
  job::Flags flags(argc, argv, {"nodes", "replays", "rounds", "warmup"});
  const int nodes = int(flags.num("nodes", 240));
  const int replays = int(flags.num("replays", 200));
  const int rounds = int(flags.num("rounds", 15));
  const int warmup = int(flags.num("warmup", 20));
  int* out = nullptr;
  JOB_CHECK(cudaMalloc(&out, 64 * sizeof(int)));
  cudaStream_t main_stream, side;
  JOB_CHECK(cudaStreamCreateWithFlags(&main_stream, cudaStreamNonBlocking));
  JOB_CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  cudaEvent_t fork, join;
  JOB_CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  JOB_CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));

  cudaGraph_t graph;
  JOB_CHECK(cudaStreamBeginCapture(main_stream, cudaStreamCaptureModeThreadLocal));
  const int half = nodes / 2;
  step<<<1, 32, 0, main_stream>>>(out, 0);
  JOB_CHECK(cudaEventRecord(fork, main_stream));
  JOB_CHECK(cudaStreamWaitEvent(side, fork, 0));
  for (int i = 1; i < half; ++i) step<<<1, 32, 0, main_stream>>>(out, i);
  for (int i = half; i < nodes; ++i) step<<<1, 32, 0, side>>>(out, i);
  JOB_CHECK(cudaEventRecord(join, side));
  JOB_CHECK(cudaStreamWaitEvent(main_stream, join, 0));
  JOB_CHECK(cudaStreamEndCapture(main_stream, &graph));
  cudaGraphExec_t exec;
  JOB_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  size_t count = 0;
  JOB_CHECK(cudaGraphGetNodes(graph, nullptr, &count));

  for (int i = 0; i < warmup; ++i) JOB_CHECK(cudaGraphLaunch(exec, main_stream));
  JOB_CHECK(cudaStreamSynchronize(main_stream));
  std::vector<double> total, client;
  for (int r = 0; r < rounds; ++r) {
    const double t0 = job::now_s();
    for (int i = 0; i < replays; ++i) JOB_CHECK(cudaGraphLaunch(exec, main_stream));
    const double t1 = job::now_s();
    JOB_CHECK(cudaStreamSynchronize(main_stream));
    const double t2 = job::now_s();
    client.push_back((t1 - t0) / replays * 1e6);
    total.push_back((t2 - t0) / replays * 1e6);
  }
  std::printf("nodes=%zu replays=%d rounds=%d us_per_replay=%.3f client_us_per_replay=%.3f\n", count, replays, rounds,
              median(total), median(client));
  JOB_CHECK(cudaGraphExecDestroy(exec));
  JOB_CHECK(cudaGraphDestroy(graph));
  return 0;
}
