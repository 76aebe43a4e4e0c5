// Green contexts through the driver API, kernels launched with the runtime:
//   - the device's SM resource (with its partition rules), a split of it into two
//     groups of at least argv[1] SMs, a green context on the first group;
//   - a kernel whose blocks record the SM they ran on (%smid), launched on a stream
//     of the green context, on the NULL stream while the green context is current,
//     and on an ordinary stream: how many SMs ran its blocks each time;
//   - the stream's and the current context's green context, events over all of a
//     green context's streams;
//   - what is refused: a split larger than the resource, a group split again,
//     unknown flags, a descriptor of two splits, a resource type that is not SM,
//     a destroyed green context.
// Prints key=value lines the test checks.
#include <cstdio>
#include <cstdlib>
#include <cuda.h>
#include <cuda_runtime.h>

#include "driver_call.h"
#include "runtime_check.h"

constexpr int kBlocks = 256;

__global__ void record_smid(unsigned* smid_of_block) {
  if (threadIdx.x == 0) {
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    smid_of_block[blockIdx.x] = id;
  }
}

// How many different SMs ran the blocks of a launch on `stream`, and the highest %smid.
void sms_used(cudaStream_t stream, unsigned* device_buffer, const char* name) {
  record_smid<<<kBlocks, 64, 0, stream>>>(device_buffer);
  CHECK(cudaGetLastError());
  unsigned host[kBlocks];
  CHECK(cudaMemcpyAsync(host, device_buffer, sizeof host, cudaMemcpyDeviceToHost, stream));
  CHECK(cudaStreamSynchronize(stream));
  bool seen[4096] = {};
  unsigned distinct = 0, highest = 0;
  for (unsigned id : host) {
    if (id >= 4096) continue;
    distinct += !seen[id];
    seen[id] = true;
    highest = id > highest ? id : highest;
  }
  printf("%s_distinct_sms=%u %s_max_smid=%u\n", name, distinct, name, highest);
}

int main(int argc, char** argv) {
  const unsigned min_count = argc > 1 ? (unsigned)atoi(argv[1]) : 8;
  unsigned* smids = nullptr;
  CHECK(cudaMalloc(&smids, kBlocks * sizeof(unsigned)));
  CUdevice dev;
  DRIVER(cuDeviceGet(&dev, 0));

  CUdevResource sm;
  DRIVER(cuDeviceGetDevResource(dev, &sm, CU_DEV_RESOURCE_TYPE_SM));
  printf("device_sms=%u min_partition=%u alignment=%u\n", sm.sm.smCount, sm.sm.minSmPartitionSize,
         sm.sm.smCoscheduledAlignment);
  unsigned possible = 0;
  DRIVER(cuDevSmResourceSplitByCount(nullptr, &possible, &sm, nullptr, 0, min_count));
  CUdevResource groups[2], remaining;
  unsigned made = 2;
  DRIVER(cuDevSmResourceSplitByCount(groups, &made, &sm, &remaining, 0, min_count));
  printf("groups_possible=%u groups_made=%u group_sms=%u remaining_sms=%u\n", possible, made, groups[0].sm.smCount,
         remaining.sm.smCount);

  CUdevResourceDesc desc;
  DRIVER(cuDevResourceGenerateDesc(&desc, &groups[0], 1));
  CUgreenCtx green;
  DRIVER(cuGreenCtxCreate(&green, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM));
  CUdevResource green_sm;
  DRIVER(cuGreenCtxGetDevResource(green, &green_sm, CU_DEV_RESOURCE_TYPE_SM));
  printf("green_sms=%u\n", green_sm.sm.smCount);

  CUstream green_stream;
  DRIVER(cuGreenCtxStreamCreate(&green_stream, green, CU_STREAM_NON_BLOCKING, 0));
  CUgreenCtx of_stream = nullptr;
  DRIVER(cuStreamGetGreenCtx(green_stream, &of_stream));
  printf("stream_in_green=%d\n", of_stream == green);
  sms_used((cudaStream_t)green_stream, smids, "green_stream");

  // Current, the green context's NULL stream is its own: confined too.
  CUcontext green_as_context;
  DRIVER(cuCtxFromGreenCtx(&green_as_context, green));
  DRIVER(cuCtxPushCurrent(green_as_context));
  CUgreenCtx of_null = nullptr;
  DRIVER(cuStreamGetGreenCtx(nullptr, &of_null));
  CUstream made_while_current;
  DRIVER(cuStreamCreate(&made_while_current, CU_STREAM_NON_BLOCKING));
  CUgreenCtx of_made = nullptr;
  CUcontext ctx_of_made = nullptr;
  DRIVER(cuStreamGetCtx_v2(made_while_current, &ctx_of_made, &of_made));
  printf("null_in_green=%d made_in_green=%d\n", of_null == green, of_made == green);
  sms_used(0, smids, "green_null");
  CUexecAffinityParam affinity;
  DRIVER(cuCtxGetExecAffinity(&affinity, CU_EXEC_AFFINITY_TYPE_SM_COUNT));
  printf("current_affinity_sms=%u\n", affinity.param.smCount.val);
  unsigned long long green_id = 0, current_id = 0;
  DRIVER(cuGreenCtxGetId(green, &green_id));
  DRIVER(cuGreenCtxGetId(nullptr, &current_id));
  printf("current_green_id_matches=%d\n", green_id == current_id && green_id != 0);
  CUcontext popped;
  DRIVER(cuCtxPopCurrent(&popped));

  // An event over every stream of the green context, and a wait for it.
  CUevent all_done;
  DRIVER(cuEventCreate(&all_done, CU_EVENT_DISABLE_TIMING));
  record_smid<<<kBlocks, 64, 0, (cudaStream_t)made_while_current>>>(smids);
  DRIVER(cuGreenCtxRecordEvent(green, all_done));
  DRIVER(cuEventSynchronize(all_done));
  DRIVER(cuGreenCtxWaitEvent(green, all_done));
  printf("green_event_done=%d\n", cuEventQuery(all_done) == CUDA_SUCCESS);

  cudaStream_t ordinary;
  CHECK(cudaStreamCreateWithFlags(&ordinary, cudaStreamNonBlocking));
  sms_used(ordinary, smids, "whole");

  // What is refused.
  CUdevResource spare[4];
  unsigned spare_count = 4;
  printf("split_larger_than_device=%d\n",
         (int)cuDevSmResourceSplitByCount(spare, &spare_count, &sm, nullptr, 0, sm.sm.smCount + 1));
  spare_count = 4;
  printf("split_a_group_again=%d\n", (int)cuDevSmResourceSplitByCount(spare, &spare_count, &groups[0], nullptr, 0, 0));
  spare_count = 4;
  printf("split_unknown_flags=%d\n", (int)cuDevSmResourceSplitByCount(spare, &spare_count, &sm, nullptr, 0x80, 0));
  CUdevResource other_split[1];
  unsigned one = 1;
  DRIVER(cuDevSmResourceSplitByCount(other_split, &one, &sm, nullptr, 0, min_count));
  CUdevResource mixed[2] = {groups[1], other_split[0]};
  CUdevResourceDesc mixed_desc;
  printf("desc_of_two_splits=%d\n", (int)cuDevResourceGenerateDesc(&mixed_desc, mixed, 2));
  CUdevResourceDesc both_desc;
  DRIVER(cuDevResourceGenerateDesc(&both_desc, groups, 2));
  CUgreenCtx spare_green;
  printf("green_unknown_flags=%d\n", (int)cuGreenCtxCreate(&spare_green, desc, dev, 0x40));
  CUstream blocking_green_stream;
  printf("green_stream_blocking=%d\n", (int)cuGreenCtxStreamCreate(&blocking_green_stream, green, 0, 0));
  CUdevResource wrong_type;
  printf("resource_type_not_sm=%d\n", (int)cuDeviceGetDevResource(dev, &wrong_type, (CUdevResourceType)7));

  DRIVER(cuStreamDestroy(made_while_current));
  DRIVER(cuGreenCtxDestroy(green));
  printf("destroyed_stream_sync=%d destroyed_again=%d\n", (int)cuStreamSynchronize(green_stream),
         (int)cuGreenCtxDestroy(green));
  CHECK(cudaStreamDestroy(ordinary));
  CHECK(cudaFree(smids));
  printf("done=1\n");
  return 0;
}
