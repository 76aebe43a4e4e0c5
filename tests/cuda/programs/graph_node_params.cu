// Node parameters changed after a graph is made and after it is instantiated: a graph
// memset(a, 1) -> memcpy(b <- a) -> host node (counts into `first`) -> record(ev1),
// which the server keeps. Exec updates (memset value 2, copy into c, host counting
// into `second`, record ev2) change the next launch and not the graph; a copy's
// direction cannot change; graph-level setters change the graph (seen by GetParams
// and by a new instantiation); cudaGraphExecNodeSetParams works like the typed ones.
// Prints key=value lines.
#include <cstdio>
#include <cuda_runtime.h>

#include "runtime_check.h"

constexpr int kN = 64;

struct Count {
  int calls = 0;
};
static void CUDART_CB bump(void* data) { ++static_cast<Count*>(data)->calls; }

static int first_value(const int* d) {
  int h[kN];
  if (cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost) != cudaSuccess) return -1;
  for (int i = 1; i < kN; ++i)
    if (h[i] != h[0]) return -2;
  return h[0];
}

int main() {
  int *a, *b, *c;
  CHECK(cudaMalloc(&a, kN * sizeof(int)));
  CHECK(cudaMalloc(&b, kN * sizeof(int)));
  CHECK(cudaMalloc(&c, kN * sizeof(int)));
  CHECK(cudaMemset(b, 0, kN * sizeof(int)));
  CHECK(cudaMemset(c, 0, kN * sizeof(int)));
  cudaEvent_t ev1, ev2;
  CHECK(cudaEventCreateWithFlags(&ev1, cudaEventDisableTiming));
  CHECK(cudaEventCreateWithFlags(&ev2, cudaEventDisableTiming));
  Count first, second;

  cudaGraph_t g;
  CHECK(cudaGraphCreate(&g, 0));
  cudaGraphNode_t m, cp, h, r;
  cudaMemsetParams mp = {};
  mp.dst = a;
  mp.value = 1;
  mp.elementSize = 4;
  mp.width = kN;
  mp.height = 1;
  CHECK(cudaGraphAddMemsetNode(&m, g, nullptr, 0, &mp));
  CHECK(cudaGraphAddMemcpyNode1D(&cp, g, &m, 1, b, a, kN * sizeof(int), cudaMemcpyDeviceToDevice));
  cudaHostNodeParams hp = {bump, &first};
  CHECK(cudaGraphAddHostNode(&h, g, &cp, 1, &hp));
  CHECK(cudaGraphAddEventRecordNode(&r, g, &h, 1, ev1));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  CHECK(cudaGraphLaunch(exec, 0));
  CHECK(cudaDeviceSynchronize());
  printf("launch1_b=%d launch1_first=%d\n", first_value(b), first.calls);

  // exec updates
  mp.value = 2;
  CHECK(cudaGraphExecMemsetNodeSetParams(exec, m, &mp));
  CHECK(cudaGraphExecMemcpyNodeSetParams1D(exec, cp, c, a, kN * sizeof(int), cudaMemcpyDeviceToDevice));
  hp.userData = &second;
  CHECK(cudaGraphExecHostNodeSetParams(exec, h, &hp));
  CHECK(cudaGraphExecEventRecordNodeSetEvent(exec, r, ev2));
  static int host_side[kN];
  printf("direction_change=%d\n", (int)cudaGraphExecMemcpyNodeSetParams1D(exec, cp, c, host_side, sizeof host_side,
                                                                          cudaMemcpyHostToDevice));
  cudaGetLastError();
  CHECK(cudaGraphLaunch(exec, 0));
  CHECK(cudaDeviceSynchronize());
  printf("launch2_b=%d launch2_c=%d launch2_first=%d launch2_second=%d ev2_done=%d\n", first_value(b),
         first_value(c), first.calls, second.calls, (int)(cudaEventQuery(ev2) == cudaSuccess));

  // the graph itself is unchanged by those; graph-level setters change it
  cudaMemsetParams got_mp;
  CHECK(cudaGraphMemsetNodeGetParams(m, &got_mp));
  cudaMemcpy3DParms got_cp = {};
  CHECK(cudaGraphMemcpyNodeGetParams(cp, &got_cp));
  cudaEvent_t got_ev;
  CHECK(cudaGraphEventRecordNodeGetEvent(r, &got_ev));
  printf("graph_memset_value=%u graph_copy_to_b=%d graph_event_is_ev1=%d\n", got_mp.value,
         (int)(got_cp.dstPtr.ptr == b), (int)(got_ev == ev1));
  mp.value = 3;
  CHECK(cudaGraphMemsetNodeSetParams(m, &mp));
  CHECK(cudaGraphMemsetNodeGetParams(m, &got_mp));
  printf("graph_memset_value_now=%u\n", got_mp.value);
  cudaGraphExec_t exec2;
  CHECK(cudaGraphInstantiate(&exec2, g, 0));
  CHECK(cudaGraphLaunch(exec2, 0));
  CHECK(cudaDeviceSynchronize());
  printf("new_exec_b=%d\n", first_value(b));

  // the generic form
  cudaGraphNodeParams np = {};
  np.type = cudaGraphNodeTypeMemset;
  np.memset.dst = mp.dst;
  np.memset.value = 4;
  np.memset.elementSize = mp.elementSize;
  np.memset.width = mp.width;
  np.memset.height = mp.height;
  CHECK(cudaGraphExecNodeSetParams(exec, m, &np));
  CHECK(cudaGraphLaunch(exec, 0));
  CHECK(cudaDeviceSynchronize());
  printf("generic_c=%d\n", first_value(c));
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphExecDestroy(exec2));
  CHECK(cudaGraphDestroy(g));
  printf("done\n");
  return 0;
}
