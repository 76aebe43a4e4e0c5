// Stream memory operations (cuStreamWaitValue32/64, cuStreamWriteValue32/64,
// cuStreamBatchMemOp) as NCCL-style code uses them, from an nvcc-compiled program
// calling the driver API next to the runtime:
//   stream_memory_ops basics   the device attributes; a stream that waits on a flag in
//                              device memory holds its kernel while another stream's
//                              kernel and copy finish; a write on that other stream
//                              releases it; each condition (GEQ, EQ, AND, NOR) at 32
//                              and 64 bits; a wait on pinned host memory the CPU then
//                              writes; writes read back; a batch of writes and a wait;
//                              what must fail (an address the job does not own, a
//                              misaligned one, unknown flags, a remote-write flush)
//   stream_memory_ops forever  a stream waits on a value nobody writes, with a kernel
//                              behind it; prints waiting=1, then synchronizes with it
//                              (forever, unless the job is evicted or killed)
//   stream_memory_ops exits    the same, then returns from main at once
// Prints key=value lines; exits 0 unless the setup itself fails.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cuda.h>
#include <cuda_runtime.h>
#include <unistd.h>

#include "driver_call.h"
#include "runtime_check.h"

__global__ void mark(unsigned* out, unsigned value) { *out = value; }

static CUdeviceptr dptr(const void* p) { return (CUdeviceptr)(uintptr_t)p; }

// Whether `stream` is still held after a pause in which it could have run.
static int held(cudaStream_t stream) {
  usleep(200 * 1000);
  cudaError_t q = cudaStreamQuery(stream);
  return q == cudaErrorNotReady;
}

// One wait with `flags` against `wanted`, released by writing `release` from another
// stream: 1 when it held until then and went on after.
static int condition_case(cudaStream_t waiting, cudaStream_t other, void* flag, unsigned out_value,
                          unsigned* out, bool wide, uint64_t start, uint64_t wanted, uint64_t release,
                          unsigned flags) {
  if (wide) {
    DRIVER(cuStreamWriteValue64(other, dptr(flag), start, 0));
  } else {
    DRIVER(cuStreamWriteValue32(other, dptr(flag), (cuuint32_t)start, 0));
  }
  CHECK(cudaStreamSynchronize(other));
  if (wide) {
    DRIVER(cuStreamWaitValue64(waiting, dptr(flag), wanted, flags));
  } else {
    DRIVER(cuStreamWaitValue32(waiting, dptr(flag), (cuuint32_t)wanted, flags));
  }
  mark<<<1, 1, 0, waiting>>>(out, out_value);
  int was_held = held(waiting);
  if (wide) {
    DRIVER(cuStreamWriteValue64(other, dptr(flag), release, 0));
  } else {
    DRIVER(cuStreamWriteValue32(other, dptr(flag), (cuuint32_t)release, 0));
  }
  CHECK(cudaStreamSynchronize(waiting));
  unsigned seen = 0;
  CHECK(cudaMemcpy(&seen, out, sizeof seen, cudaMemcpyDeviceToHost));
  return was_held && seen == out_value;
}

static int basics() {
  CHECK(cudaFree(0));
  CUdevice dev;
  DRIVER(cuDeviceGet(&dev, 0));
  int ops = 0, ops64 = 0, nor = 0, ops_v2 = 0, nor_v2 = 0, flush = -1;
  DRIVER(cuDeviceGetAttribute(&ops, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, dev));
  DRIVER(cuDeviceGetAttribute(&ops64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS_V1, dev));
  DRIVER(cuDeviceGetAttribute(&nor, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR_V1, dev));
  DRIVER(cuDeviceGetAttribute(&ops_v2, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, dev));
  DRIVER(cuDeviceGetAttribute(&nor_v2, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, dev));
  DRIVER(cuDeviceGetAttribute(&flush, CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, dev));
  printf("attributes=%d%d%d%d%d can_flush=%d\n", ops, ops64, nor, ops_v2, nor_v2, flush);

  cudaStream_t waiting, other;
  CHECK(cudaStreamCreateWithFlags(&waiting, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking));
  uint64_t* flag = nullptr;
  unsigned* out = nullptr;
  CHECK(cudaMalloc(&flag, 64));
  CHECK(cudaMalloc(&out, 64));
  CHECK(cudaMemset(flag, 0, 64));
  CHECK(cudaMemset(out, 0, 64));

  // The waiting stream holds; the other stream's kernel and copy run meanwhile.
  DRIVER(cuStreamWaitValue32(waiting, dptr(flag), 1, CU_STREAM_WAIT_VALUE_GEQ));
  mark<<<1, 1, 0, waiting>>>(out, 11);
  mark<<<1, 1, 0, other>>>(out + 1, 22);
  unsigned other_seen = 0;
  CHECK(cudaMemcpyAsync(&other_seen, out + 1, sizeof other_seen, cudaMemcpyDeviceToHost, other));
  CHECK(cudaStreamSynchronize(other));
  printf("other_stream_ran=%d held=%d\n", other_seen == 22, held(waiting));
  DRIVER(cuStreamWriteValue32(other, dptr(flag), 1, 0));
  CHECK(cudaStreamSynchronize(waiting));
  unsigned seen = 0;
  CHECK(cudaMemcpy(&seen, out, sizeof seen, cudaMemcpyDeviceToHost));
  printf("released=%d\n", seen == 11);

  printf("geq32=%d eq32=%d and32=%d nor32=%d\n",
         condition_case(waiting, other, flag, 1, out, false, 5, 7, 9, CU_STREAM_WAIT_VALUE_GEQ),
         condition_case(waiting, other, flag, 2, out, false, 6, 7, 7, CU_STREAM_WAIT_VALUE_EQ),
         condition_case(waiting, other, flag, 3, out, false, 0x10, 0x6, 0x4, CU_STREAM_WAIT_VALUE_AND),
         condition_case(waiting, other, flag, 4, out, false, 0xFFFFFFFEu, 0x1, 0x0, CU_STREAM_WAIT_VALUE_NOR));
  const uint64_t big = 0x100000000ull;
  printf("geq64=%d eq64=%d and64=%d nor64=%d\n",
         condition_case(waiting, other, flag, 5, out, true, big, big + 3, big + 4, CU_STREAM_WAIT_VALUE_GEQ),
         condition_case(waiting, other, flag, 6, out, true, 1, big, big, CU_STREAM_WAIT_VALUE_EQ),
         condition_case(waiting, other, flag, 7, out, true, 1, big << 4, big << 4, CU_STREAM_WAIT_VALUE_AND),
         condition_case(waiting, other, flag, 8, out, true, ~0ull, 0x1, 0x0, CU_STREAM_WAIT_VALUE_NOR));

  // A wait on pinned host memory that the CPU writes.
  volatile unsigned* host_flag = nullptr;
  CHECK(cudaHostAlloc((void**)&host_flag, 4096, cudaHostAllocMapped));
  *host_flag = 0;
  void* host_flag_dev = nullptr;
  CHECK(cudaHostGetDevicePointer(&host_flag_dev, (void*)host_flag, 0));
  DRIVER(cuStreamWaitValue32(waiting, dptr(host_flag_dev), 3, CU_STREAM_WAIT_VALUE_EQ));
  mark<<<1, 1, 0, waiting>>>(out, 33);
  int host_held = held(waiting);
  *host_flag = 3;
  CHECK(cudaStreamSynchronize(waiting));
  CHECK(cudaMemcpy(&seen, out, sizeof seen, cudaMemcpyDeviceToHost));
  printf("host_wait_held=%d host_wait_released=%d\n", host_held, seen == 33);

  // Writes read back; a batch writes both widths, then waits on what it wrote.
  CUstreamBatchMemOpParams batch[3];
  memset(batch, 0, sizeof batch);
  batch[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  batch[0].writeValue.address = dptr(flag);
  batch[0].writeValue.value = 0xabcdef01u;
  batch[1].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
  batch[1].writeValue.address = dptr(flag + 1);
  batch[1].writeValue.value64 = 0x1122334455667788ull;
  batch[2].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  batch[2].waitValue.address = dptr(flag);
  batch[2].waitValue.value = 0xabcdef01u;
  batch[2].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
  DRIVER(cuStreamBatchMemOp(waiting, 3, batch, 0));
  CHECK(cudaStreamSynchronize(waiting));
  uint64_t words[2] = {0, 0};
  CHECK(cudaMemcpy(words, flag, sizeof words, cudaMemcpyDeviceToHost));
  printf("batch_written=%d\n", (unsigned)words[0] == 0xabcdef01u && words[1] == 0x1122334455667788ull);

  // Captured into a graph: a write, a wait on it and a kernel, replayed twice.
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CHECK(cudaMemset(out, 0, 64));
  CHECK(cudaStreamBeginCapture(waiting, cudaStreamCaptureModeGlobal));
  DRIVER(cuStreamWriteValue32(waiting, dptr(flag), 41, 0));
  DRIVER(cuStreamWaitValue32(waiting, dptr(flag), 41, CU_STREAM_WAIT_VALUE_EQ));
  mark<<<1, 1, 0, waiting>>>(out + 2, 44);
  CHECK(cudaStreamEndCapture(waiting, &graph));
  size_t nodes = 0;
  CHECK(cudaGraphGetNodes(graph, nullptr, &nodes));
  cudaGraphNode_t first[3];
  CHECK(cudaGraphGetRootNodes(graph, first, &nodes));
  CUgraphNodeType root_type;
  DRIVER(cuGraphNodeGetType((CUgraphNode)first[0], &root_type));
  CHECK(cudaGraphInstantiate(&exec, graph, 0));
  CHECK(cudaGraphLaunch(exec, waiting));
  CHECK(cudaGraphLaunch(exec, waiting));
  CHECK(cudaStreamSynchronize(waiting));
  CHECK(cudaMemcpy(&seen, out + 2, sizeof seen, cudaMemcpyDeviceToHost));
  printf("captured_root_is_mem_op=%d captured_ran=%d\n", root_type == CU_GRAPH_NODE_TYPE_BATCH_MEM_OP, seen == 44);
  CUDA_BATCH_MEM_OP_NODE_PARAMS captured_params;
  DRIVER(cuGraphBatchMemOpNodeGetParams((CUgraphNode)first[0], &captured_params));
  printf("captured_params=%d\n", captured_params.count == 1 &&
         captured_params.paramArray[0].operation == CU_STREAM_MEM_OP_WRITE_VALUE_32 &&
         captured_params.paramArray[0].writeValue.value == 41);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(graph));

  // Built node by node: a batch-mem-op node (a write and a wait on it), then a memset after it;
  // its operations read back, changed, and the graph run.
  CUgraph built;
  DRIVER(cuGraphCreate(&built, 0));
  CUstreamBatchMemOpParams node_ops[2];
  memset(node_ops, 0, sizeof node_ops);
  node_ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  node_ops[0].writeValue.address = dptr(flag);
  node_ops[0].writeValue.value = 51;
  node_ops[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  node_ops[1].waitValue.address = dptr(flag);
  node_ops[1].waitValue.value = 51;
  node_ops[1].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
  CUDA_BATCH_MEM_OP_NODE_PARAMS node_params;
  memset(&node_params, 0, sizeof node_params);
  node_params.count = 2;
  node_params.paramArray = node_ops;
  CUgraphNode mem_op_node, memset_node;
  DRIVER(cuGraphAddBatchMemOpNode(&mem_op_node, built, nullptr, 0, &node_params));
  CUDA_MEMSET_NODE_PARAMS fill;
  memset(&fill, 0, sizeof fill);
  fill.dst = dptr(out + 3);
  fill.value = 77;
  fill.elementSize = 4;
  fill.width = 1;
  fill.height = 1;
  CUcontext ctx;
  DRIVER(cuCtxGetCurrent(&ctx));
  DRIVER(cuGraphAddMemsetNode(&memset_node, built, &mem_op_node, 1, &fill, ctx));
  CUDA_BATCH_MEM_OP_NODE_PARAMS read_back;
  DRIVER(cuGraphBatchMemOpNodeGetParams(mem_op_node, &read_back));
  int params_ok = read_back.count == 2 && read_back.paramArray[1].waitValue.value == 51;
  node_ops[0].writeValue.value = 52;
  node_ops[1].waitValue.value = 52;
  DRIVER(cuGraphBatchMemOpNodeSetParams(mem_op_node, &node_params));
  CUgraphExec built_exec;
  DRIVER(cuGraphInstantiate(&built_exec, built, 0));
  DRIVER(cuGraphLaunch(built_exec, (CUstream)waiting));
  CHECK(cudaStreamSynchronize(waiting));
  unsigned flag_now = 0, filled = 0;
  CHECK(cudaMemcpy(&flag_now, flag, sizeof flag_now, cudaMemcpyDeviceToHost));
  CHECK(cudaMemcpy(&filled, out + 3, sizeof filled, cudaMemcpyDeviceToHost));
  printf("node_params=%d node_ran=%d\n", params_ok, flag_now == 52 && filled == 77);
  // The instantiated graph takes new operations for the node.
  node_ops[0].writeValue.value = 53;
  node_ops[1].waitValue.value = 53;
  DRIVER(cuGraphExecBatchMemOpNodeSetParams(built_exec, mem_op_node, &node_params));
  DRIVER(cuGraphLaunch(built_exec, (CUstream)waiting));
  CHECK(cudaStreamSynchronize(waiting));
  CHECK(cudaMemcpy(&flag_now, flag, sizeof flag_now, cudaMemcpyDeviceToHost));
  printf("exec_updated=%d\n", flag_now == 53);
  DRIVER(cuGraphExecDestroy(built_exec));
  DRIVER(cuGraphDestroy(built));

  // What the driver refuses.
  printf("foreign_address=%d\n", (int)cuStreamWaitValue32(waiting, 0x10, 1, CU_STREAM_WAIT_VALUE_EQ));
  printf("beyond_allocation=%d\n", (int)cuStreamWriteValue32(waiting, dptr(out) + 4096, 1, 0));
  printf("misaligned=%d\n", (int)cuStreamWaitValue64(waiting, dptr(flag) + 4, 1, CU_STREAM_WAIT_VALUE_EQ));
  printf("bad_flags=%d\n", (int)cuStreamWriteValue32(waiting, dptr(flag), 1, 0x10));
  printf("flush=%d\n", (int)cuStreamWaitValue32(waiting, dptr(flag), 1, CU_STREAM_WAIT_VALUE_FLUSH));
  CHECK(cudaStreamSynchronize(waiting));   // nothing of the refused calls was queued
  printf("still_usable=1\n");
  return 0;
}

static int forever(bool exit_at_once) {
  cudaStream_t stream;
  CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  unsigned* flag = nullptr;
  CHECK(cudaMalloc(&flag, 8));
  CHECK(cudaMemset(flag, 0, 8));
  CHECK(cudaDeviceSynchronize());
  DRIVER(cuStreamWaitValue32(stream, dptr(flag), 1, CU_STREAM_WAIT_VALUE_EQ));
  mark<<<1, 1, 0, stream>>>(flag + 1, 1);
  printf("waiting=1\n");
  fflush(stdout);
  if (exit_at_once) return 0;     // leaves the wait behind: exiting must not wait for it
  cudaError_t e = cudaStreamSynchronize(stream);
  printf("synchronize=%d\n", (int)e);
  return 0;
}

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const char* mode = argc > 1 ? argv[1] : "basics";
  if (strcmp(mode, "basics") == 0) return basics();
  if (strcmp(mode, "forever") == 0) return forever(false);
  if (strcmp(mode, "exits") == 0) return forever(true);
  fprintf(stderr, "unknown mode %s\n", mode);
  return 2;
}
